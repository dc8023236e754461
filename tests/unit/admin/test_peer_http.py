"""The admin tier's client for calls between workers (admin/_peer_http.py), against small HTTP
servers on free ports that answer as written here: bodies framed by Content-Length, chunked coding
or the end of the connection; 307/308 followed with the same method and body, and not forever;
peers that are not there, do not answer, or do not speak HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from velamq.admin._peer_http import PeerError, peer_request

Answer = Callable[[str, bytes], bytes]  # (request head, request body) -> raw reply


@asynccontextmanager
async def serving(answer: Answer, seen: list[tuple[str, bytes]] | None = None) -> AsyncIterator[str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        length = next((int(line.split(":", 1)[1]) for line in head.split("\r\n")
                       if line.lower().startswith("content-length:")), 0)
        body = await reader.readexactly(length)
        if seen is not None:
            seen.append((head, body))
        writer.write(answer(head, body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


def _reply(status: str, body: bytes = b"", headers: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\n{headers}\r\n".encode() + body


def test_bodies_framed_every_way() -> None:
    asyncio.run(_bodies_framed_every_way())


async def _bodies_framed_every_way() -> None:
    framings = [
        _reply("200 OK", b"hello", "Content-Length: 5\r\n"),
        _reply("200 OK", b"3\r\nhel\r\n2;ext=1\r\nlo\r\n0\r\n\r\n", "Transfer-Encoding: chunked\r\n"),
        _reply("200 OK", b"hello", "Connection: close\r\n"),  # to the end of the connection
    ]
    for raw in framings:
        async with serving(lambda head, body, raw=raw: raw) as url:
            reply = await peer_request("GET", url + "/x?a=1")
        assert (reply.status, reply.body) == (200, b"hello")
    async with serving(lambda head, body: _reply("204 No Content", headers="X-Y: z\r\n")) as url:
        reply = await peer_request("DELETE", url + "/x")
    assert (reply.status, reply.headers["x-y"], reply.body) == (204, "z", b"")


def test_redirects_keep_method_body_and_headers() -> None:
    asyncio.run(_redirects_keep_method_body_and_headers())


async def _redirects_keep_method_body_and_headers() -> None:
    seen: list[tuple[str, bytes]] = []
    async with serving(lambda head, body: _reply("200 OK", b"done", "Content-Length: 4\r\n"), seen) as owner:
        moved = _reply("307 Temporary Redirect", headers=f"Location: {owner}/b/c?q=1\r\nContent-Length: 0\r\n")
        async with serving(lambda head, body: moved, seen) as first:
            reply = await peer_request("POST", first + "/b/c?q=1", body=b'{"k":1}',
                                       headers={"Authorization": "Bearer t"})
    assert (reply.status, reply.body) == (200, b"done")
    assert [head.split("\r\n", 1)[0] for head, _ in seen] == ["POST /b/c?q=1 HTTP/1.1"] * 2
    assert [body for _, body in seen] == [b'{"k":1}'] * 2
    assert all("Authorization: Bearer t" in head for head, _ in seen)


def test_a_redirect_loop_and_absent_or_mute_peers_are_peer_errors() -> None:
    asyncio.run(_a_redirect_loop_and_absent_or_mute_peers_are_peer_errors())


async def _a_redirect_loop_and_absent_or_mute_peers_are_peer_errors() -> None:
    async with serving(lambda head, body: _reply("308 Permanent Redirect", headers="Location: /again\r\n")) as url:
        with pytest.raises(PeerError, match="redirects"):
            await peer_request("GET", url + "/x")
    async with serving(lambda head, body: b"SSH-2.0-OpenSSH\r\n") as url:
        with pytest.raises(PeerError, match="not an HTTP reply"):
            await peer_request("GET", url + "/x")
    async with serving(lambda head, body: b"") as url:  # closes without a word
        with pytest.raises(PeerError):
            await peer_request("GET", url + "/x")
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(PeerError, match="cannot reach"):  # nobody listens there any more
        await peer_request("GET", f"http://127.0.0.1:{port}/x")
    with pytest.raises(PeerError, match="not an http"):
        await peer_request("GET", "ftp://127.0.0.1/x")


def test_a_peer_that_never_answers_times_out() -> None:
    asyncio.run(_a_peer_that_never_answers_times_out())


async def _a_peer_that_never_answers_times_out() -> None:
    hold = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await hold.wait()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    try:
        with pytest.raises(PeerError, match="no answer within"):
            await peer_request("GET", f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/x", timeout_s=0.2)
    finally:
        hold.set()
        server.close()
        await server.wait_closed()
