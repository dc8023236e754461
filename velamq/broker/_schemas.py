"""Schemas producers declared, kept per topic while the broker runs (GET_SCHEMA answers from here).

A partition's schema is its partitioned topic's. Only the first schema declared for a topic is
kept and every schema has version 0: velamq has no schema registry yet.
"""

from __future__ import annotations

import struct

from velamq._errors import InvalidTopicNameError
from velamq._topic_name import TopicName
from velamq.protocol import pb

_VERSION_ZERO = struct.pack(">q", 0)


def _schema_topic(topic: str) -> str:
    try:
        return str(TopicName.parse(topic).partitioned_parent)
    except InvalidTopicNameError:
        return topic


class SchemaRegistry:
    """topic (partitioned parent) -> the first schema a producer declared for it."""

    def __init__(self) -> None:
        self._schemas: dict[str, pb.Schema] = {}

    def remember(self, topic: str, schema: pb.Schema) -> None:
        self._schemas.setdefault(_schema_topic(topic), schema)

    def schema_for(self, topic: str) -> pb.Schema | None:
        return self._schemas.get(_schema_topic(topic))

    def version(self, topic: str) -> bytes:
        return _VERSION_ZERO

    def forget(self, topic: str) -> None:
        """A deleted topic's schema; deleting one partition leaves its partitioned topic's."""
        self._schemas.pop(topic, None)
