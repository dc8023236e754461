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
    brokerTopicIdleUnloadSeconds=60     # an idle topic unloads after this long (0: never)

The storage's entry logs and garbage collector take BookKeeper's key names (bookkeeper.conf):
gcWaitTime (ms), minorCompactionThreshold, minorCompactionInterval (s), majorCompactionThreshold,
majorCompactionInterval (s), compactionRateByBytes, logSizeLimit (bytes), flushInterval (ms).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from velamq import _limits
from velamq.storage import StorageConfig

_STORAGE = StorageConfig(data_dir=Path("."))  # the storage's defaults

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
    "brokerTopicIdleUnloadSeconds": "topic_idle_unload_s",
    "exposeTopicLevelMetricsInPrometheus": "expose_topic_level_metrics",
    "forceDeleteNamespaceAllowed": "force_delete_namespace_allowed",
    # bookkeeper.conf names for the storage engine
    "gcWaitTime": "gc_wait_ms",
    "minorCompactionThreshold": "gc_minor_threshold",
    "minorCompactionInterval": "gc_minor_interval_s",
    "majorCompactionThreshold": "gc_major_threshold",
    "majorCompactionInterval": "gc_major_interval_s",
    "compactionRateByBytes": "gc_bytes_per_s",
    "logSizeLimit": "entry_log_bytes_max",
    "flushInterval": "flush_interval_ms",
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
    # A loaded topic with no producer, no consumer and no pending work unloads after this long
    # without use (0: topics stay loaded). docs/architecture.md, "Topic lifecycle".
    topic_idle_unload_s: float = 60.0
    # /metrics: per-namespace figures (False, Pulsar's default) or a sample per topic and
    # subscription as well (True). At a million topics, per-topic output is hundreds of MiB.
    expose_topic_level_metrics: bool = False
    # DELETE /admin/v2/namespaces/{t}/{ns}?force=true deletes the namespace with all its topics
    # (in batches); refused (405) unless allowed, as in Pulsar.
    force_delete_namespace_allowed: bool = False
    # Storage: write cache flush age, entry log size and the garbage collector (docs/storage.md).
    flush_interval_ms: int = _STORAGE.flush_interval_ms
    entry_log_bytes_max: int = _STORAGE.entry_log_bytes_max
    gc_wait_ms: int = round(_STORAGE.gc_interval_s * 1000)
    gc_minor_threshold: float = _STORAGE.gc_minor_threshold
    gc_minor_interval_s: float = _STORAGE.gc_minor_interval_s
    gc_major_threshold: float = _STORAGE.gc_major_threshold
    gc_major_interval_s: float = _STORAGE.gc_major_interval_s
    gc_bytes_per_s: int = _STORAGE.gc_bytes_per_s

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
