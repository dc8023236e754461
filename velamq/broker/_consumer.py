"""A consumer attached to a subscription over one connection: its permits and its unacked entries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from velamq.broker._rates import RateCounter
from velamq.protocol import encode_payload_command, pb
from velamq.storage import Position

if TYPE_CHECKING:
    from velamq.broker._subscription import Subscription

_U64_MAX = (1 << 64) - 1


class ConsumerConnection(Protocol):
    """What a consumer needs from the connection it lives on."""

    @property
    def protocol_version(self) -> int: ...

    @property
    def remote_address(self) -> str: ...

    def write(self, data: bytes) -> None: ...

    def send_command(self, command: pb.BaseCommand) -> None: ...

    def forget_consumer(self, consumer: Consumer) -> None: ...


class Consumer:
    __slots__ = (
        "chunks_out",
        "connected_since_ms",
        "connection",
        "consumer_id",
        "hash_ranges",
        "name",
        "out",
        "partition_index",
        "pending",
        "permits",
        "priority",
        "subscription",
    )

    def __init__(
        self,
        connection: ConsumerConnection,
        consumer_id: int,
        name: str,
        subscription: Subscription,
        priority: int,
        partition_index: int,
    ) -> None:
        self.connection = connection
        self.consumer_id = consumer_id
        self.name = name
        self.subscription = subscription
        self.priority = priority
        self.partition_index = partition_index  # -1 for a non-partitioned topic
        self.permits = 0
        # Entries dispatched to this consumer and not yet acknowledged: position -> message count.
        self.pending: dict[Position, int] = {}
        # Key_Shared: the hash ranges [start, end] this consumer owns.
        self.hash_ranges: list[tuple[int, int]] = []
        self.out = RateCounter()
        self.chunks_out = RateCounter()
        self.connected_since_ms = 0

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
        message_id.ledgerId = position.ledger_id & _U64_MAX
        message_id.entryId = position.entry_id & _U64_MAX
        if self.partition_index >= 0:
            message_id.partition = self.partition_index
        if redelivery_count:
            message.redelivery_count = redelivery_count
        if ack_set:
            message.ack_set.extend(ack_set)
        self.connection.write(encode_payload_command(command, entry))
        self.permits -= num_messages
        self.pending[position] = num_messages
        self.out.add(num_messages, len(entry))

    def notify_active(self, active: bool) -> None:
        if self.connection.protocol_version < 12:
            return
        command = pb.BaseCommand(type=pb.BaseCommand.ACTIVE_CONSUMER_CHANGE)
        command.active_consumer_change.consumer_id = self.consumer_id
        command.active_consumer_change.is_active = active
        self.connection.send_command(command)

    def close_by_broker(self) -> None:
        """Tell the client this consumer is closed; it will look up and subscribe again."""
        command = pb.BaseCommand(type=pb.BaseCommand.CLOSE_CONSUMER)
        command.close_consumer.consumer_id = self.consumer_id
        command.close_consumer.request_id = _U64_MAX
        self.connection.send_command(command)
