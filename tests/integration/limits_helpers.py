"""Helpers of the limits tests (fd storm, memory, disk, deletes, bad input): raw protocol frames,
a broker process's memory and metrics, waiting for a condition with a deadline."""

from __future__ import annotations

import json
import socket
import struct
import threading
import urllib.request
from typing import Any

from velamq.protocol import FrameDecoder, encode_command
from velamq.protocol import _pulsar_api_pb2 as pb

T = pb.BaseCommand


def command(kind: int, field: str, **values: Any) -> bytes:
    message = pb.BaseCommand(type=kind)
    getattr(message, field).SetInParent()
    for key, value in values.items():
        setattr(getattr(message, field), key, value)
    return encode_command(message)


def connect_frame() -> bytes:
    return command(T.CONNECT, "connect", client_version="velamq-limits-test", protocol_version=20)


def frame_header(total_bytes: int) -> bytes:
    """The start of a frame announcing `total_bytes` (its command part claims 100 bytes)."""
    return struct.pack(">II", total_bytes, 100)


def handshake(port: int, timeout_s: float = 10.0) -> socket.socket:
    """A raw connection that has sent CONNECT and read CONNECTED."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    sock.sendall(connect_frame())
    read_frames(sock, 1)
    return sock


def read_frames(sock: socket.socket, count: int, timeout_s: float = 10.0) -> list[Any]:
    decoder = FrameDecoder(64 << 20)
    frames: list[Any] = []
    sock.settimeout(timeout_s)
    while len(frames) < count:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed by the broker")
        frames += decoder.feed(data)
    return frames


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def metrics(admin_url: str) -> dict[str, float]:
    """The broker's /metrics samples without labels other than cluster, by name."""
    text = urllib.request.urlopen(f"{admin_url}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        name, rest = line.split("{", 1)
        labels, value = rest.rsplit("} ", 1)
        if labels.count("=") == 1:
            out[name] = float(value)
    return out


def http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw else None
        except ValueError:
            return exc.code, raw.decode(errors="replace")


def stalled_consumer(port: int, topic: str) -> socket.socket:
    """A raw consumer on `topic` with a 4 KiB receive buffer that grants a million permits and
    never reads again: the slowest consumer a broker can meet."""
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", port))
    slow.sendall(command(T.CONNECT, "connect", client_version="t", protocol_version=20)
                 + command(T.SUBSCRIBE, "subscribe", topic=topic, subscription="slow", subType=0,
                           consumer_id=1, request_id=1))
    read_frames(slow, 2)  # CONNECTED, SUCCESS: the consumer exists
    slow.sendall(command(T.FLOW, "flow", consumer_id=1, messagePermits=1_000_000))  # and never reads again
    return slow


class PeakRss:
    """Samples a process's RSS in a thread; `peak` is the highest seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes(self.pid))
            self._stop.wait(0.02)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.pid))
        return self.peak
