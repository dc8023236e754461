"""A namespace's offload policies (docs/offload.md), stored as Pulsar stores them in `Policies`.

    offload_threshold             int bytes; -1 (Pulsar's default): not set, the broker's applies;
                                  another negative value: no offload by size; 0: as soon as sealed
    offload_threshold_in_seconds  int seconds, the same way (offload ledgers sealed longer ago)
    offload_deletion_lag_ms       int ms or null (not set); negative: local copies are kept
    offload_policies              Pulsar's OffloadPoliciesImpl: where (managedLedgerOffloadDriver,
                                  managedLedgerOffloadBucket / s3ManagedLedgerOffloadBucket, ...)
                                  and when (the three fields below), each field null when not set

For each of the three settings, `namespace_offload` gives what the namespace sets: the
offload_policies field if set, else the older single field (as Pulsar's
OffloadPoliciesImpl.oldPoliciesCompatible reads them), else None: the broker's setting applies.

A topic sets its own in its TopicPolicies' `offloadPolicies` (an OffloadPoliciesImpl, on the
partitioned topic for its partitions); `topic_offload` reads it, and `over` puts a topic's fields
over its namespace's, field by field (Pulsar's OffloadPoliciesImpl.mergeConfiguration).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from velamq.metadata._policies import int_at_least

NS_OFFLOAD_THRESHOLD: Final = "offload_threshold"
NS_OFFLOAD_THRESHOLD_S: Final = "offload_threshold_in_seconds"
NS_OFFLOAD_DELETION_LAG: Final = "offload_deletion_lag_ms"
NS_OFFLOAD_POLICIES: Final = "offload_policies"
TOPIC_OFFLOAD_POLICIES: Final = "offloadPolicies"

# OffloadPoliciesImpl's fields that say when.
THRESHOLD_BYTES: Final = "managedLedgerOffloadThresholdInBytes"
THRESHOLD_S: Final = "managedLedgerOffloadThresholdInSeconds"
DELETION_LAG_MS: Final = "managedLedgerOffloadDeletionLagInMillis"
# ... and those that say where (the generic spelling first, then the S3 one, as Pulsar reads them).
DRIVER: Final = "managedLedgerOffloadDriver"
BUCKET: Final = ("managedLedgerOffloadBucket", "s3ManagedLedgerOffloadBucket")
ENDPOINT: Final = ("managedLedgerOffloadServiceEndpoint", "s3ManagedLedgerOffloadServiceEndpoint")
REGION: Final = ("managedLedgerOffloadRegion", "s3ManagedLedgerOffloadRegion")
FILESYSTEM_URI: Final = "fileSystemURI"

# Each "when" field of offload_policies and the older namespace field it mirrors.
MIRRORED: Final = ((THRESHOLD_BYTES, NS_OFFLOAD_THRESHOLD), (THRESHOLD_S, NS_OFFLOAD_THRESHOLD_S),
                   (DELETION_LAG_MS, NS_OFFLOAD_DELETION_LAG))
NOT_SET: Final = -1  # the older threshold fields' "not set"


@dataclass(frozen=True, slots=True)
class OffloadOverrides:
    """What a namespace sets; None: not set (the broker's setting applies)."""

    threshold_bytes: int | None = None
    threshold_s: int | None = None
    deletion_lag_ms: int | None = None


def _int(value: Any) -> int | None:
    return int_at_least(value, -(1 << 63))


def first_of(policies: Mapping[str, Any], names: tuple[str, ...]) -> str:
    """The first non-empty string among an OffloadPoliciesImpl's spellings of one field."""
    for name in names:
        value = policies.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def namespace_offload(policies: Mapping[str, Any]) -> OffloadOverrides:
    """The offload settings a namespace's stored policies set (see the module docstring)."""
    impl = policies.get(NS_OFFLOAD_POLICIES)
    impl = impl if isinstance(impl, Mapping) else {}
    threshold = _int(impl.get(THRESHOLD_BYTES))
    if threshold is None:
        threshold = _int(policies.get(NS_OFFLOAD_THRESHOLD))
        threshold = None if threshold == NOT_SET else threshold
    threshold_s = _int(impl.get(THRESHOLD_S))
    if threshold_s is None:
        threshold_s = _int(policies.get(NS_OFFLOAD_THRESHOLD_S))
        threshold_s = None if threshold_s == NOT_SET else threshold_s
    lag = _int(impl.get(DELETION_LAG_MS))
    if lag is None:
        lag = _int(policies.get(NS_OFFLOAD_DELETION_LAG))
    return OffloadOverrides(threshold, threshold_s, lag)


def topic_offload(topic_policies: Mapping[str, Any]) -> OffloadOverrides:
    """The offload settings a topic's stored TopicPolicies set (its offloadPolicies' fields)."""
    impl = topic_policies.get(TOPIC_OFFLOAD_POLICIES)
    if not isinstance(impl, Mapping):
        return OffloadOverrides()
    return OffloadOverrides(_int(impl.get(THRESHOLD_BYTES)), _int(impl.get(THRESHOLD_S)),
                            _int(impl.get(DELETION_LAG_MS)))


def over(topic: OffloadOverrides, namespace: OffloadOverrides) -> OffloadOverrides:
    """The topic's settings where it sets them, the namespace's elsewhere."""
    return OffloadOverrides(
        namespace.threshold_bytes if topic.threshold_bytes is None else topic.threshold_bytes,
        namespace.threshold_s if topic.threshold_s is None else topic.threshold_s,
        namespace.deletion_lag_ms if topic.deletion_lag_ms is None else topic.deletion_lag_ms,
    )
