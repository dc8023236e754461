"""Headless Chromium driven over the DevTools protocol on a pipe: open pages, click, read the DOM,
take screenshots. No Selenium, no WebDriver, no Python dependency: Chromium's own
--remote-debugging-pipe speaks JSON messages, each ended by a NUL byte, on file descriptors 3
(commands in) and 4 (answers and events out).

    with Chromium() as browser:
        browser.open("http://127.0.0.1:8080/")
        browser.text("h1")                      # document.querySelector("h1").textContent
        browser.click("a[rel=next]")            # and wait for the page it leads to
        browser.screenshot(Path("page.png"))

Debian's package is `chromium` (/usr/bin/chromium); `make test` installs it. Every wait has a
deadline and fails the test with what was awaited, instead of hanging.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

# The flags that work in CI containers: no sandbox (we run as root), no GPU, nothing that talks to
# the network on its own, a profile of its own.
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe",
)
wait_s = 30.0


class BrowserError(AssertionError):
    """The browser answered an error, went away, or a wait ran past its deadline."""


def chromium_executable() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise BrowserError("chromium is not installed: `make test` installs it (apt-get install -y chromium)")
    return found


class Chromium:
    """One headless browser with one page (tab)."""

    def __init__(self, width: int = 1280, height: int = 900) -> None:
        self._width = width
        self._height = height
        self._profile = tempfile.mkdtemp(prefix="velamq-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # bash puts our pipe ends on fds 3 and 4, where Chromium looks for them (dash cannot: it
        # only knows one-digit fds).
        command = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}'
        self._proc = subprocess.Popen(
            ["bash", "-c", command, chromium_executable(), *FLAGS, f"--user-data-dir={self._profile}",
             f"--window-size={width},{height}", "about:blank"],
            pass_fds=(to_browser_r, from_browser_w), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.loads = 0  # Page.loadEventFired seen so far
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")

    # ---- the protocol ----------------------------------------------------------------------------

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise BrowserError("no answer from chromium before the deadline")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise BrowserError("chromium closed the pipe (it exited)")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        if message.get("method") == "Page.loadEventFired":
            self.loads += 1
        return message

    def _call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + wait_s
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._next_id:  # anything else is an event (counted above)
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """A DevTools command on the page's session."""
        return self._call(method, params, self._session)

    def _wait_for_load(self, loads_before: int) -> None:
        deadline = time.monotonic() + wait_s
        while self.loads <= loads_before:
            self._read_message(deadline)
        self.evaluate("document.readyState")  # the new document answers

    # ---- what tests use --------------------------------------------------------------------------

    def open(self, url: str) -> None:
        """Navigate and wait until the page has loaded."""
        before = self.loads
        result = self.call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"cannot open {url}: {result['errorText']}")
        self._wait_for_load(before)

    def evaluate(self, expression: str) -> Any:
        """A JavaScript expression in the page, its value returned as JSON."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} failed: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def text(self, selector: str) -> str | None:
        """textContent of the first element matching selector, stripped; None if there is none."""
        return self.evaluate(  # type: ignore[no-any-return]
            f"(e => e === null ? null : e.textContent.trim())(document.querySelector({json.dumps(selector)}))"
        )

    def attribute(self, selector: str, name: str) -> str | None:
        return self.evaluate(  # type: ignore[no-any-return]
            f"(e => e === null ? null : e.getAttribute({json.dumps(name)}))"
            f"(document.querySelector({json.dumps(selector)}))"
        )

    def all_attributes(self, selector: str, name: str) -> list[str]:
        return self.evaluate(  # type: ignore[no-any-return]
            f"Array.from(document.querySelectorAll({json.dumps(selector)}), e => e.getAttribute({json.dumps(name)}))"
        )

    def count(self, selector: str) -> int:
        return int(self.evaluate(f"document.querySelectorAll({json.dumps(selector)}).length"))

    @property
    def url(self) -> str:
        return str(self.evaluate("location.href"))

    def click(self, selector: str) -> None:
        """Click the element (a link or a button) and wait for the page it leads to."""
        before = self.loads
        found = self.evaluate(
            f"(e => {{ if (e === null) return false; e.click(); return true; }})"
            f"(document.querySelector({json.dumps(selector)}))"
        )
        if not found:
            raise BrowserError(f"nothing to click at {selector!r} on {self.url}")
        self._wait_for_load(before)

    def type_into(self, selector: str, text: str) -> None:
        """Set the value of an input, as typing would."""
        done = self.evaluate(
            f"(e => {{ if (e === null) return false; e.focus(); e.value = {json.dumps(text)}; return true; }})"
            f"(document.querySelector({json.dumps(selector)}))"
        )
        if not done:
            raise BrowserError(f"no input at {selector!r} on {self.url}")

    def screenshot(self, path: Path, full_page: bool = True) -> None:
        """A PNG of the page (all of it with full_page, up to 6000 px high)."""
        if full_page:
            height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
            self.call("Emulation.setDeviceMetricsOverride", {
                "width": self._width, "height": min(max(height, self._height), 6000),
                "deviceScaleFactor": 1, "mobile": False,
            })
        try:
            data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        finally:
            if full_page:
                self.call("Emulation.clearDeviceMetricsOverride")
        path.write_bytes(base64.b64decode(data))

    # ---- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        try:
            self._call("Browser.close")
        except BrowserError:
            pass  # it is going away either way
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
