"""py-spy (a sampling profiler, `.venv/bin/pip install -e '.[dev]'`) for the benchmarks: record a
process in py-spy's raw (collapsed stacks) format and sum the samples per function."""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator


def py_spy_path() -> str | None:
    return shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")


@contextlib.contextmanager
def recording(py_spy: str, pid: int, out: str, rate: int = 200, gil_only: bool = False) -> Iterator[None]:
    """Sample `pid` (every thread, without pausing it) while the block runs; the raw profile is in
    `out` afterwards. py-spy writes it when interrupted, as after Ctrl-C. `gil_only`: only the
    thread holding the GIL, which is where the process spends CPU on Python (waits in fsync or
    epoll, which py-spy otherwise counts, drop out)."""
    spy = subprocess.Popen([py_spy, "record", "--format", "raw", "--rate", str(rate), "--nonblocking", "--threads",
                            *(["--gil"] if gil_only else []), "-o", out, "--pid", str(pid)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)


def function_name(frame: str) -> str:
    # py-spy raw frames: "name (path/file.py:line)"
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    file = where.rsplit(":", 1)[0]
    for marker in ("velamq/", "asyncio/", "site-packages/"):
        if marker in file:
            file = file[file.index(marker):]
            break
    else:
        file = os.path.basename(file)
    return f"{name} ({file})"


def summarise(raw: str, top: int) -> tuple[int, list[tuple[str, int, int]]]:
    """(samples, [(function, own samples, samples including callees)]) for the `top` functions by
    own samples. With --threads the first frame of each stack names the thread and is skipped."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [function_name(f) for f in stack.split(";")[1:]]  # the first is the thread
        if not frames:
            continue
        samples += count
        own[frames[-1]] += count
        for name in set(frames):
            total[name] += count
    rows = [(name, own[name], total[name]) for name, _ in own.most_common(top)]
    return samples, rows


def top_table(raw: str, top: int) -> tuple[int, list[str]]:
    """(samples, markdown table lines) of the `top` functions: own and total share of the samples."""
    samples, rows = summarise(raw, top)
    lines = ["| function | self | total |", "|---|---|---|"]
    for name, own, total in rows:
        lines.append(f"| `{name}` | {own / max(samples, 1):.0%} | {total / max(samples, 1):.0%} |")
    return samples, lines


def thread_shares(raw: str) -> list[str]:
    """'name: share' of the samples per thread (py-spy's first frame names the thread), largest first."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if stack and count_text.isdigit():
            thread = stack.split(";", 1)[0]
            counts[thread.split(": ", 1)[-1].rstrip(")").strip() or thread] += int(count_text)
    total = max(sum(counts.values()), 1)
    return [f"{name}: {count / total:.0%}" for name, count in counts.most_common()]
