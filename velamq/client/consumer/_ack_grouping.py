"""Acknowledgements on the consumer side (CO-2): grouping, and acks of messages inside batches.

    AckGroupingTracker  individual acks collect for ack_grouping_time_ms (or until
                        ack_grouping_max_size of them) and leave in one ACK command; a cumulative
                        ack keeps only the highest id. ack_grouping_time_ms = 0 sends at once.
    BatchAcks           per batch entry, which indexes the application has not acknowledged yet.
                        The entry is acknowledged as a whole when the last index is; with
                        batch_index_ack_enabled each index ack also goes out with an ack_set.

ack_set is Pulsar's java.util.BitSet as long[]: bit i SET means message i is NOT yet acknowledged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from velamq.client._message import MessageId
from velamq.protocol import pb, signed64, unsigned64

EntryKey = tuple[int, int]


def encode_ack_set(batch_size: int, unacked: Iterable[int]) -> list[int]:
    """long[] words of a BitSet with the unacked indexes set (as signed int64)."""
    words = [0] * ((batch_size + 63) // 64)
    for i in unacked:
        words[i // 64] |= 1 << (i % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def decode_ack_set(words: Iterable[int], batch_size: int) -> set[int]:
    """The indexes whose bit is set (not yet acknowledged)."""
    out: set[int] = set()
    for w_index, word in enumerate(words):
        word &= (1 << 64) - 1
        for bit in range(64):
            i = w_index * 64 + bit
            if i < batch_size and word >> bit & 1:
                out.add(i)
    return out


class EntryAcks:
    """The unacknowledged batch indexes of one received batch entry."""

    __slots__ = ("remaining", "size")

    def __init__(self, size: int, remaining: Iterable[int]) -> None:
        self.size = size
        self.remaining = set(remaining)


class BatchAcks:
    """Which messages of each received batch entry are still unacknowledged. The ReceivedBatch of
    an entry holds its EntryAcks too, so acknowledging a received message needs no lookup."""

    def __init__(self) -> None:
        self._unacked: dict[EntryKey, EntryAcks] = {}

    def register(self, key: EntryKey, batch_size: int, unacked: Iterable[int]) -> EntryAcks:
        entry = self._unacked.get(key)
        if entry is None:
            entry = self._unacked[key] = EntryAcks(batch_size, unacked)
        return entry

    def ack(self, key: EntryKey, index: int, encode: bool = True) -> tuple[bool, list[int]]:
        """Acknowledge one index: (whole entry done, ack_set of what remains). With encode=False the
        ack set is not built (it costs time proportional to the batch size, and is only sent when
        batch-index acks are enabled)."""
        entry = self._unacked.get(key)
        if entry is None:
            return True, []
        return self.ack_indexes(key, entry, (index,), encode)

    def ack_indexes(self, key: EntryKey, entry: EntryAcks, indexes: Iterable[int],
                    encode: bool = True) -> tuple[bool, list[int]]:
        """Acknowledge these indexes of an entry: as ack()."""
        remaining = entry.remaining
        remaining.difference_update(indexes)
        if not remaining:
            if self._unacked.get(key) is entry:
                del self._unacked[key]
            return True, []
        return False, encode_ack_set(entry.size, remaining) if encode else []

    def done(self, key: EntryKey, entry: EntryAcks) -> None:
        """Every index of the entry is acknowledged."""
        if self._unacked.get(key) is entry:
            del self._unacked[key]

    def ack_up_to(self, key: EntryKey, index: int) -> tuple[bool, list[int]]:
        """Cumulative inside an entry: indexes 0..index are done."""
        entry = self._unacked.get(key)
        if entry is None:
            return True, []
        remaining = entry.remaining
        remaining.difference_update(range(index + 1))
        for k in [k for k in self._unacked if k < key]:
            del self._unacked[k]
        if not remaining:
            del self._unacked[key]
            return True, []
        return False, encode_ack_set(entry.size, remaining)

    def forget_up_to(self, key: EntryKey) -> None:
        for k in [k for k in self._unacked if k <= key]:
            del self._unacked[k]

    def __len__(self) -> int:
        return len(self._unacked)


class AckGroupingTracker:
    """Collects acks and sends them in groups through `send(ack_type, ids)`.

    `send` returns False when there is no connection: the acks are then kept and go out with the
    next flush, which the consumer does right after it subscribes again and before it asks for
    messages, so a message acknowledged while disconnected is not delivered a second time."""

    def __init__(self, send: Callable[[int, list[pb.MessageIdData]], bool], grouping_time_ms: int,
                 max_size: int) -> None:
        self._send = send
        self.grouping_time_ms = grouping_time_ms
        self.max_size = max(1, max_size)
        self._individual: dict[EntryKey, pb.MessageIdData] = {}
        self._cumulative: pb.MessageIdData | None = None
        self._cumulative_key: tuple[int, int, int] | None = None
        self._timer: asyncio.TimerHandle | None = None

    @staticmethod
    def _data(message_id: MessageId, ack_set: list[int] | None) -> pb.MessageIdData:
        data = pb.MessageIdData(ledgerId=unsigned64(message_id.ledger_id), entryId=unsigned64(message_id.entry_id))
        if ack_set:
            data.ack_set.extend(ack_set)
        return data

    def add_individual(self, message_id: MessageId, ack_set: list[int] | None = None) -> None:
        key = message_id.entry_key()
        existing = self._individual.get(key)
        if existing is not None and not existing.ack_set:
            return  # the whole entry is already going to be acknowledged
        self._individual[key] = self._data(message_id, ack_set)
        self._after_add()

    def add_entry(self, ledger_id: int, entry_id: int, ack_set: list[int] | None = None) -> None:
        """add_individual for the entry (ledger_id, entry_id), without a MessageId."""
        key = (ledger_id, entry_id)
        existing = self._individual.get(key)
        if existing is not None and not existing.ack_set:
            return
        data = pb.MessageIdData(ledgerId=unsigned64(ledger_id), entryId=unsigned64(entry_id))
        if ack_set:
            data.ack_set.extend(ack_set)
        self._individual[key] = data
        self._after_add()

    def add_cumulative(self, message_id: MessageId, ack_set: list[int] | None = None) -> None:
        key = (message_id.ledger_id, message_id.entry_id, message_id.batch_index)
        if self._cumulative_key is not None and key <= self._cumulative_key:
            return
        self._cumulative_key = key
        self._cumulative = self._data(message_id, ack_set)
        self._after_add()

    def _after_add(self) -> None:
        if self.grouping_time_ms <= 0 or len(self._individual) >= self.max_size:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.grouping_time_ms / 1000, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._cumulative is not None:
            if not self._send(pb.CommandAck.Cumulative, [self._cumulative]):
                return
            self._cumulative = None
        if self._individual:
            ids = list(self._individual.values())
            for start in range(0, len(ids), self.max_size):
                if not self._send(pb.CommandAck.Individual, ids[start : start + self.max_size]):
                    return
                for data in ids[start : start + self.max_size]:
                    self._individual.pop((signed64(data.ledgerId), signed64(data.entryId)), None)

    def take(self) -> list[tuple[int, list[pb.MessageIdData]]]:
        """Everything not sent yet, as (ack type, ids) commands, taken out of the tracker (the
        caller sends them with a receipt, or puts them back with restore)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        out: list[tuple[int, list[pb.MessageIdData]]] = []
        if self._cumulative is not None:
            out.append((pb.CommandAck.Cumulative, [self._cumulative]))
            self._cumulative = None
        ids = list(self._individual.values())
        self._individual.clear()
        out += [(pb.CommandAck.Individual, ids[s : s + self.max_size]) for s in range(0, len(ids), self.max_size)]
        return out

    def restore(self, commands: list[tuple[int, list[pb.MessageIdData]]]) -> None:
        """Put back what take() gave (unconfirmed): it goes with the next flush."""
        for ack_type, ids in commands:
            if ack_type == pb.CommandAck.Cumulative:
                if self._cumulative is None:
                    self._cumulative = ids[0]
                continue
            for data in ids:
                self._individual.setdefault((signed64(data.ledgerId), signed64(data.entryId)), data)

    def discard(self) -> None:
        """Forget unsent acks (after a seek they would acknowledge the wrong state)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._individual.clear()
        self._cumulative = None
        # After a seek backwards a cumulative ack below the old maximum is legitimate again.
        self._cumulative_key = None

    @property
    def pending(self) -> int:
        return len(self._individual) + (self._cumulative is not None)

    def close(self) -> None:
        self.flush()
