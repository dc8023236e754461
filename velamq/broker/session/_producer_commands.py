"""Producer commands of one connection: PRODUCER, SEND, CLOSE_PRODUCER, and the receipts.

    PRODUCER        load the topic, register or match its schema (_schemas.py), apply its
                    policies, admit the producer (read-only broker, access mode, backlog quota,
                    max producers); WaitForExclusive answers "queued" first and waits; the
                    producer is registered only with its success reply
    SEND            checks (checksum, size policy, metadata decodes, its strings are UTF-8),
                    Topic.publish_with, then a SEND_RECEIPT when the entry is durable: the
                    entry's _Receipt (a Published, _publish.py) sends it the moment storage
                    resolves the append, from a template (SendReceiptEncoder)
    CLOSE_PRODUCER  detach and answer SUCCESS

SEND is handled inline, not as a task, so appends keep the order in which frames arrived and a
producer's receipts follow its sends.

When the broker is read-only (disk usage over diskUsageThreshold, or a storage write failed, see
guards/_disk.py) producers are closed by the broker and PRODUCER is refused with
ProducerBlockedQuotaExceededException: the official client then fails its pending sends at once and
retries the producer with back-off. A SEND that arrives meanwhile, or for a producer the broker has
just closed, is dropped without a reply: the client still holds it and either sends it again on
its new producer or fails its callback. A failed append turns the broker read-only (the same
path) instead of answering SEND_ERROR, which the official client answers by reconnecting and
sending the same messages again, forever.
"""

from __future__ import annotations

import logging

from velamq._errors import ProtocolError, StorageError
from velamq._topic_name import TopicName
from velamq.broker._channel import CLOSED_CHANNEL, Channel, ProducerRef, success_reply
from velamq.broker._errors import BrokerRequestError
from velamq.broker.session._context import ProducerBroker
from velamq.broker.session._strict_metadata import metadata_accepted
from velamq.broker.session._text_fields import non_utf8_field
from velamq.broker.session._topic_ports import PublishingTopic
from velamq.broker.topic._dedup import origin_name
from velamq.broker.topic._producer import ServerProducer
from velamq.broker.topic._publish import Published
from velamq.broker.topic._topic import REPLICATOR_PREFIX, Topic
from velamq.protocol import (
    Frame,
    SendReceiptEncoder,
    entry_metadata_bytes,
    parse_entry_metadata,
    parse_entry_metadata_bytes,
    pb,
)
from velamq.storage import Position

log = logging.getLogger(__name__)

T = pb.BaseCommand

# Producer ids the broker closed, remembered per connection so their late SENDs are dropped.
closed_ids_max = 10_000


class AttachedProducer(ServerProducer):
    """A producer as its connection knows it: its topic as a PublishingTopic, persistent or not (the
    producer itself only needs ProducerTopic of it)."""

    __slots__ = ()
    topic: PublishingTopic


class _Receipt(Published):
    """What one SEND waits for: its receipt once the entry is durable, or the failure's answer."""

    __slots__ = ("_commands", "_highest", "_producer", "_sequence_id")

    def __init__(
        self, commands: ProducerCommands, producer: AttachedProducer, sequence_id: int, highest: int | None
    ) -> None:
        # Published.__init__ inlined (one per unbatched entry): appended_to sets the rest.
        self._done = False
        self._commands = commands
        self._producer = producer
        self._sequence_id = sequence_id
        self._highest = highest

    def durable(self, position: Position) -> None:
        # SEND_RECEIPT, once per unbatched entry: straight to the channel, no call in between.
        commands = self._commands
        channel = commands._channel
        if not channel.closed:
            ledger_id, entry_id = position
            channel.write(commands._receipts.encode(
                self._producer.producer_id, self._sequence_id, self._highest, ledger_id, entry_id
            ))

    def failed(self, exception: BaseException) -> None:
        self._commands.send_failed(self._producer, self._sequence_id, exception)


class ProducerCommands:
    """The producers of one connection, by producer id, and the handlers of their commands."""

    def __init__(self, channel: Channel, broker: ProducerBroker) -> None:
        self._channel = channel
        self._receipts = SendReceiptEncoder()
        self._broker = broker
        self._producers: dict[int, AttachedProducer] = {}
        self._closed_by_broker: dict[int, None] = {}  # insertion-ordered set
        self._appended_bytes = 0  # entry bytes appended during the current read (after_read)

    async def on_producer(self, frame: Frame) -> None:
        request = frame.command.producer
        name = TopicName.parse(request.topic)
        existing = self._producers.get(request.producer_id)
        if existing is not None:
            if existing.topic.full_name != str(name):
                raise BrokerRequestError(pb.ProducerBusy, f"producer id {request.producer_id} is in use")
            self._channel.send_command(self._success_reply(request, existing))
            return
        broker = self._broker
        _check_writable(broker, name)
        topic = await broker.open_topic(name, create=True)
        schema_version = await broker.schemas.for_producer(name, request.schema if request.HasField("schema") else None)
        producer_name = request.producer_name or broker.new_producer_name()
        producer = AttachedProducer(
            channel=self._channel,
            producer_id=request.producer_id,
            name=producer_name,
            topic=topic,
            epoch=request.epoch,
            access_mode=int(request.producer_access_mode),
            connected_since_ms=broker.clock.now_ms(),
            schema_version=schema_version,
            metadata={kv.key: kv.value for kv in request.metadata},
            is_replicator=producer_name.startswith(REPLICATOR_PREFIX),
        )
        await topic.apply_policies(await broker.policies_for(name))
        if request.initial_subscription_name and isinstance(topic, Topic):
            await _create_initial_subscription(topic, request.initial_subscription_name)
        _check_writable(broker, name)
        _check_producer_limits(topic, producer_name)
        # No await between admission and registration: admission decisions stay valid.
        await topic.admit_producer(
            producer,
            request.topic_epoch if request.HasField("topic_epoch") else None,
            lambda: self._producer_queued(request, producer_name),
        )
        # The reply is built before the producer is registered anywhere, and sent right after: a
        # producer exists only together with its success reply.
        reply = self._success_reply(request, producer)
        if topic.closed:  # unloaded while this request waited (issue 10): the client retries
            raise BrokerRequestError(pb.ServiceNotReady, f"topic {topic.full_name} was unloaded, retry")
        error = "connection closed" if self._channel.closed else topic.add_producer(producer)
        if error is not None:
            topic.not_registered(producer_name)
            if self._channel.closed:
                return
            raise BrokerRequestError(pb.ProducerBusy, error)
        self._producers[request.producer_id] = producer
        self._closed_by_broker.pop(request.producer_id, None)
        self._channel.send_command(reply)

    def _producer_queued(self, request: pb.CommandProducer, producer_name: str) -> None:
        """WaitForExclusive: tell the client it is queued (it then waits without a timeout)."""
        reply = pb.BaseCommand(type=T.PRODUCER_SUCCESS)
        reply.producer_success.request_id = request.request_id
        reply.producer_success.producer_name = producer_name
        reply.producer_success.producer_ready = False
        self._channel.send_command(reply)

    def _success_reply(self, request: pb.CommandProducer, producer: AttachedProducer) -> pb.BaseCommand:
        reply = pb.BaseCommand(type=T.PRODUCER_SUCCESS)
        r = reply.producer_success
        r.request_id = request.request_id
        r.producer_name = producer.name
        dedup = producer.topic.dedup
        r.last_sequence_id = dedup.last_sequence_id(producer.name) if dedup is not None else -1
        if producer.schema_version is not None:
            r.schema_version = producer.schema_version
        if producer.access_mode != pb.Shared:
            r.topic_epoch = producer.topic.topic_epoch
        r.producer_ready = True
        return reply

    def on_send(self, frame: Frame) -> None:
        # The hot path of an unbatched producer (issue 12): each protobuf field is read once.
        send = frame.command.send
        producer_id = send.producer_id
        producer = self._producers.get(producer_id)
        if producer is None:
            self._send_without_producer(producer_id)
            return
        broker = self._broker
        disk_guard = broker.disk_guard
        if disk_guard.read_only and producer.topic.name.persistent:
            producer.close_by_broker()  # the client fails or re-sends what it has pending
            return
        entry = frame.entry
        if entry is None:
            raise ProtocolError("SEND without a payload")
        sequence_id = send.sequence_id
        if not frame.checksum_valid:
            self._send_error(producer_id, sequence_id, pb.ChecksumError, "checksum mismatch")
            return
        # Stored entries must be readable by every consumer: a send whose metadata does not
        # decode is refused here (ProtocolError closes this connection only); one parse when it
        # is fine (_strict_metadata.py), the reason found out only when it is not.
        if not metadata_accepted(entry_metadata_bytes(entry)):
            _refuse_metadata(entry)
        topic = producer.topic
        is_chunk = send.is_chunk
        limit = topic.policies.max_message_bytes
        if limit is not None and not is_chunk and len(entry) > limit + 10:
            self._too_large(producer_id, sequence_id, limit)
            return
        if producer.is_replicator:  # rare: a geo-replicator's SEND needs its metadata (RP-5)
            metadata = parse_entry_metadata(entry)
            dedup_checked = not is_chunk or _chunk_received(producer, metadata, len(entry))
            self._publish_replicated(producer, entry, send, metadata, dedup_checked)
            return
        dedup_checked = not is_chunk or _chunk_received(producer, parse_entry_metadata(entry), len(entry))
        has_highest = send.HasField("highest_sequence_id")
        highest_sequence_id = send.highest_sequence_id if has_highest else 0
        topic.publish_with(
            producer,
            entry,
            send.num_messages,  # 1 when absent (the field's default)
            sequence_id,
            highest_sequence_id,
            dedup_checked,
            _Receipt(self, producer, sequence_id, highest_sequence_id if has_highest else None),
        )
        self._appended_bytes += len(entry)  # after_read: the publish buffer and the disk guard

    def after_read(self) -> None:
        """Once per read of the socket, after its frames (not once per SEND, issue 22). ME-2: above
        the broker-wide publish buffer (bytes received, not yet durable), stop reading from this
        socket until storage has drained; producers see backpressure. The buffer only grows while
        a read's frames are handled (appends resolve between loop iterations), so it is full now if
        it was after any SEND of the read, and reading pauses before the next read either way."""
        appended = self._appended_bytes
        if not appended:
            return
        self._appended_bytes = 0
        broker = self._broker
        buffer = broker.publish_buffer
        if buffer.full:
            self._channel.pause_reading_until_room(buffer)
        broker.disk_guard.note_appended(appended)

    def _publish_replicated(self, producer: AttachedProducer, entry: bytes, send: pb.CommandSend,
                            metadata: pb.MessageMetadata, dedup_checked: bool) -> None:
        """A geo-replicator's SEND (RP-5): deduplicated by where the message comes from and the
        original producer's name and sequence ids in its metadata, not by the replicator's own
        names and ids (which only pair the receipt with the send), as Pulsar does. A replicated
        marker is appended as a marker: no deduplication, not counted as a message in."""
        receipt = _Receipt(self, producer, send.sequence_id, None)
        topic = producer.topic
        if not isinstance(topic, Topic):  # replication is of persistent topics only
            raise BrokerRequestError(pb.NotAllowedError, f"{topic.full_name} is not replicated")
        if metadata.HasField("marker_type"):
            topic.append_marker_with(entry, receipt)
        else:
            topic.publish_with(
                producer,
                entry,
                send.num_messages if send.HasField("num_messages") else 1,
                metadata.sequence_id,
                metadata.highest_sequence_id,
                dedup_checked,
                receipt,
                dedup_name=origin_name(metadata),
            )
        buffer = self._broker.publish_buffer
        if buffer.full:
            self._channel.pause_reading_until_room(buffer)
        self._broker.disk_guard.note_appended(len(entry))

    def _send_without_producer(self, producer_id: int) -> None:
        if producer_id not in self._closed_by_broker:
            raise ProtocolError(f"SEND for unknown producer id {producer_id}")
        # Else sent before the client saw CLOSE_PRODUCER: it sends it again, or fails it.

    def _too_large(self, producer_id: int, sequence_id: int, limit: int) -> None:
        # As Pulsar: NotAllowed for this send (the client treats it as a connection error).
        self._send_error(producer_id, sequence_id, pb.NotAllowedError, f"Exceed maximum message size {limit}")

    def _send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None:
        reply = pb.BaseCommand(type=T.SEND_ERROR)
        reply.send_error.producer_id = producer_id
        reply.send_error.sequence_id = sequence_id
        reply.send_error.error = code  # type: ignore[assignment]
        reply.send_error.message = message
        self._channel.send_command(reply)

    def send_failed(self, producer: AttachedProducer, sequence_id: int, error: BaseException) -> None:
        """The append failed (run from the loop, not from inside storage's write path)."""
        if self._channel.closed or producer.topic.closed:
            return  # gone, or unloaded or deleted: the producer was closed, the client sends it again
        if isinstance(error, StorageError):
            # Read-only until storage writes again: every producer is closed, none re-admitted.
            self._broker.disk_guard.write_failed(error)
            if self._producers.get(producer.producer_id) is producer:
                producer.close_by_broker()
            return
        self._broker.log_limit.error("append-failed", "append failed on %s: %s", producer.topic.full_name, error)
        self._send_error(producer.producer_id, sequence_id, pb.PersistenceError, "could not store the message")

    def on_close_producer(self, frame: Frame) -> None:
        request = frame.command.close_producer
        producer = self._producers.pop(request.producer_id, None)
        if producer is not None:
            producer.topic.remove_producer(producer)
        self._channel.send_command(success_reply(request.request_id))

    def forget(self, producer: ProducerRef) -> None:
        """The broker closed this producer (or a reconnect elsewhere replaced it)."""
        if self._producers.get(producer.producer_id) is producer:
            del self._producers[producer.producer_id]
            self._closed_by_broker[producer.producer_id] = None
            if len(self._closed_by_broker) > closed_ids_max:
                del self._closed_by_broker[next(iter(self._closed_by_broker))]

    def detach_all(self) -> None:
        """The connection is gone: its producers leave their topics, and this object lets go of the
        connection (late receipts find a closed channel)."""
        for producer in list(self._producers.values()):
            producer.topic.remove_producer(producer)
        self._producers.clear()
        self._closed_by_broker.clear()
        self._channel = CLOSED_CHANNEL


def _check_writable(broker: ProducerBroker, name: TopicName) -> None:
    guard = broker.disk_guard
    if guard.read_only and name.persistent:  # a non-persistent topic writes nothing
        # The one refusal the official client answers by failing its pending sends (not retrying
        # them forever): see the module docstring and guards/_disk.py.
        raise BrokerRequestError(pb.ProducerBlockedQuotaExceededException, f"broker is read-only: {guard.reason}")


async def _create_initial_subscription(topic: Topic, subscription: str) -> None:
    """PRODUCER's initial_subscription_name (a dead-letter producer's): the subscription is created
    from the earliest message unless it exists, on persistent topics only, as Pulsar's
    ServerCnx.handleProducer does, so that what is published from now on is kept for it."""
    if topic.name.domain != "persistent" or subscription in topic.ledger.cursors or subscription in topic.subscriptions:
        return
    if "\n" in subscription:
        raise BrokerRequestError(pb.NotAllowedError, "invalid subscription name")
    await topic.ledger.open_cursor(subscription, "earliest")


def _check_producer_limits(topic: PublishingTopic, producer_name: str) -> None:
    exceeded = topic.backlog_quota_exceeded
    if exceeded is not None:
        code = (
            pb.ProducerBlockedQuotaExceededException
            if exceeded == "producer_exception"
            else pb.ProducerBlockedQuotaExceededError
        )
        raise BrokerRequestError(code, f"Cannot create producer on topic with backlog quota exceeded ({exceeded})")
    limit = topic.policies.max_producers
    if limit > 0 and len([p for p in topic.producers if p != producer_name]) >= limit:
        raise BrokerRequestError(pb.ProducerBusy, f"Topic reached max producers limit {limit}")


def _refuse_metadata(entry: bytes) -> None:
    """The metadata of this SEND was refused (metadata_accepted): raise why, naming the field."""
    metadata, metadata_bytes = parse_entry_metadata_bytes(entry)  # undecodable, required fields missing
    bad = non_utf8_field(metadata, metadata_bytes)
    if bad is not None:
        raise ProtocolError(f"SEND metadata: {bad} is not valid UTF-8")
    raise ProtocolError("SEND metadata refused")  # not reached: the three checks are the strict parse's


def _chunk_received(producer: AttachedProducer, metadata: pb.MessageMetadata, size: int) -> bool:
    """Count a chunk of a chunked message; True for its last chunk (only that one is checked for
    duplicates: the message's sequence id is complete only then)."""
    producer.chunks_in.add(1, size)
    producer.topic.chunks_published += 1
    return bool(metadata.chunk_id == metadata.num_chunks_from_msg - 1)
