"""A MESSAGE from the broker becomes a ReceivedBatch for the receiver queue (CO-1, CO-5, CH-3).

    checksum          a MESSAGE whose CRC32C fails is acknowledged with ChecksumMismatch, dropped
    metadata          an entry that does not decode is dropped
    chunks            a chunk goes to the ChunkAssembler (velamq/protocol/_chunks.py); only the
                      whole payload goes on, with the chunked message id (first and last chunk)
    decompression     the payload as the metadata's codec says
    batch             decoded at once into columns (velamq.protocol.decode_batch), skipping indexes
                      the broker says were acknowledged (CommandMessage.ack_set) and messages
                      compaction left out; an unbatched message is a batch of one
    start filter      for readers: what precedes the start id is dropped (the broker starts AT
                      the start id; exclusivity is the client's job)

Every message dropped here gives its permit back: the broker counted it against the FLOW.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from velamq._clock import Clock
from velamq._errors import ProtocolError
from velamq.client._config import ConsumerConfig
from velamq.client._message import MessageId, ReceivedBatch
from velamq.client.consumer._ack_grouping import decode_ack_set
from velamq.client.consumer._acks import ConsumerAcks
from velamq.protocol import (
    ChunkAssembler,
    MessageColumns,
    decode_batch,
    decompress,
    pb,
    signed64,
    single_columns,
    split_entry,
)

log = logging.getLogger("velamq.client")
chunk_expiry_check_interval_s = 1.0


class IntakeOwner(Protocol):
    """What the intake needs from its TopicConsumer."""

    topic: str
    partition: int
    generation: int

    def permits_back(self, count: int = 1) -> None: ...

    def deliver(self, batch: ReceivedBatch) -> None: ...

    def send_ack(self, ack_type: int, ids: list[pb.MessageIdData], validation_error: int | None = None) -> bool: ...


class MessageIntake:
    """Decodes the MESSAGEs of one TopicConsumer into ReceivedBatches for `owner.deliver`.
    It keeps the state that spans messages: chunks waiting for the rest of their message (with a
    timer that expires them) and the reader's start filter, which the owner sets on (re)subscribe
    and seek."""

    def __init__(self, owner: IntakeOwner, config: ConsumerConfig, clock: Clock, acks: ConsumerAcks) -> None:
        self._owner = owner
        self._clock = clock
        self._acks = acks
        # Readers: messages at or before this id (at: unless inclusive) are dropped.
        self.start_filter: tuple[MessageId, bool] | None = None
        self._chunks: ChunkAssembler[MessageId] = ChunkAssembler(
            config.max_pending_chunked_message, config.expire_time_of_incomplete_chunked_message_ms,
            config.auto_ack_oldest_chunked_message_on_queue_full)
        self._chunk_timer: asyncio.TimerHandle | None = None

    def on_message(self, command: pb.CommandMessage, entry: bytes, checksum_valid: bool) -> None:
        owner = self._owner
        ledger_id, entry_id = signed64(command.message_id.ledgerId), signed64(command.message_id.entryId)
        entry_id_only = MessageId(ledger_id, entry_id, owner.partition, topic=owner.topic)
        if not checksum_valid:
            log.warning("%s: message %s fails its checksum; dropping it", owner.topic, entry_id_only)
            owner.send_ack(pb.CommandAck.Individual, [entry_id_only.to_proto()], pb.CommandAck.ChecksumMismatch)
            owner.permits_back()
            return
        try:
            metadata, payload = split_entry(entry)
        except ProtocolError as exc:
            log.warning("%s: undecodable message %s: %s", owner.topic, entry_id_only, exc)
            owner.permits_back()
            return
        redelivery_count = command.redelivery_count
        first_chunk: MessageId | None = None
        if metadata.num_chunks_from_msg > 1 and not metadata.HasField("num_messages_in_batch"):
            assembled = self._on_chunk(metadata, payload, entry_id_only)
            if assembled is None:
                return
            payload, message_id = assembled
            first_chunk = message_id.first_chunk
            ledger_id, entry_id = message_id.ledger_id, message_id.entry_id
        try:
            payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
        except ProtocolError as exc:
            log.warning("%s: cannot decompress message %s: %s", owner.topic, entry_id_only, exc)
            owner.permits_back()
            return
        acks = None
        if metadata.HasField("num_messages_in_batch"):
            n = metadata.num_messages_in_batch
            unacked = decode_ack_set(command.ack_set, n) if command.ack_set else None
            try:
                columns = decode_batch(payload, n, None if unacked is None else set(range(n)) - unacked)
            except ProtocolError as exc:
                log.warning("%s: undecodable batch %s: %s", owner.topic, entry_id_only, exc)
                owner.permits_back(n)
                return
            acks = self._acks.register_batch((ledger_id, entry_id), n, unacked if unacked is not None else range(n))
            if len(columns) < n:
                owner.permits_back(n - len(columns))
        else:
            columns = single_columns(metadata, payload)
        if self.start_filter is not None and not self._cut_at_start(columns, ledger_id, entry_id):
            return
        batch = ReceivedBatch(columns, owner.topic, owner.partition, ledger_id, entry_id, metadata, redelivery_count,
                              owner, owner.generation, first_chunk)
        batch.acks = acks
        if len(columns):
            owner.deliver(batch)

    def _cut_at_start(self, columns: MessageColumns, ledger_id: int, entry_id: int) -> bool:
        """Readers: drop the messages before the start id; False when none is left."""
        assert self.start_filter is not None
        start, inclusive = self.start_filter
        key, start_key = (ledger_id, entry_id), start.entry_key()
        if key > start_key:
            return True
        n = len(columns)
        if key == start_key and columns.batch_size and start.batch_index >= 0:
            first = start.batch_index if inclusive else start.batch_index + 1
            indexes = columns.batch_indexes
            cut = next((j for j in range(n) if (indexes[j] if indexes is not None else j) >= first), n)
        else:
            cut = 0 if key == start_key and inclusive else n
        if cut:
            self._owner.permits_back(cut)
            columns.drop_before(cut)
        return cut < n

    # ---- chunks --------------------------------------------------------------------------------

    def _on_chunk(self, metadata: pb.MessageMetadata, payload: bytes,
                  chunk_id: MessageId) -> tuple[bytes, MessageId] | None:
        outcome = self._chunks.add(metadata.uuid, metadata.chunk_id, metadata.num_chunks_from_msg,
                                   metadata.total_chunk_msg_size, chunk_id, payload, self._clock.now_ms())
        for dropped in outcome.evicted:
            self._acks.on_chunked_message_dropped(dropped)
        if outcome.assembled is None:
            self._owner.permits_back()  # a chunk the application will never see as such
            self._arm_chunk_timer()
            return None
        first, last = outcome.assembled.first_id, outcome.assembled.last_id
        message_id = MessageId(last.ledger_id, last.entry_id, self._owner.partition, first_chunk=first,
                               topic=self._owner.topic)
        return outcome.assembled.payload, message_id

    def _arm_chunk_timer(self) -> None:
        if self._chunk_timer is not None or not len(self._chunks):
            return
        self._chunk_timer = asyncio.get_running_loop().call_later(chunk_expiry_check_interval_s, self._expire_chunks)

    def _expire_chunks(self) -> None:
        self._chunk_timer = None
        for dropped in self._chunks.expire(self._clock.now_ms()):
            self._acks.on_chunked_message_dropped(dropped)
        self._arm_chunk_timer()

    def clear_chunks(self) -> None:
        """A new subscription generation: the broker sends every chunk again."""
        self._chunks.clear()

    def close(self) -> None:
        if self._chunk_timer is not None:
            self._chunk_timer.cancel()
            self._chunk_timer = None
