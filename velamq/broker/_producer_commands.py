"""Producer commands of one connection: PRODUCER, SEND, CLOSE_PRODUCER, and the receipts.

    PRODUCER        load the topic, apply its policies, admit the producer (access mode, backlog
                    quota, max producers); WaitForExclusive answers "queued" first and waits
    SEND            checks (checksum, size policy, metadata decodes), Topic.publish, then a
                    SEND_RECEIPT when the entry is durable (SEND_ERROR if the append failed)
    CLOSE_PRODUCER  detach and answer SUCCESS

SEND is handled inline, not as a task, so appends keep the order in which frames arrived and a
producer's receipts follow its sends.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from velamq._errors import ProtocolError
from velamq._topic_name import TopicName
from velamq.broker._channel import Channel, success_reply
from velamq.broker._context import ProducerBroker
from velamq.broker._errors import BrokerRequestError
from velamq.broker._producer import ServerProducer
from velamq.broker._topic import Topic
from velamq.protocol import Frame, parse_entry_metadata, pb, unsigned64
from velamq.storage import Position

log = logging.getLogger(__name__)

T = pb.BaseCommand


class ProducerCommands:
    """The producers of one connection, by producer id, and the handlers of their commands."""

    def __init__(self, channel: Channel, broker: ProducerBroker) -> None:
        self._channel = channel
        self._broker = broker
        self._producers: dict[int, ServerProducer] = {}

    async def on_producer(self, frame: Frame) -> None:
        request = frame.command.producer
        name = TopicName.parse(request.topic)
        existing = self._producers.get(request.producer_id)
        if existing is not None:
            if existing.topic.full_name != str(name):
                raise BrokerRequestError(pb.ProducerBusy, f"producer id {request.producer_id} is in use")
            self._producer_success(request, existing)
            return
        broker = self._broker
        topic = await broker.get_topic(name, create=True)
        producer_name = request.producer_name or broker.new_producer_name()
        producer = ServerProducer(
            channel=self._channel,
            producer_id=request.producer_id,
            name=producer_name,
            topic=topic,
            epoch=request.epoch,
            access_mode=int(request.producer_access_mode),
            connected_since_ms=broker.clock.now_ms(),
        )
        await topic.apply_policies(await broker.policies_for(name))
        _check_producer_limits(topic, producer_name)
        # No await between admission and registration: admission decisions stay valid.
        await topic.admit_producer(
            producer,
            request.topic_epoch if request.HasField("topic_epoch") else None,
            lambda: self._producer_queued(request, producer_name),
        )
        if topic.closed:  # unloaded while this request waited (issue 10): the client retries
            raise BrokerRequestError(pb.ServiceNotReady, f"topic {topic.full_name} was unloaded, retry")
        error = "connection closed" if self._channel.closed else topic.add_producer(producer)
        if error is not None:
            if topic.exclusive_producer == producer_name and producer_name not in topic.producers:
                topic.exclusive_producer = None
            if self._channel.closed:
                return
            raise BrokerRequestError(pb.ProducerBusy, error)
        self._producers[request.producer_id] = producer
        if request.HasField("schema"):
            broker.schemas.remember(topic.full_name, request.schema)
        self._producer_success(request, producer)

    def _producer_queued(self, request: pb.CommandProducer, producer_name: str) -> None:
        """WaitForExclusive: tell the client it is queued (it then waits without a timeout)."""
        reply = pb.BaseCommand(type=T.PRODUCER_SUCCESS)
        reply.producer_success.request_id = request.request_id
        reply.producer_success.producer_name = producer_name
        reply.producer_success.producer_ready = False
        self._channel.send_command(reply)

    def _producer_success(self, request: pb.CommandProducer, producer: ServerProducer) -> None:
        reply = pb.BaseCommand(type=T.PRODUCER_SUCCESS)
        r = reply.producer_success
        r.request_id = request.request_id
        r.producer_name = producer.name
        dedup = producer.topic.dedup
        r.last_sequence_id = dedup.last_sequence_id(producer.name) if dedup is not None else -1
        if request.HasField("schema"):
            r.schema_version = self._broker.schemas.version(producer.topic.full_name)
        if producer.access_mode != pb.Shared:
            r.topic_epoch = producer.topic.topic_epoch
        r.producer_ready = True
        self._channel.send_command(reply)

    def on_send(self, frame: Frame) -> None:
        send = frame.command.send
        producer = self._producers.get(send.producer_id)
        if producer is None:
            raise ProtocolError(f"SEND for unknown producer id {send.producer_id}")
        if frame.entry is None:
            raise ProtocolError("SEND without a payload")
        if not frame.checksum_valid:
            self._send_error(send.producer_id, send.sequence_id, pb.ChecksumError, "checksum mismatch")
            return
        entry = frame.entry
        # Stored entries must be readable by every consumer: a send whose metadata does not
        # decode is refused here (ProtocolError closes this connection only).
        metadata = parse_entry_metadata(entry)
        topic = producer.topic
        limit = topic.policies.max_message_bytes
        if limit is not None and not send.is_chunk and len(entry) > limit + 10:
            # As Pulsar: NotAllowed for this send (the client treats it as a connection error).
            self._send_error(
                send.producer_id, send.sequence_id, pb.NotAllowedError, f"Exceed maximum message size {limit}"
            )
            return
        dedup_checked = True
        if send.is_chunk:
            dedup_checked = metadata.chunk_id == metadata.num_chunks_from_msg - 1
            producer.chunks_in.add(1, len(entry))
            topic.chunks_published += 1
        future = topic.publish(
            producer,
            entry,
            send.num_messages if send.HasField("num_messages") else 1,
            send.sequence_id,
            send.highest_sequence_id,
            dedup_checked,
        )
        # ME-2: above the broker-wide publish buffer (bytes received, not yet durable), stop reading
        # from this producer's socket until storage has drained; producers see backpressure.
        buffer = self._broker.publish_buffer
        if buffer.full:
            self._channel.pause_reading_until_room(buffer)
        highest = send.highest_sequence_id if send.HasField("highest_sequence_id") else None
        future.add_done_callback(partial(self._receipt, producer, send.sequence_id, highest))

    def _send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None:
        reply = pb.BaseCommand(type=T.SEND_ERROR)
        reply.send_error.producer_id = producer_id
        reply.send_error.sequence_id = sequence_id
        reply.send_error.error = code  # type: ignore[assignment]
        reply.send_error.message = message
        self._channel.send_command(reply)

    def _receipt(
        self, producer: ServerProducer, sequence_id: int, highest: int | None, future: asyncio.Future[Position]
    ) -> None:
        if self._channel.closed:
            return
        if future.cancelled() or future.exception() is not None:
            log.error("append failed on %s: %s", producer.topic.full_name, future.exception())
            self._send_error(producer.producer_id, sequence_id, pb.PersistenceError, "could not store the message")
            return
        position = future.result()
        reply = pb.BaseCommand(type=T.SEND_RECEIPT)
        r = reply.send_receipt
        r.producer_id = producer.producer_id
        r.sequence_id = sequence_id
        if highest is not None:
            r.highest_sequence_id = highest
        r.message_id.ledgerId = unsigned64(position.ledger_id)
        r.message_id.entryId = unsigned64(position.entry_id)
        self._channel.send_command(reply)

    def on_close_producer(self, frame: Frame) -> None:
        request = frame.command.close_producer
        producer = self._producers.pop(request.producer_id, None)
        if producer is not None:
            producer.topic.remove_producer(producer)
        self._channel.send_command(success_reply(request.request_id))

    def forget(self, producer: ServerProducer) -> None:
        if self._producers.get(producer.producer_id) is producer:
            del self._producers[producer.producer_id]

    def detach_all(self) -> None:
        """The connection is gone: its producers leave their topics."""
        for producer in list(self._producers.values()):
            producer.topic.remove_producer(producer)
        self._producers.clear()


def _check_producer_limits(topic: Topic, producer_name: str) -> None:
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
