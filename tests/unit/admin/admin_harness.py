"""An AdminServer on a free port with a real MetadataStore, its event loop in a background thread.

The broker is the outside world for this layer, so `FakeBroker` stands in for it: it implements
BrokerBackend with the real store underneath and a fixed metrics snapshot, and records the calls
that would act on live topics. `FakeBrokerWithOperations` adds BrokerOperations (broker_fake.py),
which `start_admin` uses unless asked for the bare broker (to see the 501 answers). Tests talk HTTP
to the server from the main thread.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

from broker_fake import FakeOperations

from velamq._errors import NotFoundError, PreconditionFailedError
from velamq.admin import AdminServer
from velamq.broker._stats import BrokerMetrics, SubscriptionMetrics, TopicMetrics
from velamq.metadata import MetadataStore, Policies

T = TypeVar("T")

SNAPSHOT = BrokerMetrics(
    connections_active=3,
    connections_opened_total=17,
    topics=(
        TopicMetrics(
            topic="persistent://public/default/orders",
            producers=2, consumers=1, msg_in_total=100, bytes_in_total=2048, msg_out_total=90,
            bytes_out_total=1800, storage_size_bytes=4096, entries_total=100, backlog_entries=10,
            subscriptions=(
                SubscriptionMetrics("sub-a", "Shared", 1, 10, 4, 90, 1800, "1:89"),
                SubscriptionMetrics('we"ird\\sub\nname', "Exclusive", 0, 0, 0, 0, 0, "1:99"),
            ),
        ),
        TopicMetrics(
            topic="non-persistent://acme/ns/<script>",
            producers=0, consumers=0, msg_in_total=0, bytes_in_total=0, msg_out_total=0,
            bytes_out_total=0, storage_size_bytes=0, entries_total=0, backlog_entries=0,
        ),
    ),
    storage={"velamq_storage_fsyncs_total": 42.0, "velamq_journal_bytes": 1.5e6, "bad name-1": 1.0},
)


@dataclass
class FakeBroker:
    """BrokerBackend over a real store; topics in `in_use` refuse deletion without force."""

    store: MetadataStore
    in_use: set[str] = field(default_factory=set)
    deleted: list[tuple[str, bool]] = field(default_factory=list)
    hang_on_delete: bool = False
    snapshot: BrokerMetrics = SNAPSHOT

    @property
    def metadata(self) -> MetadataStore:
        return self.store

    @property
    def service_url(self) -> str:
        return "pulsar://127.0.0.1:6650"

    @property
    def service_url_tls(self) -> str | None:
        return None

    @property
    def web_service_url(self) -> str:
        return "http://127.0.0.1:8080"

    def metrics_snapshot(self) -> BrokerMetrics:
        return self.snapshot

    @property
    def default_policies(self) -> Policies:
        return Policies()

    @property
    def config(self) -> Any:
        return SimpleNamespace(max_message_bytes=5 * 1024 * 1024)

    async def delete_topic(self, topic: str, force: bool) -> None:
        if self.hang_on_delete:
            await asyncio.sleep(3600)
        if topic in self.in_use and not force:
            raise PreconditionFailedError(f"Topic {topic} has active producers/subscriptions")
        if not await self.store.topic_exists(topic):
            raise NotFoundError("Topic not found")
        self.deleted.append((topic, force))
        await self.store.delete_topic(topic)

    async def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        await self.store.create_partitioned_topic(topic, partitions)

    async def delete_partitioned_topic(self, topic: str, force: bool) -> None:
        if topic in self.in_use and not force:
            raise PreconditionFailedError(f"Topic {topic} has active producers/subscriptions")
        self.deleted.append((topic, force))
        await self.store.delete_partitioned_topic(topic)


class FakeBrokerWithOperations(FakeBroker, FakeOperations):
    """FakeBroker plus the fake BrokerOperations over the same store."""

    def __init__(self, store: MetadataStore) -> None:
        FakeBroker.__init__(self, store)
        FakeOperations.__init__(self, store)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Admin:
    """The running server plus helpers to call it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, broker: Any, server: AdminServer) -> None:
        self.loop = loop
        self.broker = broker
        self.server = server
        self.port = server.port

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def policy(self, key: str, ns: str = "public/default") -> Any:
        """One policy as stored, read straight from the metadata store."""
        return self.run(self.broker.store.get_policies(ns)).get(key)

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


def start_admin(tmp_path: Path, operations: bool = True, **server_kwargs: Any) -> Iterator[Admin]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="admin-test-loop", daemon=True)
    thread.start()

    def run(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=30)

    store = MetadataStore(tmp_path / "metadata.db")
    run(store.start())
    broker = FakeBrokerWithOperations(store) if operations else FakeBroker(store)

    async def make_server() -> AdminServer:
        server = AdminServer(broker, "127.0.0.1", 0, **server_kwargs)
        await server.start()
        return server

    server = run(make_server())
    try:
        yield Admin(loop, broker, server)
    finally:
        run(server.close())
        run(store.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
