"""Automatic topic creation on the broker's side: the rule in force for a namespace, and the
partitioned topics a lookup creates (velamq.metadata's AutoTopicCreation is the rule itself).

    creating = TopicCreation(metadata, config_rule)
    await creating.may_create(name)     # may a producer (or a consumer asking for it) create `name`?
    await creating.partitions_of(name)  # PARTITIONED_METADATA: a missing topic of a namespace whose
                                        # rule says "partitioned" is created now, with N partitions

As Pulsar's BrokerService.isAllowAutoTopicCreation and
fetchPartitionedTopicMetadataCheckAllowAutoCreationAsync: the namespace's autoTopicCreationOverride
when it is valid, else the broker's keys; a partition name ("x-partition-2") is never made a
partitioned topic, and a topic that exists as non-partitioned stays so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from velamq._errors import AlreadyExistsError, NotFoundError
from velamq._topic_name import TopicName
from velamq.metadata._auto_creation import AutoTopicCreation, resolve_auto_topic_creation


class CreationRows(Protocol):
    """What the rules read and write of the metadata store (MetadataStore implements it)."""

    async def namespace_policies(self, ns: str) -> Mapping[str, Any]: ...

    async def get_partitions(self, topic: str) -> int: ...

    async def topic_exists(self, topic: str) -> bool: ...

    async def create_partitioned_topic(self, topic: str, partitions: int) -> None: ...


class TopicCreation:
    """The automatic topic creation rules of one broker over its metadata store (stateless: the
    namespace policies are read through the store's cache each time)."""

    def __init__(self, metadata: CreationRows, broker_rule: AutoTopicCreation) -> None:
        self.metadata = metadata
        self.broker_rule = broker_rule

    async def rule_for(self, namespace: str) -> AutoTopicCreation:
        try:
            policies = await self.metadata.namespace_policies(namespace)
        except NotFoundError:
            return self.broker_rule  # no such namespace: the lookup itself says so
        return resolve_auto_topic_creation(policies, self.broker_rule)

    async def may_create(self, name: TopicName) -> bool:
        return (await self.rule_for(name.namespace)).allowed

    async def partitions_of(self, name: TopicName) -> int:
        """The partitions of a partitioned topic (0 for anything else), after creating the topic as
        partitioned if it does not exist and its namespace's rule says so."""
        full = str(name)
        partitions = await self.metadata.get_partitions(full)
        if partitions or name.partition_index >= 0:
            return partitions
        create = (await self.rule_for(name.namespace)).partitioned
        if not create or await self.metadata.topic_exists(full):
            return 0
        try:
            await self.metadata.create_partitioned_topic(full, create)
        except AlreadyExistsError:
            pass  # another lookup made it meanwhile (or it was made non-partitioned)
        return await self.metadata.get_partitions(full)
