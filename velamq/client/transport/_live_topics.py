"""LiveTopics: the topics this client has a connected producer, consumer or reader on, and where.

Why: a producer next to a consumer of the same topic (request/reply, a pipeline that consumes
and produces one topic, tests) asked the broker twice where the topic lives, a
PARTITIONED_METADATA and a LOOKUP for each of them. While a handle of the topic is attached, both
answers are known already:

- the topic is not partitioned: a handle attaches to one concrete topic (a non-partitioned topic
  or one partition), and Pulsar refuses to make a partitioned topic where a non-partitioned one
  exists;
- its owner is the broker at the other end of that handle's connection: a broker serves only the
  topics it owns, and closes their handles before their ownership moves (unload, hand-over to
  another broker, deletion).

What is remembered, per exact topic name: the handles that got PRODUCER_SUCCESS or SUBSCRIBE's
SUCCESS and are still attached, each with its connection. A handle leaves the moment it closes,
the broker closes it (CLOSE_PRODUCER / CLOSE_CONSUMER, a hand-over's included), its connection is
lost or closed, or the client moves to another cluster; a handle that is reconnecting is not here.
The handles keep it up to date themselves (ConnectionHandler.attached / _detach).

Only a handle's first attempt to connect, and a new producer's or consumer's partition count, are
answered from here: a handle retrying after an error, or reconnecting, always asks the broker.
Nothing expires on a timer: an entry lives exactly as long as a live handle, so the memory is
bounded by the live handles. The client's event loop owns it (no locks).
"""

from __future__ import annotations

from velamq.client.transport._connection import Connection
from velamq.client.transport._lookup import DiscoveryStats


class LiveTopics:
    """topic name -> {handle: the connection it is attached on}; each answer given is counted in
    the client's DiscoveryStats (partitions_remembered, lookups_remembered)."""

    def __init__(self, stats: DiscoveryStats) -> None:
        self._handles: dict[str, dict[object, Connection]] = {}
        self._stats = stats

    def attach(self, topic: str, handle: object, connection: Connection) -> None:
        """`handle` (a producer or consumer of `topic`) was accepted by the broker on `connection`."""
        self._handles.setdefault(topic, {})[handle] = connection

    def detach(self, topic: str, handle: object) -> None:
        """`handle` is no longer attached (closed, closed by the broker, its connection gone)."""
        handles = self._handles.get(topic)
        if handles is None or handles.pop(handle, None) is None:
            return
        if not handles:
            del self._handles[topic]

    def connection_of(self, topic: str) -> Connection | None:
        """A ready connection a live handle of `topic` is attached on, or None."""
        for connection in self._handles.get(topic, {}).values():
            if connection.is_ready:
                return connection
        return None

    def known_unpartitioned(self, topic: str) -> bool:
        """True when a live handle of exactly this topic says it is not partitioned right now."""
        if self.connection_of(topic) is None:
            return False
        self._stats.partitions_remembered += 1
        return True

    def owner_connection(self, topic: str) -> Connection | None:
        """The connection to `topic`'s owner that a live handle of it uses, or None: ask the broker."""
        connection = self.connection_of(topic)
        if connection is not None:
            self._stats.lookups_remembered += 1
        return connection

    @property
    def topic_count(self) -> int:
        return len(self._handles)

    @property
    def handle_count(self) -> int:
        return sum(len(handles) for handles in self._handles.values())
