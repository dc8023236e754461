"""A small asyncio HTTP/1.1 client for the calls one worker's admin server makes to another's.

    reply = await peer_request("GET", "http://127.0.0.1:8081/metrics?local=true", timeout_s=5.0)
    reply.status, reply.headers["content-type"], reply.body

With several worker processes (docs/workers.md) a worker gathers what its peers hold: their
/metrics, the stats of partitions they own, per-partition operations of a partitioned topic. The
peers are velamq admin servers, so the client needs little: one request per connection
(`Connection: close`), a body framed by Content-Length, chunked transfer coding or the end of the
connection, at most `reply_bytes_max`, and 307/308 redirects followed with the same method and body
(a bundle may move while the call is on its way). The caller's Authorization header travels with
the request, so the peer checks the same credentials and rights. Failures are PeerError: a peer
that cannot be reached, does not answer within `timeout_s`, or answers something that is not HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urljoin, urlsplit

from velamq._errors import VelamqError
from velamq._limits import MIB

reply_bytes_max: Final = 64 * MIB  # a /metrics page of many topics is the largest reply
header_bytes_max: Final = 64 * 1024
redirects_max: Final = 3
peer_timeout_s_default: Final = 10.0


class PeerError(VelamqError):
    """A peer worker that could not be asked: unreachable, too slow, or not speaking HTTP."""


@dataclass(frozen=True, slots=True)
class PeerReply:
    status: int
    headers: Mapping[str, str]  # lower-case names, the last value of each
    body: bytes


async def peer_request(
    method: str,
    url: str,
    *,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    timeout_s: float = peer_timeout_s_default,
    ssl_context: ssl.SSLContext | None = None,
) -> PeerReply:
    """One request (following up to `redirects_max` 307/308 redirects); PeerError if it fails."""
    try:
        async with asyncio.timeout(timeout_s):
            for _ in range(redirects_max + 1):
                reply = await _exchange(method, url, body, headers or {}, ssl_context)
                location = reply.headers.get("location")
                if reply.status not in (307, 308) or not location:
                    return reply
                url = urljoin(url, location)
            raise PeerError(f"{method} {url}: more than {redirects_max} redirects")
    except TimeoutError:
        raise PeerError(f"{method} {url}: no answer within {timeout_s:g} s") from None


async def _exchange(
    method: str, url: str, body: bytes, headers: Mapping[str, str], ssl_context: ssl.SSLContext | None
) -> PeerReply:
    split = urlsplit(url)
    if split.scheme not in ("http", "https") or not split.hostname:
        raise PeerError(f"not an http(s) URL: {url!r}")
    tls = split.scheme == "https"
    port = split.port or (443 if tls else 80)
    target = (split.path or "/") + (f"?{split.query}" if split.query else "")
    context = (ssl_context or ssl.create_default_context()) if tls else None
    try:
        reader, writer = await asyncio.open_connection(split.hostname, port, ssl=context, limit=header_bytes_max)
    except (OSError, ssl.SSLError) as exc:
        raise PeerError(f"cannot reach {split.scheme}://{split.netloc}: {exc}") from None
    try:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {split.netloc}", "Connection: close",
                 f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        return await _read_reply(reader)
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError, ValueError) as exc:
        raise PeerError(f"{method} {url}: {exc or type(exc).__name__}") from None
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _read_reply(reader: asyncio.StreamReader) -> PeerReply:
    status_line = (await reader.readline()).decode("latin-1").rstrip("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise PeerError(f"not an HTTP reply: {status_line[:100]!r}")
    headers: dict[str, str] = {}
    size = 0
    while line := (await reader.readline()).decode("latin-1").rstrip("\r\n"):
        size += len(line)
        if size > header_bytes_max:
            raise PeerError("reply headers too large")
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    status = int(parts[1])
    if status in (204, 304) or 100 <= status < 200:
        return PeerReply(status, headers, b"")
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        length = int(headers["content-length"])
        if length > reply_bytes_max:
            raise PeerError(f"reply of {length} bytes is over {reply_bytes_max}")
        body = await reader.readexactly(length)
    else:
        body = await reader.read(reply_bytes_max + 1)
        if len(body) > reply_bytes_max:
            raise PeerError(f"reply over {reply_bytes_max} bytes")
    return PeerReply(status, headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size = int((await reader.readline()).split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readline()).strip():
                pass  # trailer fields
            return bytes(body)
        if len(body) + size > reply_bytes_max:
            raise PeerError(f"reply over {reply_bytes_max} bytes")
        body += await reader.readexactly(size)
        await reader.readexactly(2)
