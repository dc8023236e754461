"""Each topic's offload policy (docs/offload.md), as storage's offload check asks for it: the
topic's own offload policies over its namespace's (velamq/metadata/_offload_policies) over the
broker's settings, read from metadata at every check, so that a change applies at the next one, no
restart.

A partition has its partitioned topic's policy. A name that is not a topic's, or whose namespace is
gone, gets the broker's settings (storage's default: left out). Topic policies cost little to look
up for topics that have none (metadata caches which topics of a namespace carry policies).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from velamq._errors import InvalidTopicNameError, NotFoundError
from velamq._topic_name import TopicName
from velamq.metadata._offload_policies import OffloadOverrides, namespace_offload, over, topic_offload
from velamq.storage import OffloadPolicy

log = logging.getLogger("velamq.broker")


class NamespacePolicies(Protocol):
    async def get_policies(self, ns: str) -> dict[str, Any]: ...

    async def get_topic_policies(self, topic: str) -> dict[str, Any]: ...


def apply(overrides: OffloadOverrides, default: OffloadPolicy) -> OffloadPolicy:
    return OffloadPolicy(
        default.threshold_bytes if overrides.threshold_bytes is None else overrides.threshold_bytes,
        default.threshold_s if overrides.threshold_s is None else overrides.threshold_s,
        default.deletion_lag_ms if overrides.deletion_lag_ms is None else overrides.deletion_lag_ms,
    )


class TopicOffloadPolicies:
    """A storage PolicySource: the policies of a page of managed ledgers, one metadata read per
    namespace in the page."""

    def __init__(self, metadata: NamespacePolicies, default: OffloadPolicy) -> None:
        self._metadata = metadata
        self.default = default

    async def __call__(self, names: list[str]) -> dict[str, OffloadPolicy]:
        by_namespace: dict[str, OffloadOverrides | None] = {}
        policies: dict[str, OffloadPolicy] = {}
        for name in names:
            try:
                namespace = TopicName.parse(name).namespace
            except InvalidTopicNameError:
                continue
            if namespace not in by_namespace:
                by_namespace[namespace] = await self._namespace(namespace)
            overrides = by_namespace[namespace]
            if overrides is None:
                continue
            overrides = over(topic_offload(await self._metadata.get_topic_policies(name)), overrides)
            if overrides != OffloadOverrides():
                policies[name] = apply(overrides, self.default)
        return policies

    async def _namespace(self, namespace: str) -> OffloadOverrides | None:
        try:
            return namespace_offload(await self._metadata.get_policies(namespace))
        except NotFoundError:
            return None
