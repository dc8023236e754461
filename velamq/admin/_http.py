"""HTTP/1.1 on asyncio streams: read one request, write one response (RFC 9112 subset).

What is accepted:

    request-line   METHOD SP origin-form|absolute-form SP HTTP/1.x CRLF   (bare LF tolerated)
    header fields  name ":" OWS value OWS CRLF   ... CRLF                  (no obs-fold)
    body           Content-Length: N  |  Transfer-Encoding: chunked  |  none

What is refused, and how (the connection is closed after each, since its framing can't be trusted):

    garbage, bad header, bad or conflicting Content-Length, both CL and TE  400
    request line over request_line_bytes_max                                414
    header section over header_bytes_max or header_count_max fields         431
    body (declared or chunked) over body_bytes_max                          413
    Transfer-Encoding other than chunked, Expect other than 100-continue    501 / 417
    HTTP/2+ request line                                                    505
    no complete head within head_timeout_s, no body within body_timeout_s   408

A connection that goes idle between requests for idle_timeout_s is closed without a response.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

from velamq._errors import VelamqError
from velamq._limits import KIB, MIB

request_line_bytes_max: Final = 8 * KIB
header_bytes_max: Final = 64 * KIB
header_count_max: Final = 128
body_bytes_max: Final = 5 * MIB
chunk_line_bytes_max: Final = 1 * KIB
query_fields_max: Final = 64
# The StreamReader's line limit: no single line may exceed the whole header section's budget.
stream_limit_bytes: Final = header_bytes_max

idle_timeout_s: Final = 60.0
head_timeout_s: Final = 30.0
body_timeout_s: Final = 30.0
write_timeout_s: Final = 30.0

# Used with fullmatch: "$" would also match before a trailing newline.
_TOKEN_RE: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION_RE: Final = re.compile(rb"HTTP/([0-9])\.([0-9])")
_CONTENT_LENGTH_RE: Final = re.compile(r"[0-9]{1,19}")
_CHUNK_SIZE_RE: Final = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(;[^\r\n]*)?")
_TARGET_RE: Final = re.compile(rb"[\x21-\x7e]+")  # visible ASCII, no spaces or controls


class HttpError(VelamqError):
    """A request that gets an error status. `close` ends the connection after the response."""

    def __init__(
        self, status: int, reason: str, *, close: bool = False, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.close = close
        self.headers = headers


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str
    path: str  # as sent, still percent-encoded
    segments: tuple[str, ...]  # path split on "/" and then percent-decoded, one trailing "/" ignored
    query: Mapping[str, list[str]]
    version: tuple[int, int]
    headers: Mapping[str, list[str]]  # lower-case names
    body: bytes = b""

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return values[-1] if values else None

    def query_param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for v in self.headers.get("connection", []) for t in v.split(",")}
        if self.version >= (1, 1):
            return "close" not in tokens
        return "keep-alive" in tokens

    def json(self) -> Any:
        """The body as JSON (NaN/Infinity refused, as JSON has none); 400 if it is not JSON."""
        try:
            return json.loads(self.body.decode("utf-8"), parse_constant=_refuse_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise HttpError(400, f"Request body is not valid JSON: {str(exc)[:200]}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _client_bytes(value: Any) -> str:
    """Bytes a client gave that reached a reply (the broker refuses non-UTF-8 names, but data stored
    by an older version may hold them): shown with escapes rather than failing the whole reply."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "backslashreplace")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False  # end the connection after this response

    @classmethod
    def json(cls, value: Any, status: int = 200) -> Response:
        body = json.dumps(value, separators=(",", ":"), allow_nan=False, default=_client_bytes).encode()
        return cls(status, body, "application/json")

    @classmethod
    def text(cls, text: str, status: int = 200, content_type: str = "text/plain; charset=utf-8") -> Response:
        return cls(status, text.encode(), content_type)

    @classmethod
    def no_content(cls) -> Response:
        return cls(204)

    @classmethod
    def error(
        cls, status: int, reason: str, *, close: bool = False, headers: tuple[tuple[str, str], ...] = ()
    ) -> Response:
        """Pulsar's error shape: {"reason": "..."}."""
        body = json.dumps({"reason": reason}, separators=(",", ":")).encode()
        return cls(status, body, "application/json", headers, close)


@dataclass(slots=True)
class _Head:
    method: str
    target: str
    version: tuple[int, int]
    headers: dict[str, list[str]] = field(default_factory=dict)


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Request | None:
    """The next request on the connection, or None if the peer closed or idled out between requests.

    Raises HttpError (with close=True) for anything malformed or over a limit.
    """
    # asyncio.timeout, not wait_for: a deadline on this task instead of a task of its own per
    # step (three per request, each a task, a timer and loop turns).
    first = await _first_line(reader)
    if first is None:
        return None
    try:
        async with asyncio.timeout(head_timeout_s):
            head = await _read_head(reader, first)
    except TimeoutError:
        raise HttpError(408, "Request header timeout", close=True) from None
    path, segments, query = _parse_target(head.target)
    if "transfer-encoding" not in head.headers and "content-length" not in head.headers:
        body = b""  # a request without either has no body (RFC 9112 §6.3): nothing to wait for
    else:
        try:
            async with asyncio.timeout(body_timeout_s):
                body = await _read_body(reader, writer, head)
        except TimeoutError:
            raise HttpError(408, "Request body timeout", close=True) from None
    return Request(head.method, head.target, path, segments, query, head.version, head.headers, body)


async def _first_line(reader: asyncio.StreamReader) -> bytes | None:
    # RFC 9112 §2.2: ignore at least one empty line before a request-line.
    for _ in range(4):
        try:
            async with asyncio.timeout(idle_timeout_s):
                line = await reader.readline()
        except TimeoutError:
            return None
        except ValueError:
            raise HttpError(414, "Request line too long", close=True) from None
        if not line:
            return None  # clean close between requests
        if line.strip(b"\r\n"):
            return line
    raise HttpError(400, "Bad request: empty lines", close=True)


async def _readline(reader: asyncio.StreamReader, what: str, status_if_long: int) -> bytes:
    try:
        line = await reader.readline()
    except ValueError:
        raise HttpError(status_if_long, f"{what} too long", close=True) from None
    if not line.endswith(b"\n"):
        raise HttpError(400, f"Connection closed in the middle of the {what.lower()}", close=True)
    return line[:-2] if line.endswith(b"\r\n") else line[:-1]


async def _read_head(reader: asyncio.StreamReader, first: bytes) -> _Head:
    if not first.endswith(b"\n"):
        raise HttpError(400, "Connection closed in the middle of the request line", close=True)
    if len(first) > request_line_bytes_max:
        raise HttpError(414, "Request line too long", close=True)
    parts = first.rstrip(b"\r\n").split(b" ")
    if len(parts) != 3 or not _TOKEN_RE.fullmatch(parts[0]) or not _TARGET_RE.fullmatch(parts[1]):
        raise HttpError(400, "Bad request line", close=True)
    version = _VERSION_RE.fullmatch(parts[2])
    if version is None:
        raise HttpError(400, "Bad HTTP version", close=True)
    if version.group(1) != b"1":
        raise HttpError(505, "HTTP version not supported", close=True)
    head = _Head(parts[0].decode("ascii"), parts[1].decode("ascii"), (1, int(version.group(2))))

    header_bytes = 0
    count = 0
    while True:
        # _readline inlined, on readuntil: two coroutines less per header line (either error
        # closes the connection, so nothing needs to be consumed as readline would).
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise HttpError(431, "Header section too long", close=True) from None
        except asyncio.IncompleteReadError:
            raise HttpError(400, "Connection closed in the middle of the header section", close=True) from None
        line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        header_bytes += len(line) + 2
        if header_bytes > header_bytes_max:
            raise HttpError(431, "Request header fields too large", close=True)
        if not line:
            return head
        count += 1
        if count > header_count_max:
            raise HttpError(431, "Too many request header fields", close=True)
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN_RE.fullmatch(name):  # also refuses obs-fold and "name :" (RFC 9112 §5.1)
            raise HttpError(400, "Bad header field", close=True)
        text = value.strip(b" \t").decode("latin-1")
        if "\r" in text or "\n" in text or "\x00" in text:
            raise HttpError(400, "Bad header field value", close=True)
        head.headers.setdefault(name.decode("ascii").lower(), []).append(text)


def _parse_target(target: str) -> tuple[str, tuple[str, ...], dict[str, list[str]]]:
    if target.startswith("/"):
        path, _, query = target.partition("?")
    elif target.startswith(("http://", "https://")):
        split = urlsplit(target)
        path, query = split.path or "/", split.query
    else:
        raise HttpError(400, "Bad request target", close=True)
    path = path.partition("#")[0]
    raw = path.split("/")[1:]
    if len(raw) > 1 and raw[-1] == "":
        raw = raw[:-1]
    try:
        segments = tuple(unquote(s, errors="strict") for s in raw)
        fields = parse_qs(query, keep_blank_values=True, errors="strict", max_num_fields=query_fields_max)
    except (UnicodeDecodeError, ValueError):
        raise HttpError(400, "Bad percent-encoding or too many query fields", close=True) from None
    return path, segments, fields


async def _read_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: _Head) -> bytes:
    te = head.headers.get("transfer-encoding")
    cl = head.headers.get("content-length")
    if te is not None and cl is not None:
        raise HttpError(400, "Both Content-Length and Transfer-Encoding", close=True)
    length: int | None = None
    if te is not None:
        codings = [c.strip().lower() for v in te for c in v.split(",") if c.strip()]
        if codings != ["chunked"]:
            raise HttpError(501, "Only Transfer-Encoding: chunked is supported", close=True)
    elif cl is not None:
        values = {v.strip() for item in cl for v in item.split(",")}
        if len(values) != 1 or not _CONTENT_LENGTH_RE.fullmatch(next(iter(values))):
            raise HttpError(400, "Bad Content-Length", close=True)
        length = int(next(iter(values)))
        if length > body_bytes_max:
            raise HttpError(413, f"Request body larger than {body_bytes_max} bytes", close=True)
    else:
        return b""  # a request without either has no body (RFC 9112 §6.3)

    expect = head.headers.get("expect")
    if expect is not None:
        if [e.strip().lower() for e in expect] != ["100-continue"]:
            raise HttpError(417, "Expectation failed", close=True)
        if head.version >= (1, 1) and length != 0:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()

    try:
        if length is not None:
            return await reader.readexactly(length)
        return await _read_chunked(reader)
    except asyncio.IncompleteReadError:
        raise HttpError(400, "Connection closed in the middle of the body", close=True) from None


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        line = await _readline(reader, "Chunk size line", 400)
        if len(line) > chunk_line_bytes_max:
            raise HttpError(400, "Chunk size line too long", close=True)
        match = _CHUNK_SIZE_RE.fullmatch(line)
        if match is None:
            raise HttpError(400, "Bad chunk size", close=True)
        size = int(match.group(1), 16)
        if size == 0:
            break
        if len(body) + size > body_bytes_max:
            raise HttpError(413, f"Request body larger than {body_bytes_max} bytes", close=True)
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise HttpError(400, "Chunk not followed by CRLF", close=True)
    trailer_bytes = 0
    while True:  # trailer fields: read and ignore, within the header budget
        line = await _readline(reader, "Trailer section", 431)
        trailer_bytes += len(line) + 2
        if trailer_bytes > header_bytes_max:
            raise HttpError(431, "Trailer section too large", close=True)
        if not line:
            return bytes(body)


def _reason_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


class _DateHeader:
    """The Date header's value (one-second resolution), formatted once per second, not per response."""

    __slots__ = ("_second", "_text")

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def now(self) -> str:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second, self._text = second, formatdate(now, usegmt=True)
        return self._text


_date_header = _DateHeader()


def encode_response(response: Response, *, head_only: bool, keep_alive: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {response.status} {_reason_phrase(response.status)}",
        f"Date: {_date_header.now()}",
        "Server: velamq",
    ]
    if response.status >= 200 and response.status not in (204, 304):
        if response.content_type:
            lines.append(f"Content-Type: {response.content_type}")
        lines.append(f"Content-Length: {len(response.body)}")
    lines.extend(f"{name}: {value}" for name, value in response.headers)
    lines.append("Connection: keep-alive" if keep_alive else "Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    if head_only or response.status in (204, 304):
        return head
    return head + response.body


async def write_response(
    writer: asyncio.StreamWriter, response: Response, *, head_only: bool = False, keep_alive: bool = True
) -> None:
    writer.write(encode_response(response, head_only=head_only, keep_alive=keep_alive))
    transport = writer.transport
    if transport.get_write_buffer_size() == 0 and not transport.is_closing():
        return  # all of it went to the socket: drain() would not wait
    try:
        async with asyncio.timeout(write_timeout_s):
            await writer.drain()
    except TimeoutError:
        raise ConnectionError("client did not read the response in time") from None
