"""What happens to a message after it is delivered: acknowledged, negatively acknowledged, timed
out, redelivered or dead-lettered (CO-2, CO-3), for one TopicConsumer.

    acknowledge(id)             a batch index is recorded in BatchAcks; the entry is acknowledged
                                when its last index is (each index with an ack_set when
                                batch_index_ack_enabled); a chunked message acknowledges every chunk
    acknowledge_cumulative(id)  up to the id (Exclusive / Failover only)
    negative_acknowledge(id)    redelivered after negative_ack_redelivery_delay_ms (NegativeAcks)
    not acknowledged in time    redelivered after ack_timeout_ms (AckTimeouts)
    redeliver(ids)              REDELIVER_UNACKNOWLEDGED_MESSAGES with the ids on Shared / Key_Shared,
                                everything unacked (redeliver_all) on Exclusive / Failover

Acks leave through the AckGroupingTracker, which keeps them while the consumer is disconnected and
sends them after the next SUBSCRIBE.

Dead letters (CO-3): a message whose redelivery_count reached max_redeliver_count is delivered
once more and remembered; when it is redelivered again (negative ack, ack timeout, or arriving
with a higher count) the client publishes it to the dead-letter topic and acknowledges it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from velamq._clock import Clock
from velamq.client._config import ConsumerConfig
from velamq.client._message import Message, MessageId, ReceivedBatch
from velamq.client.consumer._ack_grouping import AckGroupingTracker, BatchAcks, EntryAcks, EntryKey, encode_ack_set
from velamq.client.consumer._redelivery import AckTimeouts, NegativeAcks
from velamq.protocol import EvictedMessage, pb

if TYPE_CHECKING:
    from velamq.client.consumer._dead_letter import DeadLetterSender

log = logging.getLogger("velamq.client")


class AckOwner(Protocol):
    """What ConsumerAcks needs from its TopicConsumer: where the commands go."""

    topic: str
    partition: int

    @property
    def shared(self) -> bool: ...

    @property
    def is_closed(self) -> bool: ...

    def send_ack(self, ack_type: int, ids: list[pb.MessageIdData], validation_error: int | None = None) -> bool: ...

    def send_redeliver(self, ids: list[MessageId] | None) -> None: ...

    def redeliver_all(self) -> None: ...


class ConsumerAcks:
    """The acknowledgement state of one TopicConsumer: pending grouped acks, unacknowledged batch
    indexes, negative acks and ack timeouts waiting to fire, and the messages that will go to the
    dead-letter topic on their next redelivery. It decides what to send; the owner sends it."""

    def __init__(self, owner: AckOwner, config: ConsumerConfig, clock: Clock,
                 dead_letters: DeadLetterSender | None) -> None:
        self._owner = owner
        self.config = config
        self.batches = BatchAcks()
        self.grouped = AckGroupingTracker(owner.send_ack, config.ack_grouping_time_ms, config.ack_grouping_max_size)
        self._nacks = NegativeAcks(self.redeliver, config.negative_ack_redelivery_delay_ms, clock)
        self._ack_timeouts = AckTimeouts(self.redeliver, config.ack_timeout_ms, config.ack_timeout_tick_ms, clock)
        self._dead_letters = dead_letters
        self._dead_letter_candidates: dict[MessageId, Message] = {}

    # ---- delivery ------------------------------------------------------------------------------

    def register_batch(self, key: EntryKey, batch_size: int, unacked: Iterable[int]) -> EntryAcks:
        return self.batches.register(key, batch_size, unacked)

    @property
    def ack_timeouts_enabled(self) -> bool:
        return self._ack_timeouts.timeout_ms > 0

    @property
    def tracks_ids(self) -> bool:
        """Whether an acknowledgement must also clear per-id state (ack timeouts, negative acks,
        dead-letter candidates); when not, messages are acknowledged by position, without ids."""
        return self._ack_timeouts.enabled or bool(len(self._nacks)) or bool(self._dead_letter_candidates)

    def on_taken(self, message_id: MessageId) -> None:
        """The application has the message: its ack timeout starts."""
        self._ack_timeouts.add(message_id)

    def used_up_redeliveries(self, message: Message) -> bool:
        """Called for each message before it is queued. A message at max_redeliver_count is
        delivered and remembered as a dead-letter candidate; above it, True: the caller does not
        deliver it but redelivers it, which dead-letters it."""
        policy = self.config.dead_letter_policy
        if policy is None or self._dead_letters is None or message.redelivery_count < policy.max_redeliver_count:
            return False
        self._dead_letter_candidates[message.message_id] = message
        return message.redelivery_count > policy.max_redeliver_count

    def on_chunked_message_dropped(self, dropped: EvictedMessage[MessageId]) -> None:
        """Reassembly gave a chunked message up: acknowledge its chunks, or let them time out."""
        log.info("%s: dropping chunked message %s (%s)", self._owner.topic, dropped.uuid, dropped.reason)
        if dropped.acknowledge:
            for mid in dropped.chunk_ids:
                self.grouped.add_individual(mid)
        else:
            for mid in dropped.chunk_ids:
                self._ack_timeouts.add(mid)

    # ---- acknowledging -------------------------------------------------------------------------

    def _forget(self, message_id: MessageId) -> None:
        self._ack_timeouts.remove(message_id)
        self._nacks.remove(message_id)
        self._dead_letter_candidates.pop(message_id, None)

    def acknowledge(self, message_id: MessageId) -> None:
        self._forget(message_id)
        if message_id.first_chunk is not None:
            self._ack_chunked(message_id)
            return
        if message_id.batch_index >= 0:
            done, ack_set = self.batches.ack(
                message_id.entry_key(), message_id.batch_index, encode=self.config.batch_index_ack_enabled
            )
            if done:
                self.grouped.add_individual(message_id)
            elif self.config.batch_index_ack_enabled:
                self.grouped.add_individual(message_id, ack_set)
            return
        self.grouped.add_individual(message_id)

    def acknowledge_one(self, batch: ReceivedBatch, j: int) -> None:
        """acknowledge_range(batch, j, j + 1), for the per-message path, kept short."""
        entry = batch.acks
        if entry is None or batch.first_chunk is not None or self._ack_timeouts.timeout_ms or len(self._nacks) or \
                self._dead_letter_candidates:
            self.acknowledge_range(batch, j, j + 1)
            return
        indexes = batch.columns.batch_indexes
        remaining = entry.remaining
        remaining.discard(j if indexes is None else indexes[j])
        if not remaining:
            self.batches.done((batch.ledger_id, batch.entry_id), entry)
            self.grouped.add_entry(batch.ledger_id, batch.entry_id)
        elif self.config.batch_index_ack_enabled:
            self.grouped.add_entry(batch.ledger_id, batch.entry_id, encode_ack_set(entry.size, remaining))

    def acknowledge_range(self, batch: ReceivedBatch, first: int, end: int) -> None:
        """acknowledge() of messages first..end-1 of a received batch, without a MessageId each."""
        if batch.first_chunk is not None or self.tracks_ids:
            for j in range(first, end):
                self.acknowledge(batch.message_id(j))
            return
        entry = batch.acks
        if entry is None:  # an unbatched message
            self.grouped.add_entry(batch.ledger_id, batch.entry_id)
            return
        indexes = batch.columns.batch_indexes
        encode = self.config.batch_index_ack_enabled
        done, ack_set = self.batches.ack_indexes(
            (batch.ledger_id, batch.entry_id), entry,
            range(first, end) if indexes is None else indexes[first:end], encode)
        if done:
            self.grouped.add_entry(batch.ledger_id, batch.entry_id)
        elif encode:
            self.grouped.add_entry(batch.ledger_id, batch.entry_id, ack_set)

    def _ack_chunked(self, message_id: MessageId) -> None:
        first = message_id.first_chunk
        assert first is not None
        if first.ledger_id == message_id.ledger_id:
            for entry_id in range(first.entry_id, message_id.entry_id + 1):
                self.grouped.add_individual(MessageId(first.ledger_id, entry_id, self._owner.partition))
        else:
            self.grouped.add_individual(first)
            self.grouped.add_individual(message_id)

    def acknowledge_cumulative(self, message_id: MessageId) -> None:
        if self._owner.shared:
            raise ValueError("cumulative acknowledgement is not allowed on Shared / Key_Shared subscriptions")
        self._ack_timeouts.remove_up_to(message_id)
        if message_id.batch_index >= 0 and message_id.batch_size > 0 and \
                message_id.batch_index < message_id.batch_size - 1:
            done, ack_set = self.batches.ack_up_to(message_id.entry_key(), message_id.batch_index)
            if not done:
                if self.config.batch_index_ack_enabled:
                    self.grouped.add_cumulative(message_id, ack_set)
                elif message_id.entry_id > 0:
                    self.grouped.add_cumulative(MessageId(message_id.ledger_id, message_id.entry_id - 1))
                return
        self.batches.forget_up_to(message_id.entry_key())
        self.grouped.add_cumulative(message_id)

    def negative_acknowledge(self, message_id: MessageId) -> None:
        self._ack_timeouts.remove(message_id)
        self._nacks.add(message_id)

    # ---- redelivery ----------------------------------------------------------------------------

    def redeliver(self, ids: list[MessageId]) -> None:
        """Redeliver these ids (dead-lettering the ones that used up their redeliveries)."""
        if self._owner.is_closed:
            return
        remaining = []
        for mid in ids:
            candidate = self._dead_letter_candidates.pop(mid, None)
            if candidate is not None and self._dead_letters is not None:
                asyncio.get_running_loop().create_task(self._dead_letter(candidate))
            else:
                remaining.append(mid)
        if not remaining:
            return
        if self._owner.shared:
            self._owner.send_redeliver(remaining)
        else:
            self._owner.redeliver_all()

    async def _dead_letter(self, message: Message) -> None:
        assert self._dead_letters is not None
        try:
            await self._dead_letters.send(message)
        except Exception as exc:
            log.warning("%s: could not dead-letter %s (%s); redelivering", self._owner.topic, message.message_id, exc)
            self._dead_letter_candidates[message.message_id] = message
            if self._owner.shared:
                self._owner.send_redeliver([message.message_id])
            return
        self.acknowledge(message.message_id)

    def clear_ack_timeouts(self) -> None:
        """Everything unacknowledged is being redelivered: no timeout needs to fire for it."""
        self._ack_timeouts.clear()

    # ---- around (re)subscribing, seeking and closing -------------------------------------------

    def flush(self) -> None:
        """Send the grouped acks now (after a SUBSCRIBE, acks made while disconnected go first)."""
        self.grouped.flush()

    def discard(self) -> None:
        """Forget unsent acks: after a seek they would acknowledge the wrong state."""
        self.grouped.discard()

    def close(self) -> None:
        self.grouped.close()
        self._nacks.close()
        self._ack_timeouts.close()
