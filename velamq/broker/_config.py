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
    brokerMaxConnections=0             # 0: derived from the file descriptor limit (docs/operations.md)
    diskUsageThreshold=0.95            # read-only above it (BookKeeper's names)
    brokerTopicIdleUnloadSeconds=60    # an idle topic unloads after this long (0: never)

docs/operations.md lists every limit and threshold and what the broker does at each.

The storage's entry logs and garbage collector take BookKeeper's key names (bookkeeper.conf):
gcWaitTime (ms), minorCompactionThreshold, minorCompactionInterval (s), majorCompactionThreshold,
majorCompactionInterval (s), compactionRateByBytes, logSizeLimit (bytes), flushInterval (ms),
journalMaxSizeMB (a journal file rolls over at this size; trimming deletes whole files).

Tiered storage (docs/offload.md) takes Pulsar's keys: managedLedgerOffloadDriver (filesystem,
aws-s3), fileSystemURI, s3ManagedLedgerOffloadBucket / ServiceEndpoint / Region,
managedLedgerOffloadThresholdInBytes, managedLedgerOffloadThresholdInSeconds,
managedLedgerOffloadDeletionLagMs; and velamq's own managedLedgerOffloadCheckIntervalSeconds (how
often topics are checked); namespaces override the thresholds and the lag (offload policies).

Security (docs/security.md) takes Pulsar's keys as they are (velamq.security.SECURITY_KEYS:
brokerServicePortTls, webServicePortTls, tls*, authenticationEnabled, authenticationProviders,
authorizationEnabled, superUserRoles, anonymousUserRole, token*, basicAuthConf, ...); they become
`config.security`, a velamq.security.SecuritySettings. `brokerServicePort=` left empty means no
plain binary port (a TLS-only broker), as in Pulsar.

A real Pulsar standalone.conf / broker.conf is accepted as it is: the keys velamq does not use are
ignored, as Pulsar ignores keys it does not know, and listed in one log line at start (with a
"did you mean" for a near miss of a key velamq does use, so a misspelt security key is noticed).

Relative paths of the TLS files and basicAuthConf are taken from the config file's directory; when
no such file is there but one is under the working directory (where Pulsar resolves them, e.g. the
official suite's `tlsCertificateFilePath=test-conf/broker-cert.pem`), that one.
"""

from __future__ import annotations

import difflib
import logging
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final

from velamq import _bundles, _limits
from velamq.metadata import partitions_max
from velamq.security import SECURITY_KEYS, SecuritySettings
from velamq.storage import OffloadConfig, StorageConfig

log = logging.getLogger(__name__)

_STORAGE = StorageConfig(data_dir=Path("."))  # the storage's defaults
_OFFLOAD = OffloadConfig()  # the offload's defaults

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
    "allowAutoTopicCreationType": "auto_topic_creation_type",
    "defaultNumPartitions": "default_num_partitions",
    "defaultNumberOfNamespaceBundles": "default_namespace_bundles",
    "policyCheckIntervalSeconds": "policy_check_interval_s",
    "defaultRetentionTimeInMinutes": "default_retention_time_minutes",
    "defaultRetentionSizeInMB": "default_retention_size_mb",
    # Limits (docs/operations.md). Pulsar's and BookKeeper's names where they have one.
    "brokerMaxConnections": "max_connections",
    "brokerMaxConnectionsPerIp": "max_connections_per_ip",
    "connectionHandshakeTimeoutSeconds": "handshake_timeout_s",
    "diskUsageWarnThreshold": "disk_usage_warn_threshold",
    "diskUsageThreshold": "disk_usage_threshold",
    "diskUsageLwmThreshold": "disk_usage_lwm_threshold",
    "diskCheckInterval": "disk_check_interval_ms",
    "writeBufferHighWaterMarkBytes": "write_buffer_high_bytes",
    "writeBufferLowWaterMarkBytes": "write_buffer_low_bytes",
    "brokerTopicIdleUnloadSeconds": "topic_idle_unload_s",
    "exposeTopicLevelMetricsInPrometheus": "expose_topic_level_metrics",
    "topicLevelMetricsMaxTopics": "topic_level_metrics_max_topics",
    "forceDeleteNamespaceAllowed": "force_delete_namespace_allowed",
    "enableNonPersistentTopics": "enable_non_persistent_topics",
    # bookkeeper.conf names for the storage engine
    "gcWaitTime": "gc_wait_ms",
    "minorCompactionThreshold": "gc_minor_threshold",
    "minorCompactionInterval": "gc_minor_interval_s",
    "majorCompactionThreshold": "gc_major_threshold",
    "majorCompactionInterval": "gc_major_interval_s",
    "compactionRateByBytes": "gc_bytes_per_s",
    "logSizeLimit": "entry_log_bytes_max",
    "journalMaxSizeMB": "journal_max_size_mb",
    "flushInterval": "flush_interval_ms",
    # Tiered storage (docs/offload.md): Pulsar's names.
    "managedLedgerOffloadDriver": "offload_driver",
    "fileSystemURI": "offload_filesystem_uri",
    "s3ManagedLedgerOffloadBucket": "offload_s3_bucket",
    "s3ManagedLedgerOffloadServiceEndpoint": "offload_s3_endpoint",
    "s3ManagedLedgerOffloadRegion": "offload_s3_region",
    "managedLedgerOffloadThresholdInBytes": "offload_threshold_bytes",
    "managedLedgerOffloadThresholdInSeconds": "offload_threshold_s",
    "managedLedgerOffloadDeletionLagMs": "offload_deletion_lag_ms",
    "managedLedgerOffloadCheckIntervalSeconds": "offload_check_interval_s",  # velamq's own
}


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Everything a broker is configured with: listeners, storage sizing and sync policy, limits,
    policy defaults. Immutable; with_overrides() and from_file() make changed copies."""

    data_dir: Path = Path("./data")
    broker_port: int | None = 6650  # None: no plain pulsar:// port (brokerServicePort= empty)
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
    # What a topic created on first use is: non-partitioned, or partitioned with
    # default_num_partitions partitions (a namespace's autoTopicCreation policy overrides all three).
    auto_topic_creation_type: str = "non-partitioned"
    default_num_partitions: int = 1
    # Bundles of a namespace created without a count (Pulsar's defaultNumberOfNamespaceBundles):
    # the units worker processes own (docs/workers.md). Stored with the namespace at creation.
    default_namespace_bundles: int = _bundles.default_bundles
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
    # Client connections on the binary port: 0 derives the cap from the file descriptor limit,
    # leaving room for storage and the admin port (_limits.connections_max_for); a connection over
    # a cap is closed at once and counted. Per IP: 0 is no cap (Pulsar's default).
    max_connections: int = 0
    max_connections_per_ip: int = 0
    # A connection that has not sent CONNECT within this many seconds is closed.
    handshake_timeout_s: float = _limits.handshake_timeout_s
    # Disk usage of the data directory's filesystem (BookKeeper's anchors): a warning above warn,
    # producers refused above the threshold, writable again below the low-water mark. Checked
    # every disk_check_interval_ms (and sooner when appends could have used the headroom).
    disk_usage_warn_threshold: float = 0.90
    disk_usage_threshold: float = 0.95
    disk_usage_lwm_threshold: float = 0.90
    disk_check_interval_ms: int = 10_000
    # Dispatch to a connection stops while its unsent bytes are above the high-water mark and
    # resumes below the low one (Netty's WriteBufferWaterMark).
    write_buffer_high_bytes: int = _limits.write_buffer_high_bytes
    write_buffer_low_bytes: int = _limits.write_buffer_low_bytes
    # A loaded topic with no producer, no consumer and no pending work unloads after this long
    # without use (0: topics stay loaded). docs/architecture.md, "Topic lifecycle".
    topic_idle_unload_s: float = 60.0
    # /metrics: a sample per loaded topic and subscription (True, Pulsar's default) or
    # per-namespace figures only (False). Above topic_level_metrics_max_topics loaded topics (0: no
    # cap) a scrape falls back to the namespace figures (_topic_metrics_cap.py).
    expose_topic_level_metrics: bool = True
    topic_level_metrics_max_topics: int = 3000
    # DELETE /admin/v2/namespaces/{t}/{ns}?force=true deletes the namespace with all its topics
    # (in batches); refused (405) unless allowed, as in Pulsar.
    force_delete_namespace_allowed: bool = False
    # non-persistent:// topics are served (in memory only, docs/compatibility.md); False refuses
    # them with NotAllowed, as Pulsar's enableNonPersistentTopics=false does.
    enable_non_persistent_topics: bool = True
    # Storage: write cache flush age, entry log size and the garbage collector (docs/storage.md).
    flush_interval_ms: int = _STORAGE.flush_interval_ms
    entry_log_bytes_max: int = _STORAGE.entry_log_bytes_max
    journal_max_size_mb: float = _STORAGE.journal_segment_bytes / (1 << 20)
    gc_wait_ms: int = round(_STORAGE.gc_interval_s * 1000)
    gc_minor_threshold: float = _STORAGE.gc_minor_threshold
    gc_minor_interval_s: float = _STORAGE.gc_minor_interval_s
    gc_major_threshold: float = _STORAGE.gc_major_threshold
    gc_major_interval_s: float = _STORAGE.gc_major_interval_s
    gc_bytes_per_s: int = _STORAGE.gc_bytes_per_s
    # Tiered storage (docs/offload.md): no driver, no offloading (Pulsar's default).
    offload_driver: str = ""
    offload_filesystem_uri: str = ""
    offload_s3_bucket: str = ""
    offload_s3_endpoint: str = ""
    offload_s3_region: str = ""
    offload_threshold_bytes: int = -1
    offload_threshold_s: int = -1
    offload_deletion_lag_ms: int = _OFFLOAD.deletion_lag_ms
    offload_check_interval_s: float = _OFFLOAD.check_interval_s
    # TLS ports, authentication and authorization under Pulsar's keys (docs/security.md).
    security: SecuritySettings = field(default_factory=SecuritySettings)

    def __post_init__(self) -> None:
        if not 0 < self.disk_usage_lwm_threshold <= self.disk_usage_threshold <= 1:
            raise ValueError("disk usage thresholds: expected 0 < diskUsageLwmThreshold <= diskUsageThreshold <= 1")
        if not 0 < self.disk_usage_warn_threshold <= 1:
            raise ValueError("diskUsageWarnThreshold must be in (0, 1]")
        if self.max_connections < 0 or self.max_connections_per_ip < 0:
            raise ValueError("brokerMaxConnections and brokerMaxConnectionsPerIp must not be negative")
        if not 0 <= self.write_buffer_low_bytes <= self.write_buffer_high_bytes:
            raise ValueError("expected 0 <= writeBufferLowWaterMarkBytes <= writeBufferHighWaterMarkBytes")
        if self.topic_level_metrics_max_topics < 0:
            raise ValueError("topicLevelMetricsMaxTopics must be 0 (no cap) or more")
        if self.handshake_timeout_s <= 0 or self.disk_check_interval_ms <= 0:
            raise ValueError("connectionHandshakeTimeoutSeconds and diskCheckInterval must be positive")
        if self.auto_topic_creation_type not in ("non-partitioned", "partitioned"):
            raise ValueError("allowAutoTopicCreationType must be non-partitioned or partitioned")
        if not 0 < self.default_num_partitions <= partitions_max:
            raise ValueError(f"defaultNumPartitions must be between 1 and {partitions_max}")
        if not 1 <= self.default_namespace_bundles <= _bundles.bundles_max:
            raise ValueError(f"defaultNumberOfNamespaceBundles must be between 1 and {_bundles.bundles_max}")
        if self.broker_port is None and self.security.broker_port_tls is None:
            raise ValueError("no binary port: set brokerServicePort or brokerServicePortTls")
        _ = self.offload  # a bad offload setting fails here, with its key's name

    @property
    def offload(self) -> OffloadConfig | None:
        """The storage's offload settings, or None when no driver is set."""
        if not self.offload_driver:
            return None
        return OffloadConfig(
            self.offload_driver,
            uri=self.offload_filesystem_uri,
            bucket=self.offload_s3_bucket,
            endpoint=self.offload_s3_endpoint,
            region=self.offload_s3_region,
            threshold_bytes=self.offload_threshold_bytes,
            threshold_s=self.offload_threshold_s,
            deletion_lag_ms=self.offload_deletion_lag_ms,
            check_interval_s=self.offload_check_interval_s,
        )

    @property
    def frame_bytes_max(self) -> int:
        return self.max_message_bytes + _limits.frame_padding_bytes

    def with_overrides(self, **overrides: Any) -> BrokerConfig:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def from_file(cls, path: Path, base: BrokerConfig | None = None) -> BrokerConfig:
        """The settings of a key=value file over `base`. Security keys replace base.security as a
        whole when the file has any; keys velamq does not use are logged once and ignored."""
        base = base or cls()
        types = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        security: dict[str, str] = {}
        ignored: list[str] = []
        for lineno, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith(("#", "!")):
                continue
            if "=" not in line:
                raise ValueError(f"{path}:{lineno}: expected key=value, got {raw!r}")
            key, value = (part.strip() for part in line.split("=", 1))
            value = _INLINE_COMMENT.sub("", value)
            if key in SECURITY_KEYS:
                security[key] = value
                continue
            name = _KEYS.get(key, key)
            if name not in types or name == "security":
                ignored.append(key)
                continue
            if name in _OPTIONAL_PORTS and not value:
                values[name] = None
                continue
            values[name] = _convert(str(types[name]), value, f"{path}:{lineno}")
        if ignored:
            _log_ignored(path, ignored)
        if security:
            values["security"] = SecuritySettings.from_properties(_resolve_paths(security, path.parent), path.parent)
        return replace(base, **values)


# velamq's files allow a comment after a value ("x=1   # why"); a '#' inside a value stays.
_INLINE_COMMENT: Final = re.compile(r"\s+#.*$")
# Keys whose empty value means "no such port" (Pulsar's Optional<Integer> ports).
_OPTIONAL_PORTS: Final = frozenset({"broker_port"})
# Security keys that name a file (relative to the config file, see the module docstring).
_PATH_KEYS: Final = ("tlsCertificateFilePath", "tlsKeyFilePath", "tlsTrustCertsFilePath", "basicAuthConf")


def _resolve_paths(props: dict[str, str], config_dir: Path) -> dict[str, str]:
    resolved = dict(props)
    for key in _PATH_KEYS:
        value = props.get(key, "").strip()
        if not value or "://" in value or value.startswith("data:") or Path(value).is_absolute():
            continue
        beside, here = config_dir / value, Path.cwd() / value
        resolved[key] = str(here if not beside.exists() and here.exists() else beside)
    return resolved


def _log_ignored(path: Path, ignored: list[str]) -> None:
    known = [*_KEYS, *SECURITY_KEYS]
    hints = []
    for key in ignored:
        # A typo, not another Pulsar key that extends one of ours (allowAutoSubscriptionCreation).
        near = [k for k in difflib.get_close_matches(key, known, n=1, cutoff=0.85) if abs(len(k) - len(key)) <= 2]
        if near:
            hints.append(f"{key} (did you mean {near[0]}?)")
    level = logging.WARNING if hints else logging.INFO
    extra = f"; close to settings velamq uses: {', '.join(hints)}" if hints else ""
    log.log(level, "%s: %d settings velamq does not use, ignored: %s%s", path, len(ignored), ", ".join(ignored), extra)


def _convert(type_name: str, value: str, where: str) -> Any:
    try:
        if type_name.endswith("| None"):
            type_name = type_name.removesuffix("| None").strip()
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
