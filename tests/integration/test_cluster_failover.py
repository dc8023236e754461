"""The official client's AutoClusterFailover between two velamq nodes that replicate to each other
(RP-8): kill -9 the primary under load, the client goes on with the secondary; when the primary is
back, replication catches up both ways and nothing acknowledged is missing on either side."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pulsar
from replication_helpers import clusters, link, wait_quiet
from wait_helpers import wait_until


def _read_all(service_url: str, topic: str) -> list[bytes]:
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(10_000).data())
        return got
    finally:
        client.close()


class _Load:
    """One producer sending without pause; what it got a receipt for, in order."""

    def __init__(self, client: Any, topic: str) -> None:
        self.producer = client.create_producer(topic, send_timeout_millis=3000, batching_enabled=False)
        self.acked: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            payload = f"m-{i:06d}".encode()
            i += 1
            try:
                self.producer.send(payload)
                self.acked.append(payload)
            except pulsar.PulsarException:
                pass  # no receipt: it may or may not be stored, and is not counted

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.producer.close()


def test_auto_cluster_failover_survives_kill_9_of_the_primary() -> None:
    with clusters("primary", "secondary") as (primary, secondary):
        link(primary, secondary, deduplication=False)
        topic = f"persistent://public/geo/failover-{uuid.uuid4().hex[:8]}"
        client = pulsar.Client(
            pulsar.AutoClusterFailover(
                pulsar.ServiceInfo(primary.broker.service_url), [pulsar.ServiceInfo(secondary.broker.service_url)],
                check_interval_ms=200, failover_threshold=1, switch_back_threshold=1_000_000,
            ),
            operation_timeout_seconds=10,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        try:
            load = _Load(client, topic)
            wait_until(lambda: len(load.acked) >= 100, what="load on the primary")
            primary.broker.kill()
            wait_until(lambda: client.get_service_info().service_url == secondary.broker.service_url,
                       what="the client on the secondary")
            switched_at = len(load.acked)
            wait_until(lambda: len(load.acked) >= switched_at + 100, what="load on the secondary")
            load.stop()
            on_secondary = set(_read_all(secondary.broker.service_url, topic))
            assert set(load.acked[switched_at:]) <= on_secondary  # acked after the switch: the secondary's
            primary.broker.start()
            wait_quiet([primary, secondary], topic)
            for cluster in (primary, secondary):
                stored = _read_all(cluster.broker.service_url, topic)
                missing = set(load.acked) - set(stored)
                assert not missing, f"{cluster.name} lacks {len(missing)} acknowledged messages"
        finally:
            client.close()
