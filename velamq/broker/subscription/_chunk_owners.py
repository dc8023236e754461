"""CH-7: on Shared and Key_Shared subscriptions, every chunk of a chunked message goes to the
consumer that got its first chunk (Pulsar's PIP-37, SharedConsumerAssignor).

The first chunk a subscription sends of a uuid picks a consumer as any message would; the later
chunks go to that consumer, or wait in the replay set for its permits; the assignment ends with
the last chunk. A consumer that leaves loses its assignments: its unacknowledged chunks go back to
the replay set, which sends in position order, so the first chunk goes out again and picks the
next owner. A message is assembled in one place, never split across consumers.
"""

from __future__ import annotations

from velamq.broker.log._entry_info import EntryInfo
from velamq.broker.subscription._consumer import ServerConsumer
from velamq.broker.subscription._selector import ConsumerSelector
from velamq.storage import Position


class ChunkOwners:
    """Which consumer each chunked message under way belongs to, by uuid (module docstring).
    Owned by the subscription's dispatch; made only while a chunked message is under way."""

    __slots__ = ("_owners",)

    def __init__(self) -> None:
        self._owners: dict[str, ServerConsumer] = {}

    def __bool__(self) -> bool:
        return bool(self._owners)

    def consumer_for(
        self, info: EntryInfo, selector: ConsumerSelector, position: Position, key_blocked: bool
    ) -> ServerConsumer | None:
        """The consumer to send this chunk to now; None, or one without room, to hold it back."""
        if key_blocked:
            return None  # Key_Shared: an older entry of the key waits for redelivery
        owner = self._owners.get(info.chunk_uuid)
        if owner is None:
            owner = selector.select(info.sticky_key, position)
            if owner is None or owner.permits <= 0 or not owner.channel.writable:
                return owner  # not sent now: the replay set keeps it
            if info.chunk_id + 1 < info.num_chunks:
                self._owners[info.chunk_uuid] = owner
        elif info.chunk_id + 1 >= info.num_chunks and owner.permits > 0 and owner.channel.writable:
            del self._owners[info.chunk_uuid]  # the last chunk: the message is complete
        return owner

    def forget(self, consumer: ServerConsumer) -> None:
        """The consumer left: its messages start again from their first chunk, elsewhere."""
        self._owners = {uuid: c for uuid, c in self._owners.items() if c is not consumer}
