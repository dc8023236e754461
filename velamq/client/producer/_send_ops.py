"""A partition producer's SEND ops: steps 6 to 11 of the send path (_partition.py).

An admitted message gets its sequence id here, then joins the open batch (flushed when full or on
the batching_max_publish_delay_ms timer) or becomes a SEND op of its own, or one per chunk for a
payload over the chunk size (CH-1). Each op joins the pending queue (_pending.py) and is
written at once if the producer is connected; otherwise the reconnect writes it.
"""

from __future__ import annotations

import asyncio
import enum

from velamq.client._config import ProducerConfig
from velamq.client._errors import ConnectError
from velamq.client._message import ProducerMessage
from velamq.client.producer._batch_container import BatchContainer
from velamq.client.producer._bulk_send import BulkPart
from velamq.client.producer._pending import ChunkContext, PendingMessage, PendingSends, SendOp
from velamq.client.transport._connection import Connection
from velamq.client.transport._handler import ConnectionHandler
from velamq.protocol import build_entry, chunk_uuid, pb, split_chunks

T = pb.BaseCommand


def _send_command(producer_id: int, sequence_id: int, *, num_messages: int | None = None,
                  highest: int | None = None, is_chunk: bool = False) -> pb.BaseCommand:
    command = pb.BaseCommand(type=T.SEND)
    s = command.send
    s.producer_id = producer_id
    s.sequence_id = sequence_id
    if num_messages is not None:
        s.num_messages = num_messages
    if highest is not None:
        s.highest_sequence_id = highest
    if is_chunk:
        s.is_chunk = True
    return command


class State(enum.Enum):
    CONNECTING = "connecting"
    READY = "ready"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"



class SendOps(ConnectionHandler):
    """A base of PartitionProducer: owns how admitted messages become SEND ops (sequence ids, the
    open batch and its timer, single and chunked entries) and hands them to the pending queue.
    Admission, registration, receipts and close stay in PartitionProducer."""

    config: ProducerConfig
    producer_id: int
    producer_name: str
    schema_version: bytes | None
    state: State
    pending: PendingSends
    _codec: int  # the compression type (codec_from_name)
    _next_sequence_id: int
    _batch: BatchContainer[PendingMessage | BulkPart] | None
    _batch_timer: asyncio.TimerHandle | None

    def _take_sequence_id(self, message: ProducerMessage) -> int:
        if message.sequence_id is not None:
            sequence_id = message.sequence_id
            self._next_sequence_id = max(self._next_sequence_id, sequence_id + 1)
        else:
            sequence_id = self._next_sequence_id
            self._next_sequence_id += 1
        return sequence_id

    def _add_to_batch(self, message: ProducerMessage, sequence_id: int, pending: PendingMessage) -> None:
        batch = self._batch
        assert batch is not None
        if not batch.has_space_for(len(message.value)):
            self._flush_batch()
        was_empty = len(batch) == 0
        if batch.add(message, sequence_id, pending):
            self._flush_batch()
        elif was_empty:
            delay_s = self.config.batching_max_publish_delay_ms / 1000
            self._batch_timer = asyncio.get_running_loop().call_later(delay_s, self._flush_batch)

    def _flush_batch(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        batch = self._batch
        if batch is None or len(batch) == 0:
            return
        built = batch.build(self.producer_name, self._codec, self.client.clock.now_ms())
        if self.schema_version:
            built.metadata.schema_version = self.schema_version
        n = built.count
        entry = build_entry(built.metadata, built.payload)
        command = _send_command(self.producer_id, built.sequence_id, num_messages=n, highest=built.highest_sequence_id)
        self._enqueue(SendOp(built.sequence_id, built.highest_sequence_id, n, Connection.encode_send(command, entry),
                             list(built.items), self.client.clock.monotonic_s(), n, built.value_bytes, batched=True,
                             entry_bytes=len(entry)))

    def _send_single(self, meta: pb.MessageMetadata, payload: bytes, sequence_id: int, pending: PendingMessage,
                     size: int) -> None:
        entry = build_entry(meta, payload)
        frame = Connection.encode_send(_send_command(self.producer_id, sequence_id), entry)
        self._enqueue(SendOp(sequence_id, sequence_id, 1, frame, [pending], self.client.clock.monotonic_s(), 1, size,
                             entry_bytes=len(entry)))

    def _send_chunks(self, meta: pb.MessageMetadata, payload: bytes, sequence_id: int, pending: PendingMessage,
                     size: int, chunk_size: int, chunks: int) -> None:
        parts = split_chunks(payload, chunk_size)
        assert len(parts) == chunks
        meta.uuid = chunk_uuid(self.producer_name, sequence_id)
        meta.num_chunks_from_msg = chunks
        meta.total_chunk_msg_size = len(payload)
        context = ChunkContext()
        now_s = self.client.clock.monotonic_s()
        for chunk_id, part in enumerate(parts):
            meta.chunk_id = chunk_id
            entry = build_entry(meta, part)
            frame = Connection.encode_send(_send_command(self.producer_id, sequence_id, is_chunk=True), entry)
            last = chunk_id == chunks - 1
            # Memory is given back with the last chunk; every chunk gives back its own permit.
            self._enqueue(SendOp(sequence_id, sequence_id, 1, frame, [pending] if last else [], now_s, 1,
                                 size if last else 0, chunk=context, last_chunk=last, entry_bytes=len(entry)))

    def _enqueue(self, op: SendOp) -> None:
        self.pending.append(op)
        connection = self.connection
        if self.state in (State.READY, State.CLOSING) and connection is not None and connection.is_ready:
            try:
                connection.send_frame(op.frame)
            except ConnectError:
                pass  # resent after reconnect
