"""Broker configuration: defaults, a Pulsar-style `key=value` config file, then command-line flags.

The config file uses Pulsar's standalone.conf key names where one exists, so a user can carry
settings over:

    brokerServicePort=6650
    webServicePort=8080
    advertisedAddress=127.0.0.1
    maxMessageSize=5242880
    dataDir=./data
    journalSyncPolicy=fsync            # fsync | none
    managedLedgerMaxEntriesPerLedger=50000
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from velamq import _limits

# Pulsar config key -> our field name.
_KEYS = {
    "brokerServicePort": "broker_port",
    "webServicePort": "http_port",
    "bindAddress": "bind_address",
    "advertisedAddress": "advertised_address",
    "maxMessageSize": "max_message_bytes",
    "dataDir": "data_dir",
    "journalSyncPolicy": "sync_policy",
    "journalSyncIntervalMs": "sync_interval_ms",
    "memoryBudgetBytes": "memory_bytes",
    "managedLedgerMaxEntriesPerLedger": "ledger_entries_max",
    "managedLedgerMaxSizePerLedgerMbytes": "ledger_megabytes_max",
    "keepAliveIntervalSeconds": "keepalive_interval_s",
    "clusterName": "cluster_name",
    "allowAutoTopicCreation": "allow_auto_topic_creation",
    "policyCheckIntervalSeconds": "policy_check_interval_s",
    "defaultRetentionTimeInMinutes": "default_retention_time_minutes",
    "defaultRetentionSizeInMB": "default_retention_size_mb",
}


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Everything a broker is configured with: listeners, storage sizing and sync policy, limits,
    policy defaults. Immutable; with_overrides() and from_file() make changed copies."""

    data_dir: Path = Path("./data")
    broker_port: int = 6650
    http_port: int = 8080
    bind_address: str = "0.0.0.0"
    advertised_address: str = "localhost"
    cluster_name: str = "standalone"
    max_message_bytes: int = _limits.max_message_bytes_default
    sync_policy: str = "fsync"  # fsync | interval | none (see docs/storage.md)
    sync_interval_ms: int = 100
    # One memory budget for the broker, split by storage into publish buffer, caches (ME-1).
    memory_bytes: int = _limits.GIB
    ledger_entries_max: int = _limits.ledger_entries_max
    ledger_megabytes_max: int = _limits.ledger_bytes_max // _limits.MIB
    keepalive_interval_s: float = _limits.keepalive_interval_s
    allow_auto_topic_creation: bool = True
    use_uvloop: bool = False
    # Broker-wide retention defaults (namespace and topic policies override them). As in Pulsar, 0/0
    # deletes closed ledgers as soon as every subscription acknowledged them -- and, on a topic
    # with no subscription at all, at once; -1 keeps them without limit.
    default_retention_time_minutes: int = 0
    default_retention_size_mb: int = 0
    # How often TTL, backlog quota, retention, ack-hole redelivery and rates are checked.
    policy_check_interval_s: float = 5.0
    # How often the console's rate history takes a point (it keeps 120: ten minutes at 5 s).
    rate_history_interval_s: float = 5.0

    @property
    def frame_bytes_max(self) -> int:
        return self.max_message_bytes + _limits.frame_padding_bytes

    def with_overrides(self, **overrides: Any) -> BrokerConfig:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def from_file(cls, path: Path, base: BrokerConfig | None = None) -> BrokerConfig:
        base = base or cls()
        types = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for lineno, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if "=" not in line:
                raise ValueError(f"{path}:{lineno}: expected key=value, got {raw!r}")
            key, value = (part.strip() for part in line.split("=", 1))
            name = _KEYS.get(key, key)
            if name not in types:
                raise ValueError(f"{path}:{lineno}: unknown setting {key!r}")
            values[name] = _convert(str(types[name]), value, f"{path}:{lineno}")
        return replace(base, **values)


def _convert(type_name: str, value: str, where: str) -> Any:
    try:
        if "Path" in type_name:
            return Path(value)
        if type_name == "bool":
            if value.lower() not in ("true", "false"):
                raise ValueError(value)
            return value.lower() == "true"
        if type_name == "int":
            return int(value)
        if type_name == "float":
            return float(value)
        return value
    except ValueError:
        raise ValueError(f"{where}: {value!r} is not a valid {type_name}") from None
