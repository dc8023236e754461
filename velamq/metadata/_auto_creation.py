"""Automatic topic creation: whether a topic that does not exist is made on first use, and as what.

The broker's keys (Pulsar's names, standalone.conf):

    allowAutoTopicCreation       true          a producer, or a consumer that asks for it, creates
                                               a missing topic
    allowAutoTopicCreationType   non-partitioned | partitioned
    defaultNumPartitions         1             partitions of a topic created as partitioned

A namespace overrides all three with its `autoTopicCreationOverride` policy (Pulsar's
AutoTopicCreationOverride: {"allowAutoTopicCreation", "topicType", "defaultNumPartitions"}, set
through /admin/v2/namespaces/{t}/{ns}/autoTopicCreation). As in Pulsar's
BrokerService.getAutoTopicCreationOverride, a stored override that is not valid counts as none.

A topic created as partitioned is created when a client asks for its partitioned metadata (every
client does before it creates a producer or a consumer, Pulsar's
BrokerService.fetchPartitionedTopicMetadataCheckAllowAutoCreationAsync); the client then uses its
partitions, which are created on first use as those of any partitioned topic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from velamq.metadata._store import partitions_max

NS_AUTO_TOPIC_CREATION: Final = "autoTopicCreationOverride"  # the namespace policy's key (Pulsar's Policies)
PARTITIONED: Final = "partitioned"
NON_PARTITIONED: Final = "non-partitioned"
TOPIC_TYPES: Final = (NON_PARTITIONED, PARTITIONED)


@dataclass(frozen=True, slots=True)
class AutoTopicCreation:
    """What happens to a topic that does not exist when a client uses it."""

    allowed: bool = True
    topic_type: str = NON_PARTITIONED
    partitions: int = 1  # for topic_type partitioned

    @property
    def partitioned(self) -> int:
        """Partitions a topic created now gets: 0 for a non-partitioned topic (or none created)."""
        return self.partitions if self.allowed and self.topic_type == PARTITIONED else 0

    def as_json(self) -> dict[str, Any]:
        """Pulsar's AutoTopicCreationOverride (defaultNumPartitions only for a partitioned type)."""
        body: dict[str, Any] = {"allowAutoTopicCreation": self.allowed, "topicType": self.topic_type}
        if self.topic_type == PARTITIONED:
            body["defaultNumPartitions"] = self.partitions
        return body


def auto_topic_creation_error(value: Any, partitions_max: int) -> str | None:
    """Why an AutoTopicCreationOverride body is not valid (Pulsar's validateOverride, and its
    bound maxNumPartitionsPerPartitionedTopic), or None. Types are checked first."""
    if not isinstance(value, Mapping):
        return "[AutoTopicCreationOverride] must be a JSON object"
    allowed = value.get("allowAutoTopicCreation")
    if not isinstance(allowed, bool):
        return "[allowAutoTopicCreation] must be true or false"
    topic_type = value.get("topicType")
    partitions = value.get("defaultNumPartitions")
    if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, int)):
        return "[defaultNumPartitions] must be an integer"
    if not allowed:
        return None
    if topic_type not in TOPIC_TYPES:
        return f"Unknown topic type [{topic_type}]"
    if topic_type == PARTITIONED:
        if partitions is None:
            return "[defaultNumPartitions] cannot be null when the type is partitioned."
        if partitions <= 0:
            return "[defaultNumPartitions] cannot be less than 1 for partition type."
        if partitions > partitions_max:
            return f"Number of partitions should be less than or equal to {partitions_max}"
    elif partitions is not None:
        return "[defaultNumPartitions] is not allowed to be set when the type is non-partition."
    return None


def resolve_auto_topic_creation(namespace: Mapping[str, Any], broker: AutoTopicCreation) -> AutoTopicCreation:
    """The rule for a namespace: its valid override, else the broker's."""
    override = namespace.get(NS_AUTO_TOPIC_CREATION) if namespace else None
    if override is None or auto_topic_creation_error(override, partitions_max) is not None:
        return broker
    allowed = bool(override["allowAutoTopicCreation"])
    topic_type = override.get("topicType") if allowed else broker.topic_type
    partitions = override.get("defaultNumPartitions") or broker.partitions
    return AutoTopicCreation(allowed, str(topic_type), int(partitions))
