"""The admin server as it runs in a broker: a real VelamqServer (BrokerService + AdminServer over
real storage and metadata in a temp dir) on free ports, its loop in a background thread
(velamq.testing.BrokerThread). Tests talk HTTP to it from the main thread and use velamq's own
client to publish and subscribe, as any client would.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from velamq.admin import AdminServer
from velamq.client import Client
from velamq.metadata import MetadataStore
from velamq.testing import BrokerThread

T = TypeVar("T")


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Admin:
    """The running server plus helpers to call it."""

    def __init__(self, broker: BrokerThread) -> None:
        self.broker = broker
        self.server: AdminServer = broker.server.admin
        self.port = self.server.port
        self._clients: list[Client] = []

    @property
    def metadata(self) -> MetadataStore:
        return self.broker.server.metadata

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.broker.run(coro)

    def client(self) -> Client:
        """A velamq client of this broker, closed when the test ends."""
        client = Client(self.broker.service_url)
        self._clients.append(client)
        return client

    def close_clients(self) -> None:
        for client in self._clients:
            client.close()
        self._clients.clear()

    def policy(self, key: str, ns: str = "public/default") -> Any:
        """One policy as stored, read straight from the metadata store."""
        return self.run(self.metadata.get_policies(ns)).get(key)

    def request(
        self, method: str, path: str, body: bytes | str | None = None, headers: dict[str, str] | None = None
    ) -> Reply:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            data = body.encode() if isinstance(body, str) else body
            hdrs = {"Content-Type": "application/json", **(headers or {})}
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()

    def raw(self, data: bytes, *, shutdown_write: bool = False, timeout_s: float = 10) -> bytes:
        """Send raw bytes; return everything the server sends back until it closes (or times out)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout_s) as sock:
            try:
                sock.sendall(data)
                if shutdown_write:
                    sock.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered and closed before taking it all: read what it said
            chunks = []
            try:
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
            except (TimeoutError, ConnectionResetError):
                pass
            return b"".join(chunks)


def start_admin(tmp_path: Path, **server_options: Any) -> Iterator[Admin]:
    """`server_options` go to VelamqServer (admin_timeout_s, admin_connections_max)."""
    broker = BrokerThread(tmp_path / "data", **server_options)
    broker.start()
    admin = Admin(broker)
    try:
        yield admin
    finally:
        admin.close_clients()
        broker.stop()
