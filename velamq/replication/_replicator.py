"""One topic toward one remote cluster: its durable cursor, its producer on the remote, what is in flight.

    cursor  pulsar.repl.<remote>, a durable cursor of the topic's managed ledger: retention and the
            backlog quota count it like a subscription's, so a remote that is down or slow grows
            the replication backlog and never blocks local producers (RP-6)
    read    from the entry after the cursor's mark-delete, at most `window_entries` entries (and
            `window_bytes`) sent and not yet receipted; the task sleeps while the window is full,
            while the remote is not connected and while it has read everything
    send    each entry that `_entries.outgoing` keeps, with replicated_from set, on an
            EntryProducer named pulsar.repl.<local>--><remote> (RP-2); the SEND's sequence id is the
            replicator's own counter, so that receipts match sends exactly: deduplication on the
            remote uses the original producer name and sequence id from the metadata (RP-5)
    ack     the cursor moves cumulatively over the longest prefix whose entries are receipted or
            were not to be sent (RP-7: order kept, nothing skipped)
    loss    when the connection goes, everything in flight is forgotten; after the reconnect the
            replicator reads again from the cursor's mark-delete, so what had no receipt is sent
            again (the remote's deduplication drops what it already stored)

Everything runs on the broker loop: the read task and the producer's callbacks share the state
without locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from velamq.client import AsyncClient
from velamq.replication._entries import IncomingMarker, cursor_name, outgoing, producer_name
from velamq.storage import Entry, ManagedCursor, ManagedLedger, Position

log = logging.getLogger("velamq.replication")

window_entries = 1000  # Pulsar's replicationProducerQueueSize
window_bytes = 32 * 1024 * 1024
read_batch_entries = 100


@dataclass(slots=True)
class _InFlight:
    position: Position
    sequence_id: int | None  # None: an entry that was not to be sent
    size: int = 0
    messages: int = 0
    publish_ms: int = 0
    receipted: bool = False


@dataclass(frozen=True, slots=True)
class ReplicatorStats:
    """Pulsar's ReplicatorStats for one remote, as topic stats show it under replication.<remote>."""

    connected: bool
    replication_backlog: int
    msg_rate_out: float
    msg_throughput_out: float
    replication_delay_s: float
    msg_out_total: int
    bytes_out_total: int
    producer_name: str
    outbound_connection: str


class Replicator:
    """Replicates one topic's managed ledger to one remote cluster (see the module docstring)."""

    def __init__(self, topic_name: str, ledger: ManagedLedger, cursor: ManagedCursor, local: str, remote: str,
                 client: AsyncClient, on_stopped: Callable[[Replicator], None],
                 on_marker: Callable[[Position, IncomingMarker], None]) -> None:
        """on_stopped: called when the replicator stops by itself (its topic's ledger closed);
        on_marker: a replicated-subscription marker `remote` wrote, read in the local log."""
        self.topic_name = topic_name
        self._on_stopped = on_stopped
        self._on_marker = on_marker
        self.ledger = ledger
        self.cursor = cursor
        self.local = local
        self.remote = remote
        self.producer = client.create_entry_producer(topic_name, producer_name(local, remote), self)
        self._wake = asyncio.Event()
        self._connected = False
        self._epoch = 0  # one per connection: a read that spans a reconnect is thrown away
        self._read_from: Position | None = None
        self._order: deque[_InFlight] = deque()
        self._sent: dict[int, _InFlight] = {}
        self._bytes_in_flight = 0
        self._next_sequence_id = 0
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.msg_out_total = 0
        self.bytes_out_total = 0
        self._oldest_publish_ms = 0
        self._rate_mark = (time.monotonic(), 0, 0)
        self._rates = (0.0, 0.0)

    @property
    def name(self) -> str:
        return cursor_name(self.remote)

    @property
    def connected(self) -> bool:
        return self._connected

    def start(self) -> None:
        """Start reading (the producer connects on its own, and says when it is ready)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replicator-{self.remote}")

    def wake(self) -> None:
        """New durable entries on the topic (or the topic closed)."""
        self._wake.set()

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.producer.close()

    # ---- the producer's side (EntryListener) ---------------------------------------------------

    def on_connected(self) -> None:
        self._epoch += 1
        self._forget_in_flight()
        self._connected = True
        log.info("replicator %s --> %s of %s connected", self.local, self.remote, self.topic_name)
        self._wake.set()

    def on_disconnected(self) -> None:
        self._connected = False
        self._epoch += 1
        self._forget_in_flight()
        log.info("replicator %s --> %s of %s disconnected", self.local, self.remote, self.topic_name)
        self._wake.set()

    def on_receipt(self, sequence_id: int) -> None:
        item = self._sent.pop(sequence_id, None)
        if item is None:
            return  # from before a reconnect
        item.receipted = True
        self._bytes_in_flight -= item.size
        self.msg_out_total += item.messages
        self.bytes_out_total += item.size
        self._ack_prefix()
        self._wake.set()

    def _forget_in_flight(self) -> None:
        """Sent entries without a receipt will be read and sent again from the cursor on."""
        self._order.clear()
        self._sent.clear()
        self._bytes_in_flight = 0
        self._read_from = None

    def _ack_prefix(self) -> None:
        order = self._order
        last: Position | None = None
        while order and (order[0].receipted or order[0].sequence_id is None):
            last = order.popleft().position
        if order:
            self._oldest_publish_ms = order[0].publish_ms or self._oldest_publish_ms
        if last is not None:
            self.cursor.ack_cumulative(last)

    # ---- reading and sending -------------------------------------------------------------------

    def _window_full(self) -> bool:
        return len(self._sent) >= window_entries or self._bytes_in_flight >= window_bytes

    def _next_read(self) -> Position:
        """Where to read next: after what was read, never behind the cursor (a TTL or a backlog
        quota may have moved it on, RP-6)."""
        after_mark = self.ledger.next_position(self.cursor.mark_delete_position)
        if self._read_from is None or self._read_from < after_mark:
            self._read_from = after_mark
        return self._read_from

    async def _run(self) -> None:
        while not self._closed:
            self._wake.clear()
            if self.ledger.closing_or_closed is not None:  # the topic unloaded or was deleted
                await self.producer.close()
                self._on_stopped(self)
                return
            if not self._connected or self._window_full():
                await self._wake.wait()
                continue
            start = self._next_read()
            last = self.ledger.last_confirmed
            if last is None or start > last:
                await self._wake.wait()
                continue
            epoch = self._epoch
            room = window_entries - len(self._sent)
            try:
                entries = await self.ledger.read_entries(start, min(read_batch_entries, room))
            except Exception as exc:  # closed under us, or a read error: try again when woken
                if self.ledger.closing_or_closed is not None:
                    continue
                log.warning("replicator %s of %s: read failed: %s", self.remote, self.topic_name, exc)
                await self._wake.wait()
                continue
            if epoch != self._epoch or not entries:
                continue
            for entry in entries:
                self._forward(entry)
            self._read_from = self.ledger.next_position(entries[-1].position)

    def _forward(self, entry: Entry) -> None:
        out = outgoing(entry.data, self.local, self.remote)
        if isinstance(out, IncomingMarker):
            self._on_marker(entry.position, out)
            out = None
        if out is None:
            if self._order:
                self._order.append(_InFlight(entry.position, None))
            else:
                self.cursor.ack_cumulative(entry.position)
            return
        sequence_id = self._next_sequence_id
        self._next_sequence_id += 1
        item = _InFlight(entry.position, sequence_id, len(out.entry), out.num_messages, out.publish_ms)
        if not self._order:
            self._oldest_publish_ms = out.publish_ms
        self._order.append(item)
        self._sent[sequence_id] = item
        self._bytes_in_flight += item.size
        self.producer.send(sequence_id, out.entry, out.num_messages, out.is_chunk)

    # ---- figures -------------------------------------------------------------------------------

    def stats(self, now_ms: int | None = None) -> ReplicatorStats:
        now = time.monotonic()
        mark_s, mark_msgs, mark_bytes = self._rate_mark
        if now - mark_s >= 1.0:
            elapsed = now - mark_s
            self._rates = ((self.msg_out_total - mark_msgs) / elapsed, (self.bytes_out_total - mark_bytes) / elapsed)
            self._rate_mark = (now, self.msg_out_total, self.bytes_out_total)
        backlog = self.cursor.backlog
        delay_s = 0.0
        if backlog:
            oldest = self._oldest_publish_ms  # of the oldest entry sent without a receipt yet
            if oldest:
                wall_ms = now_ms if now_ms is not None else int(time.time() * 1000)
                delay_s = max(0.0, (wall_ms - oldest) / 1000)
        connection = self.producer.connection
        return ReplicatorStats(
            connected=self._connected,
            replication_backlog=backlog,
            msg_rate_out=self._rates[0],
            msg_throughput_out=self._rates[1],
            replication_delay_s=delay_s,
            msg_out_total=self.msg_out_total,
            bytes_out_total=self.bytes_out_total,
            producer_name=self.producer.producer_name,
            outbound_connection=f"{connection.host}:{connection.port}" if connection is not None else "",
        )
