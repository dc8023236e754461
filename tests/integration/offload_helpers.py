"""Helpers of the offload tests: a broker config with an offload driver, messages read back with
everything a consumer sees of them, RSA keys for an encrypted topic (a unique module name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulsar
from limits_helpers import http, metrics
from wait_helpers import wait_until

from velamq.testing import BrokerProcess

NS = "persistent://public/default"


def offload_conf(directory: Path, **keys: object) -> Path:
    """A broker config file: the filesystem driver under directory/tier unless keys say otherwise."""
    settings: dict[str, object] = {
        "managedLedgerOffloadDriver": "filesystem",
        "fileSystemURI": directory / "tier",
        "managedLedgerOffloadDeletionLagMs": 0,
        "managedLedgerOffloadCheckIntervalSeconds": 0.2,
        "managedLedgerMaxEntriesPerLedger": 20,
        "journalSyncPolicy": "none",
        "flushInterval": 50,
        "defaultRetentionTimeInMinutes": -1,  # keep what no subscription holds: readers read it all
        "defaultRetentionSizeInMB": -1,
        **keys,
    }
    path = directory / "offload.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def seen(message: Any) -> tuple[Any, ...]:
    """What a consumer sees of a message, its id included."""
    mid = message.message_id()
    return ((mid.ledger_id(), mid.entry_id(), mid.batch_index()), message.data(), message.partition_key(),
            message.properties(), message.event_timestamp(), message.publish_timestamp())


def read_all(client: Any, topic: str, count: int, **kwargs: Any) -> list[tuple[Any, ...]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, **kwargs)
    try:
        return [seen(reader.read_next(20_000)) for _ in range(count)]
    finally:
        reader.close()


def consume_all(client: Any, topic: str, count: int, subscription: str, **kwargs: Any) -> list[tuple[Any, ...]]:
    consumer = client.subscribe(topic, subscription, initial_position=pulsar.InitialPosition.Earliest, **kwargs)
    try:
        out = []
        for _ in range(count):
            message = consumer.receive(20_000)
            consumer.acknowledge(message)
            out.append(seen(message))
        return out
    finally:
        consumer.close()


def internal_stats(broker: BrokerProcess, topic: str) -> dict[str, Any]:
    status, body = http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/internalStats")
    assert status == 200, body
    return dict(body)


def offload_status(broker: BrokerProcess, topic: str) -> dict[str, Any]:
    status, body = http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/offload")
    assert status == 200, body
    return dict(body)


def wait_offloaded(broker: BrokerProcess, topic: str, ledgers: int, *, local_deleted: bool = True) -> None:
    """Until `ledgers` ledgers of the topic are offloaded and (if local_deleted) this broker process
    deleted as many local copies."""
    def done() -> bool:
        flags = [ledger["offloaded"] for ledger in internal_stats(broker, topic)["ledgers"]]
        gone = metrics(broker.admin_url).get("velamq_storage_offload_local_deleted_total", 0)
        return sum(flags) >= ledgers and (gone >= ledgers or not local_deleted)
    wait_until(done, timeout_s=60)


def rsa_key_files(directory: Path) -> tuple[Path, Path]:
    """An RSA key pair as the official client's CryptoKeyReader reads it (PEM)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = directory / "private.pem"
    public = directory / "public.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return public, private
