"""A consumer attached to a subscription over one connection: its permits and its unacked entries."""

from __future__ import annotations

from velamq.broker._channel import NO_REQUEST_ID, Channel
from velamq.broker._ownership import BrokerUrls, tell_new_owner
from velamq.broker._rates import NO_RATE, RateCounter
from velamq.protocol import encode_payload_command, pb, unsigned64
from velamq.storage import Position


class ServerConsumer:
    """The broker's side of one client consumer: the permits the client granted (FLOW), the entries
    sent to it and not yet acknowledged (`pending`), and the frames that go to it. The subscription
    decides what it gets; the consumer only encodes and counts."""

    __slots__ = (
        "auto_consume",
        "channel",
        "chunks_out",
        "connected_since_ms",
        "consumer_id",
        "hash_ranges",
        "last_acked_ms",
        "last_consumed_ms",
        "last_flow_ms",
        "metadata",
        "name",
        "out",
        "partition_index",
        "pending",
        "permits",
        "priority",
        "redelivered",
    )

    def __init__(
        self,
        channel: Channel,
        consumer_id: int,
        name: str,
        priority: int,
        partition_index: int,
        connected_since_ms: int = 0,
    ) -> None:
        self.channel = channel
        self.consumer_id = consumer_id
        self.name = name
        self.priority = priority
        self.partition_index = partition_index  # -1 for a non-partitioned topic
        self.permits = 0
        # Entries dispatched to this consumer and not yet acknowledged: position -> message count.
        self.pending: dict[Position, int] = {}
        # Key_Shared: the hash ranges [start, end] this consumer owns.
        self.hash_ranges: list[tuple[int, int]] = []
        self.out = RateCounter()
        self.chunks_out = NO_RATE  # made on its first chunk (_dispatch.py), most consumers get none
        # Messages it gave back (nacks, redelivery requests): made when it joins its subscription.
        self.redelivered = NO_RATE
        self.connected_since_ms = connected_since_ms
        # SUBSCRIBE's metadata, and when it last acknowledged, got an entry, sent FLOW (epoch ms,
        # 0: never): Pulsar's ConsumerStats show them.
        self.metadata: dict[str, str] = {}
        self.last_acked_ms = 0
        self.last_consumed_ms = 0
        self.last_flow_ms = 0
        # Subscribed with an AUTO_CONSUME schema: it reads whatever the topic's schema is, so it does
        # not count as "active" when a later consumer's schema could become the topic's.
        self.auto_consume = False

    @property
    def unacked_messages(self) -> int:
        return sum(self.pending.values())

    def send_entry(
        self, position: Position, entry: bytes, num_messages: int, redelivery_count: int, ack_set: list[int] | None
    ) -> None:
        command = pb.BaseCommand(type=pb.BaseCommand.MESSAGE)
        message = command.message
        message.consumer_id = self.consumer_id
        message_id = message.message_id
        message_id.ledgerId = unsigned64(position.ledger_id)
        message_id.entryId = unsigned64(position.entry_id)
        if self.partition_index >= 0:
            message_id.partition = self.partition_index
        if redelivery_count:
            message.redelivery_count = redelivery_count
        if ack_set:
            message.ack_set.extend(ack_set)
        self.channel.write(encode_payload_command(command, entry))
        self.permits -= num_messages
        self.pending[position] = num_messages
        self.out.add(num_messages, len(entry))

    def notify_active(self, active: bool) -> None:
        if self.channel.protocol_version < 12:
            return
        command = pb.BaseCommand(type=pb.BaseCommand.ACTIVE_CONSUMER_CHANGE)
        command.active_consumer_change.consumer_id = self.consumer_id
        command.active_consumer_change.is_active = active
        self.channel.send_command(command)

    def close_by_broker(self, new_owner: BrokerUrls | None = None) -> None:
        """Detach from the connection and tell the client; it looks up and subscribes again, or
        goes straight to `new_owner` when its bundle moved to another worker (PIP-307)."""
        self.channel.forget_consumer(self)
        command = pb.BaseCommand(type=pb.BaseCommand.CLOSE_CONSUMER)
        close = command.close_consumer
        close.consumer_id = self.consumer_id
        close.request_id = NO_REQUEST_ID
        tell_new_owner(close, new_owner)
        self.channel.send_command(command)
