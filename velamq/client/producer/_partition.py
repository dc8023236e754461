"""One partition producer: vivo's send path, steps 4 to 12 (PR-4..PR-10, CH-1).

    send_async(message)
      4  interceptors' before_send may replace the message
      5  admission: one pending permit per message (per chunk for a chunked message) and its
         uncompressed bytes from the client-wide memory limit; block_if_queue_full waits (FIFO),
         otherwise ProducerQueueIsFullError / MemoryBufferIsFullError at once. Nothing is dropped:
         every admitted message's future completes with an id or an error
      6  batchable messages go into the batch container, which closes on batching_max_messages,
         batching_max_bytes or the batching_max_publish_delay_ms timer
      7-8  serialised (SingleMessageMetadata + payload each) and compressed as a whole
      9  one SendOp per batch / unbatched message / chunk, with its sequence id(s)
      10 the op joins the pending queue ...
      11 ... and is written at once if the producer is connected
      12 SEND_RECEIPT completes the head op: release permits and memory, complete each message's
         future (batch index i of n), call on_acknowledgement

    reconnect   PRODUCER again with the same name and epoch+1, then every pending op is written
                again, in order, before anything new (the broker deduplicates by name + sequence id)
    timeout     when the oldest pending op is older than send_timeout_ms, every pending op and the
                open batch fail with SendTimeoutError; their permits and memory are released

Sequence ids: the next id is last_sequence_id + 1 from the first PRODUCER_SUCCESS (or
initial_sequence_id), so a named producer resumes where the broker's dedup state is (CO-6). A
message may bring its own sequence_id; ids only go up.

Steps 6 to 11 (sequence ids, the open batch, SEND ops of single messages and chunks) are in the
base SendOps (_send_ops.py); 10 to 12 (the pending queue, receipts, the send timeout) are in
_pending.py.

Delayed messages (deliver_at) are never batched. With chunking enabled, a payload whose
compressed size exceeds the chunk size is split (see velamq/protocol/_chunks.py); every chunk
carries the same sequence id and the message's future completes on the last chunk's receipt with
the chunked id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from velamq.client._config import ProducerConfig
from velamq.client._errors import (
    AlreadyClosedError,
    ChecksumError,
    MemoryBufferIsFullError,
    MessageTooBigError,
    ProducerBlockedQuotaExceededError,
    ProducerQueueIsFullError,
    error_from_server,
)
from velamq.client._message import MessageId, ProducerMessage
from velamq.client.producer._backpressure import MemoryLimit, Permits
from velamq.client.producer._batch_container import BatchContainer, compress_payload, message_metadata
from velamq.client.producer._bulk_send import BulkPart, BulkSend
from velamq.client.producer._pending import PendingMessage, PendingSends, Receipt
from velamq.client.producer._send_ops import SendOps, State
from velamq.client.transport._connection import Connection
from velamq.client.transport._handler import ClientContext
from velamq.protocol import codec_from_name, pb, signed64

log = logging.getLogger("velamq.client")
T = pb.BaseCommand
_ACCESS_MODES = {"shared": pb.Shared, "exclusive": pb.Exclusive, "wait_for_exclusive": pb.WaitForExclusive,
                 "exclusive_with_fencing": pb.ExclusiveWithFencing}
# Room left in a chunk for its metadata, so that metadata + chunk stay within max_message_bytes.
chunk_metadata_reserve_bytes = 1024


def _chunk_payload_bytes(max_message_bytes: int, config: ProducerConfig) -> int:
    """The payload bytes a chunk (or an unbatched message) may carry."""
    limit = max_message_bytes
    if config.chunking_enabled:
        limit = min(limit, config.chunk_max_message_bytes or limit)
        return max(1, limit - chunk_metadata_reserve_bytes) if limit > 2 * chunk_metadata_reserve_bytes else limit
    return limit


_READY = State.READY


class PartitionProducer(SendOps):
    """The producer of one topic or partition, over one connection at a time.

    It registers (PRODUCER) with a name and an epoch, admits each message against the pending
    permits and the client's memory limit, batches, compresses or chunks it into SEND ops with
    sequence ids (its base SendOps), and hands them to its PendingSends, which completes them on
    their receipts. After a reconnect it registers again and writes every pending op again before
    anything new; the broker deduplicates by producer name and sequence id. Producer holds one per
    partition.
    """

    def __init__(self, client: ClientContext, owner: object, topic: str, partition: int, config: ProducerConfig,
                 permits: Permits, memory: MemoryLimit, producer_id: int) -> None:
        super().__init__(client, topic)
        self.owner = owner  # the Producer the application holds: what interceptors are given
        self.partition = partition
        self.config = config
        self.permits = permits
        self.memory = memory
        self.producer_id = producer_id
        self.state = State.CONNECTING
        self.producer_name: str = config.producer_name or ""
        self._user_named = config.producer_name is not None
        self._epoch = 0
        self._topic_epoch: int | None = None
        self._codec = codec_from_name(config.compression_type)
        self._next_sequence_id = config.initial_sequence_id + 1 if config.initial_sequence_id is not None else 0
        self._first_connect = True
        self.max_message_bytes = 0
        self.schema_version: bytes | None = None
        self.pending = PendingSends(topic, partition, config.send_timeout_ms, permits, memory, client.clock,
                                    self._notify, self._fail_all)
        if config.initial_sequence_id is not None:
            self.pending.last_sequence_id_published = config.initial_sequence_id
        self._batch: BatchContainer[PendingMessage | BulkPart] | None = (
            BatchContainer(config.batching_max_messages, config.batching_max_bytes) if config.batching_enabled else None
        )
        self._batch_timer: asyncio.TimerHandle | None = None
        self._ready = asyncio.Event()

    # ---- lifecycle -----------------------------------------------------------------------------

    async def _register(self, connection: Connection) -> None:
        request_id = self.new_request_id()
        command = pb.BaseCommand(type=T.PRODUCER)
        p = command.producer
        p.topic = self.topic
        p.producer_id = self.producer_id
        p.request_id = request_id
        if self.producer_name:
            p.producer_name = self.producer_name
            p.user_provided_producer_name = self._user_named
        p.epoch = self._epoch
        p.producer_access_mode = _ACCESS_MODES[self.config.access_mode]
        if self._topic_epoch is not None:
            p.topic_epoch = self._topic_epoch
        for k, v in self.config.properties.items():
            p.metadata.add(key=k, value=v)
        if self.config.initial_subscription_name:
            p.initial_subscription_name = self.config.initial_subscription_name
        schema = self.config.schema.protocol_schema() if self.config.schema is not None else None
        if schema is not None:
            p.schema.CopyFrom(schema)
        connection.add_producer(self.producer_id, self)
        try:
            reply = (await connection.request(command, request_id)).producer_success
        except BaseException:
            connection.remove_producer(self.producer_id, self)
            raise
        if self.state in (State.CLOSED, State.FAILED):
            connection.remove_producer(self.producer_id, self)
            return
        self.producer_name = reply.producer_name
        # The version the broker gave our schema: every message carries it, so that consumers
        # decode it with the schema it was written with (as the official clients do).
        self.schema_version = reply.schema_version or None
        if reply.HasField("topic_epoch"):
            self._topic_epoch = reply.topic_epoch
        if self._first_connect:
            self._first_connect = False
            if self.config.initial_sequence_id is None and reply.last_sequence_id >= 0:
                self.pending.last_sequence_id_published = reply.last_sequence_id
                self._next_sequence_id = max(self._next_sequence_id, reply.last_sequence_id + 1)
        self._epoch += 1
        self.max_message_bytes = connection.max_message_bytes
        self.connection = connection
        if self.state is State.CONNECTING:
            self.state = State.READY
        # Everything still pending goes out again, in order, before anything new (PR-9).
        for frame in self.pending.frames():
            connection.send_frame(frame)
        self._ready.set()
        self.pending.arm_timeout()

    async def start(self) -> None:
        try:
            await super().start()
        except BaseException:
            self.state = State.FAILED
            raise

    def on_connection_lost(self, connection: Connection) -> None:
        self._connection_gone(connection)

    def _on_cluster_switch(self) -> None:
        # The new cluster keeps its own topic epochs; the name and sequence ids go on (as the C++
        # client does), and the pending messages are sent there when PRODUCER succeeds.
        self._topic_epoch = None

    def on_closed_by_broker(self, connection: Connection, assigned_url: str | None = None) -> None:
        self._connection_gone(connection, assigned_url)

    def _on_disconnected(self) -> None:
        self._ready.clear()
        if self.state is State.READY:
            self.state = State.CONNECTING

    def _on_fatal(self, error: BaseException) -> None:
        self.state = State.FAILED
        self._fail_all(error)

    def _retry_after_refusal(self, error: BaseException) -> bool:
        """BR-3, as the official clients do on a reconnect: a backlog quota with
        producer_request_hold keeps the pending sends (they wait for the backlog to drain, bounded
        by the send timeout); with producer_exception they fail now. Either way the producer
        stays and reconnects once the broker admits it again."""
        if not isinstance(error, ProducerBlockedQuotaExceededError):
            return False
        if error.code == pb.ProducerBlockedQuotaExceededException:
            self._fail_all(error)
        return True

    @property
    def is_connected(self) -> bool:
        return self.state is State.READY and self.connection is not None and self.connection.is_ready

    @property
    def last_sequence_id_published(self) -> int:
        return self.pending.last_sequence_id_published

    # ---- send path -----------------------------------------------------------------------------

    def _check_usable(self) -> None:
        state = self.state
        if state is _READY:  # per message: one comparison (an enum member looked up on its class costs more)
            return
        if state is State.FAILED:
            raise self._failed or AlreadyClosedError(f"{self.topic}: producer failed")
        if state in (State.CLOSING, State.CLOSED):
            raise AlreadyClosedError(f"{self.topic}: producer is closed")

    async def send_async(self, message: ProducerMessage) -> asyncio.Future[MessageId]:
        self._check_usable()
        for interceptor in self.config.interceptors:
            message = interceptor.before_send(self.owner, message)
        if self.max_message_bytes == 0:
            await self._ready.wait()  # a lazily started producer: wait for its first connection
        chunk_size = _chunk_payload_bytes(self.max_message_bytes, self.config)
        payload = message.value
        size = len(payload)
        compressed: bytes | None = None
        meta: pb.MessageMetadata | None = None
        batchable = self._batch is not None and message.deliver_at is None
        chunks = 1
        if not batchable:
            meta = message_metadata(self.producer_name, message, 0, 0)
            if self.schema_version:
                meta.schema_version = self.schema_version
            compressed = compress_payload(meta, self._codec, payload)
            if len(compressed) > chunk_size:
                if not self.config.chunking_enabled:
                    raise MessageTooBigError(self.topic, len(compressed), chunk_size)
                chunks = -(-len(compressed) // chunk_size)
        elif size > self.max_message_bytes and self.max_message_bytes:
            raise MessageTooBigError(self.topic, size, self.max_message_bytes)
        await self._admit(chunks, size)
        # No await from here on: sequence ids are given in admission order.
        try:
            self._check_usable()
        except BaseException:
            self.permits.release(chunks)
            self.memory.release(size)
            raise
        future: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        pending = PendingMessage(message, future)
        sequence_id = self._take_sequence_id(message)
        if batchable:
            self._add_to_batch(message, sequence_id, pending)
        else:
            assert meta is not None and compressed is not None
            self._flush_batch()  # whatever was batched before goes first
            meta.sequence_id = sequence_id
            meta.publish_time = self.client.clock.now_ms()
            if chunks == 1:
                self._send_single(meta, compressed, sequence_id, pending, size)
            else:
                self._send_chunks(meta, compressed, sequence_id, pending, size, chunk_size, chunks)
        return future

    async def send_columns(self, values: Sequence[bytes], sizes: Sequence[int], bulk: BulkSend, offset: int, *,
                           sequence_ids: Sequence[int] | None = None, keys: Sequence[str | None] | None = None,
                           properties: Sequence[Mapping[str, str] | None] | None = None,
                           event_times: Sequence[int | None] | None = None) -> None:
        """Send a run of messages of a bulk send (Producer.send_many; batching on, no interceptors):
        admitted batch by batch (waiting for room), cut by the batch container's own rule, so the
        entries are the ones single sends of the same messages make; returns once all are admitted,
        and `bulk` completes with their ids."""
        self._check_usable()
        assert self._batch is not None
        if self.max_message_bytes == 0:
            await self._ready.wait()
        if self.max_message_bytes and sizes and max(sizes) > self.max_message_bytes:
            raise MessageTooBigError(self.topic, max(sizes), self.max_message_bytes)
        batch = self._batch
        k, n = 0, len(values)
        while k < n:
            take = batch.room(sizes, k)
            if take == 0:
                self._flush_batch()
                continue
            span = slice(k, k + take)
            size = sum(sizes[span])
            before = len(batch)
            await self.permits.acquire(take)
            admitted = 0
            try:
                await self.memory.acquire(size)
                admitted = size
                self._check_usable()
            except BaseException:
                self.permits.release(take)
                self.memory.release(admitted)
                raise
            # No await from here on. Single sends may have filled the batch meanwhile: from an
            # empty batch the run fits (an empty batch takes at least what a fuller one does).
            if len(batch) != before:
                self._flush_batch()
            if sequence_ids is None:
                first = self._next_sequence_id
                self._next_sequence_id += take
                seqs: Sequence[int] = range(first, first + take)
            else:
                seqs = sequence_ids[span]  # growing, as ids must
                self._next_sequence_id = max(self._next_sequence_id, seqs[-1] + 1)
            was_empty = len(batch) == 0
            full = batch.add_columns(values[span], seqs, BulkPart(bulk, offset + k, take), size,
                                     keys=keys[span] if keys is not None else None,
                                     properties=properties[span] if properties is not None else None,
                                     event_times=event_times[span] if event_times is not None else None)
            if full:
                self._flush_batch()
            elif was_empty:
                delay_s = self.config.batching_max_publish_delay_ms / 1000
                self._batch_timer = asyncio.get_running_loop().call_later(delay_s, self._flush_batch)
            k += take

    async def _admit(self, permits: int, size: int) -> None:
        if self.config.block_if_queue_full:
            await self.permits.acquire(permits)
            try:
                await self.memory.acquire(size)
            except BaseException:
                self.permits.release(permits)
                raise
            return
        if not self.permits.try_acquire(permits):
            raise ProducerQueueIsFullError(self.topic, self.permits.limit)
        if not self.memory.try_acquire(size):
            self.permits.release(permits)
            raise MemoryBufferIsFullError(size, self.memory.limit)

    # ---- receipts and failures -----------------------------------------------------------------

    def on_send_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        mid = receipt.message_id
        outcome = self.pending.on_receipt(receipt.sequence_id, signed64(mid.ledgerId), signed64(mid.entryId))
        if outcome is Receipt.OUT_OF_ORDER:
            # The broker lost something. Reconnecting resends everything pending.
            log.warning("%s: receipt %d while expecting %s; reconnecting", self.topic, receipt.sequence_id,
                        self.pending.head_sequence_id())
            if self.connection is not None:
                self.connection.close("out-of-order send receipt")

    def _notify(self, message: ProducerMessage, message_id: MessageId | None, error: BaseException | None) -> None:
        for interceptor in self.config.interceptors:
            try:
                interceptor.on_acknowledgement(self.owner, message, message_id, error)
            except Exception:
                log.exception("%s: interceptor on_acknowledgement failed", self.topic)

    def on_send_error(self, error: pb.CommandSendError) -> None:
        if error.error == pb.ChecksumError and self.pending.head_sequence_id() == error.sequence_id:
            self.pending.fail_head(ChecksumError(int(error.error), error.message))
            return
        # Any other send error: the C++ client drops the connection; reconnecting resends.
        log.warning("%s: SEND_ERROR %s (%s); reconnecting", self.topic, error.error, error.message)
        if self.connection is not None:
            self.connection.close(f"send error: {error_from_server(int(error.error), error.message)}")

    def _fail_all(self, error: BaseException) -> None:
        """Every admitted message not yet stored fails: the open batch and the pending queue."""
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        if self._batch is not None and len(self._batch):
            items, count, value_bytes = self._batch.drain_items()
            self.permits.release(count)
            self.memory.release(value_bytes)
            self.pending.fail_items(items, error)
        self.pending.fail_all(error)

    # ---- flush and close -----------------------------------------------------------------------

    @property
    def pending_count(self) -> int:
        return self.pending.message_count + (len(self._batch) if self._batch else 0)

    async def flush(self) -> None:
        """Send the open batch and wait until everything sent so far has its receipt (or failed)."""
        self._flush_batch()
        futures = self.pending.futures()
        if futures:
            await asyncio.gather(*futures, return_exceptions=True)

    async def close(self, wait_s: float | None = None) -> None:
        if self.state in (State.CLOSED,):
            return
        if self.state is State.READY or self.state is State.CONNECTING:
            self.state = State.CLOSING
            if len(self.pending) or (self._batch is not None and len(self._batch)):
                try:
                    await asyncio.wait_for(self.flush(), wait_s if wait_s is not None else
                                           self.config.send_timeout_ms / 1000 or self.client.config.operation_timeout_s)
                except TimeoutError:
                    pass
        self._stop_reconnecting()
        connection = self.connection
        self.connection = None
        if connection is not None and connection.is_ready:
            request_id = self.new_request_id()
            command = pb.BaseCommand(type=T.CLOSE_PRODUCER)
            command.close_producer.producer_id = self.producer_id
            command.close_producer.request_id = request_id
            await self._request_close(connection, command, request_id)
            connection.remove_producer(self.producer_id, self)
        self.pending.close()
        self.state = State.CLOSED
        self._fail_all(AlreadyClosedError(f"{self.topic}: producer closed"))
        self._ready.set()  # wake anything waiting for a connection that will never come
