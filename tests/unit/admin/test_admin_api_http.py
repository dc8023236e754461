"""The HTTP/1.1 layer: keep-alive, chunked bodies, limits, and malformed input (OP-6).

Every bad request must get a 4xx/5xx or a close on its own connection only; after each one the
server must still answer the next connection.
"""

from __future__ import annotations

import http.client
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_harness import Admin, start_admin
from wait_helpers import wait_until

from velamq.admin import _http

OK_REQUEST = b"GET /admin/v2/clusters HTTP/1.1\r\nHost: t\r\n\r\n"


def status_of(reply: bytes) -> int:
    assert reply.startswith(b"HTTP/1.1 "), reply[:200]
    return int(reply[9:12])


def still_serving(admin: Admin) -> None:
    reply = admin.request("GET", "/admin/v2/clusters")
    assert (reply.status, reply.json()) == (200, ["standalone"])


def send_and_status(admin: Admin, data: bytes) -> int:
    reply = admin.raw(data, shutdown_write=True)
    assert b"Connection: close" in reply.split(b"\r\n\r\n")[0], reply[:300]
    return status_of(reply)


# ----------------------------------------------------------------------------- malformed requests


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"\x00\x01\x02 garbage\r\n\r\n", 400),
        (b"GET\r\n\r\n", 400),
        (b"GET / HTTP/1.1 extra\r\n\r\n", 400),
        (b"GET / HTTX/1.1\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\n\r\n", 505),
        (b"GET nopath HTTP/1.1\r\n\r\n", 400),
        (b"GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n", 400),
        (b"GET /%FF HTTP/1.1\r\n\r\n", 400),
        (b"GET /metrics?x=%FF HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nno-colon-here\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nName : v\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nBad\x01Name: v\r\n\r\n", 400),
        (b"GET / HTTP/1.1\nHost: x\nBad\x01Name: v\n\n", 400),  # bare LF lines are read too
        (b"PUT /admin/v2/tenants/x HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400),
        (b"PUT /admin/v2/tenants/x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"PUT /admin/v2/tenants/x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400),
        (b"PUT /admin/v2/tenants/x HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400),
        (b"PUT /admin/v2/tenants/x HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"PUT /admin/v2/tenants/x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        (b"PUT /admin/v2/tenants/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"PUT /admin/v2/tenants/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n", 400),
        (b"PUT /admin/v2/tenants/x HTTP/1.1\r\nContent-Length: 2\r\nExpect: magic\r\n\r\n{}", 417),
        (b"\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n\r\n", 400),
    ],
)
def test_malformed_request_gets_error_and_close(admin: Admin, data: bytes, status: int) -> None:
    assert send_and_status(admin, data) == status
    still_serving(admin)


def test_truncated_head_and_body(admin: Admin) -> None:
    assert send_and_status(admin, b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x") == 400
    assert send_and_status(admin, b"GET /admin/v2/clus") == 400
    body = b"PUT /admin/v2/tenants/x HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"adminRoles\""
    assert send_and_status(admin, body) == 400
    chunked = b"PUT /admin/v2/tenants/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc"
    assert send_and_status(admin, chunked) == 400
    assert admin.request("GET", "/admin/v2/tenants").json() == ["public"]  # nothing was created


def test_request_line_over_limit_is_414(admin: Admin) -> None:
    long_path = b"/" + b"a" * (_http.request_line_bytes_max + 10)
    assert send_and_status(admin, b"GET " + long_path + b" HTTP/1.1\r\n\r\n") == 414
    huge_path = b"/" + b"a" * (_http.stream_limit_bytes + 10)
    assert send_and_status(admin, b"GET " + huge_path + b" HTTP/1.1\r\n\r\n") == 414
    still_serving(admin)


def test_header_section_over_limits_is_431(admin: Admin) -> None:
    many_big = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 1000) for i in range(80))
    assert send_and_status(admin, b"GET / HTTP/1.1\r\n" + many_big + b"\r\n") == 431
    one_huge = b"X-Big: " + b"v" * (_http.header_bytes_max + 10) + b"\r\n"
    assert send_and_status(admin, b"GET / HTTP/1.1\r\n" + one_huge + b"\r\n") == 431
    too_many = b"".join(b"X-%d: v\r\n" % i for i in range(_http.header_count_max + 1))
    assert send_and_status(admin, b"GET / HTTP/1.1\r\n" + too_many + b"\r\n") == 431
    still_serving(admin)


def test_body_over_limit_is_413(admin: Admin) -> None:
    declared = b"PUT /admin/v2/tenants/x HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (_http.body_bytes_max + 1)
    assert send_and_status(admin, declared) == 413
    chunk = b"PUT /admin/v2/tenants/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % (
        _http.body_bytes_max + 1
    )
    assert send_and_status(admin, chunk) == 413
    # The limit counts the sum of the chunks, not each one.
    half = _http.body_bytes_max // 2 + 1
    two_chunks = (
        b"PUT /admin/v2/tenants/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n" % half + b" " * half + b"\r\n" + b"%x\r\n" % half
    )
    assert send_and_status(admin, two_chunks) == 413
    still_serving(admin)


def test_body_at_the_limit_is_accepted(admin: Admin) -> None:
    body = b'{"adminRoles":[]}'.ljust(_http.body_bytes_max, b" ")
    assert admin.request("PUT", "/admin/v2/tenants/big", body).status == 204


def test_bad_json_values_are_400(admin: Admin) -> None:
    for body in ('{"adminRoles": NaN}', "[" * 100_000 + "]" * 100_000, '{"a": "\\ud800"', "\xff"):
        reply = admin.request("PUT", "/admin/v2/tenants/j", body.encode("utf-8", "surrogatepass"))
        assert reply.status == 400, body[:50]
    still_serving(admin)


def test_random_bytes_never_break_the_server(admin: Admin) -> None:
    rng = random.Random(1234)
    valid = b"PUT /admin/v2/persistent/public/default/fz/partitions HTTP/1.1\r\nContent-Length: 1\r\n\r\n3"
    for i in range(150):
        if i % 2:
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        else:  # a valid request with a few bytes flipped, cut or duplicated
            mutated = bytearray(valid)
            for _ in range(rng.randrange(1, 4)):
                pos = rng.randrange(len(mutated))
                mutated[pos] = rng.randrange(256)
            data = bytes(mutated[: rng.randrange(1, len(mutated) + 1)])
        reply = admin.raw(data, shutdown_write=True, timeout_s=5)
        if reply:
            assert reply.startswith(b"HTTP/1.1 "), (data, reply[:100])
    still_serving(admin)


# ----------------------------------------------------------------------------- good framing


def test_keep_alive_serves_many_requests_on_one_connection(admin: Admin) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=10)
    try:
        for i in range(20):
            conn.request("PUT", f"/admin/v2/persistent/public/default/k{i}")
            resp = conn.getresponse()
            assert resp.status == 204 and resp.read() == b""
            assert resp.getheader("Connection") == "keep-alive"
            conn.request("GET", "/admin/v2/persistent/public/default/nope/partitions")
            resp = conn.getresponse()
            assert resp.status == 200 and resp.read() == b'{"partitions":0}'
            conn.request("GET", "/nope")  # an error response keeps the connection too
            resp = conn.getresponse()
            assert resp.status == 404
            resp.read()
    finally:
        conn.close()


def test_pipelined_requests_are_answered_in_order(admin: Admin) -> None:
    data = (
        b"PUT /admin/v2/persistent/public/default/pipe/partitions HTTP/1.1\r\nContent-Length: 1\r\n\r\n2"
        b"GET /admin/v2/persistent/public/default/pipe/partitions HTTP/1.1\r\n\r\n"
        b"GET /admin/v2/brokers/health HTTP/1.1\r\nConnection: close\r\n\r\n"
    )
    reply = admin.raw(data)
    assert reply.count(b"HTTP/1.1 ") == 3
    first, rest = reply.split(b"HTTP/1.1 200", 1)
    assert first.startswith(b"HTTP/1.1 204")
    assert b'{"partitions":2}' in rest and rest.endswith(b"ok")


def test_chunked_request_body(admin: Admin) -> None:
    data = (
        b"PUT /admin/v2/persistent/public/default/ch/partitions HTTP/1.1\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        b"1;ext=1\r\n\"\r\n2\r\n12\r\n1\r\n\"\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    assert status_of(admin.raw(data)) == 204
    assert admin.request("GET", "/admin/v2/persistent/public/default/ch/partitions").json() == {"partitions": 12}
    # http.client's own chunked encoding, too.
    conn = http.client.HTTPConnection("127.0.0.1", admin.port, timeout=10)
    try:
        conn.request("POST", "/admin/v2/persistent/public/default/ch/partitions", body=iter([b"1", b"5"]),
                     encode_chunked=True)
        assert conn.getresponse().status == 204
    finally:
        conn.close()
    assert admin.request("GET", "/admin/v2/persistent/public/default/ch/partitions").json() == {"partitions": 15}


def test_expect_100_continue(admin: Admin) -> None:
    with socket.create_connection(("127.0.0.1", admin.port), timeout=10) as sock:
        sock.sendall(
            b"PUT /admin/v2/tenants/exp HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n"
            b"Connection: close\r\n\r\n"
        )
        interim = sock.recv(1024)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"{}")
        final = b""
        while chunk := sock.recv(65536):
            final += chunk
    assert status_of(final) == 204


def test_http_1_0_closes_unless_keep_alive(admin: Admin) -> None:
    reply = admin.raw(b"GET /admin/v2/clusters HTTP/1.0\r\n\r\n")  # no shutdown: the server closes
    assert status_of(reply) == 200 and b"Connection: close" in reply
    reply = admin.raw(b"GET /admin/v2/clusters HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + OK_REQUEST,
                      shutdown_write=True)
    assert reply.count(b"HTTP/1.1 200") == 2


def test_connection_close_header_is_honoured(admin: Admin) -> None:
    reply = admin.raw(b"GET /admin/v2/clusters HTTP/1.1\r\nConnection: close\r\n\r\n" + OK_REQUEST)
    assert reply.count(b"HTTP/1.1 200") == 1


def test_204_has_no_body_or_length(admin: Admin) -> None:
    reply = admin.raw(b"PUT /admin/v2/persistent/public/default/nb HTTP/1.1\r\nConnection: close\r\n\r\n")
    head, _, body = reply.partition(b"\r\n\r\n")
    assert status_of(reply) == 204 and body == b"" and b"Content-Length" not in head


# ----------------------------------------------------------------------------- timeouts, connection cap


def test_slow_head_gets_408(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "head_timeout_s", 0.3)
    start = time.monotonic()
    reply = admin.raw(b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n")  # never finishes its head
    # Well before the default head timeout (30 s), however loaded the machine.
    assert status_of(reply) == 408 and time.monotonic() - start < 15
    still_serving(admin)


def test_slow_body_gets_408(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "body_timeout_s", 0.3)
    reply = admin.raw(b"PUT /admin/v2/tenants/x HTTP/1.1\r\nContent-Length: 10\r\n\r\n{")
    assert status_of(reply) == 408
    still_serving(admin)


def test_idle_connection_is_closed_quietly(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "idle_timeout_s", 0.3)
    reply = admin.raw(OK_REQUEST)  # keep-alive: after the answer, the server closes when idle
    assert reply.count(b"HTTP/1.1 200") == 1


@pytest.fixture
def capped_admin(tmp_path: Path) -> Iterator[Admin]:
    yield from start_admin(tmp_path, admin_connections_max=2)


def test_connections_over_the_cap_get_503(capped_admin: Admin) -> None:
    idle = [socket.create_connection(("127.0.0.1", capped_admin.port), timeout=10) for _ in range(2)]
    try:
        wait_until(lambda: capped_admin.server.connections == 2)  # the server accepted both
        assert status_of(capped_admin.raw(OK_REQUEST)) == 503
    finally:
        for sock in idle:
            sock.close()
    # The server notices the closes on its side shortly.
    wait_until(lambda: status_of(capped_admin.raw(OK_REQUEST, shutdown_write=True)) == 200,
               "a 200 once the idle connections are closed")


def test_close_ends_idle_keep_alive_connections(tmp_path: Path) -> None:
    harness = start_admin(tmp_path)
    admin = next(harness)
    sock = socket.create_connection(("127.0.0.1", admin.port), timeout=10)
    try:
        sock.sendall(OK_REQUEST)
        assert status_of(sock.recv(65536)) == 200
        start = time.monotonic()
        admin.run(admin.server.close())
        assert time.monotonic() - start < 15  # not after the keep-alive's idle timeout
        assert sock.recv(1024) == b""  # closed by the server
    finally:
        sock.close()
        for _ in harness:  # finish the generator: closes store and loop
            pass
