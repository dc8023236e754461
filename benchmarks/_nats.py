"""NATS JetStream over a raw socket for benchmarks/lean_publish.py: a server with a fresh file store,
the connection handshake, a request-reply to the JetStream API, and a counter of publish acks."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator


class NatsAckCounter:
    """Counts MSG deliveries (JetStream publish acks) in a NATS byte stream; answers PING; an ack
    with an error, or -ERR, fails the run."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = b""

    def __call__(self, data: bytes) -> int:
        buf = self._buf + data
        offset, count = 0, 0
        while True:
            eol = buf.find(b"\r\n", offset)
            if eol < 0:
                break
            line = buf[offset:eol]
            if line.startswith(b"MSG "):
                size = int(line.rsplit(b" ", 1)[1])
                if len(buf) < eol + 2 + size + 2:
                    break
                if b'"error"' in buf[eol + 2:eol + 2 + size]:
                    raise RuntimeError(f"JetStream refused: {buf[eol + 2:eol + 2 + size]!r}")
                count += 1
                offset = eol + 2 + size + 2
                continue
            if line == b"PING":
                self._sock.sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                raise RuntimeError(f"NATS: {line!r}")
            offset = eol + 2
        self._buf = buf[offset:]
        return count


def nats_request(sock: socket.socket, subject: str, body: bytes) -> dict[str, object]:
    inbox = f"_INBOX.setup.{uuid.uuid4().hex}"
    sock.sendall(f"SUB {inbox} 99\r\nPUB {subject} {inbox} {len(body)}\r\n".encode() + body + b"\r\n")
    buf = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("nats-server closed the connection")
        buf += chunk
        start = buf.find(b"MSG ")
        if start >= 0:
            eol = buf.find(b"\r\n", start)
            if eol > 0:
                size = int(buf[start:eol].rsplit(b" ", 1)[1])
                if len(buf) >= eol + 2 + size:
                    sock.sendall(b"UNSUB 99\r\n")
                    reply: dict[str, object] = json.loads(buf[eol + 2:eol + 2 + size])
                    return reply
        if b"-ERR" in buf:
            raise RuntimeError(f"NATS: {buf!r}")


def nats_connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    while b"\r\n" not in buf:
        buf += sock.recv(65536)
    if not buf.startswith(b"INFO "):
        raise RuntimeError(f"not a NATS server: {buf!r}")
    sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"protocol":1}\r\n')
    return sock


@contextlib.contextmanager
def nats_server(binary: str, sync_always: bool) -> Iterator[tuple[int, int]]:
    """(port, pid) of a JetStream server with a fresh file store."""
    tmp = tempfile.mkdtemp(prefix="lean-nats-")
    port = _free_port()
    sync = "    sync_interval: always\n" if sync_always else ""
    conf = os.path.join(tmp, "nats.conf")
    with open(conf, "w") as f:
        f.write(f"port: {port}\nhttp_port: {_free_port()}\njetstream {{\n    store_dir: {tmp}/js\n{sync}}}\n")
    proc = subprocess.Popen([binary, "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not start: {proc.stderr.read() if proc.stderr else ''!r}")
            time.sleep(0.1)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def nats_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
