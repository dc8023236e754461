"""Periodic policy work for loaded topics (Tencent's 600 k topics; BR-3..BR-6, BR-4, CO-4).

Every `policy_check_interval_s` of the broker's clock, for each loaded topic:

    TTL              acknowledges, for each subscription, messages published more than TTL ago,
                     by position in one step (binary search for the cutoff) — except a delayed
                     message whose delivery time has not come (BR-6)
    backlog quota    the age of the oldest unacknowledged message of the slowest cursor, then
                     what the quota's policy says (_backlog_quota.py: disconnect the producers,
                     or evict the oldest backlog)
    retention        deletes whole closed ledgers whose entries every durable cursor has
                     acknowledged, once they are older than the retention time or the acknowledged
                     data exceeds the retention size (BR-5)
    ack holes        redelivers entries that are stuck unacknowledged behind acknowledged ones for
                     longer than `ack_hole_redelivery_ms` (BR-4, Tencent's "active redelivery")
    rates            samples the counters behind msgRateIn / msgRateOut

Only loaded topics are visited (an unloaded topic has no producer, no consumer and no pending work;
its policies apply again when it loads), and a round visits them a slice at a time with the loop
free in between, so that at hundreds of thousands of loaded topics a round never holds it for long.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator

from velamq._clock import Clock
from velamq._limits import MIB
from velamq.broker._rates import NO_RATE
from velamq.broker.log._entry_info import entry_info
from velamq.broker.log._positions import before
from velamq.broker.subscription._subscription import Subscription
from velamq.broker.topic._backlog_quota import enforce_backlog_quota
from velamq.broker.topic._topic import Topic
from velamq.storage import ManagedCursor, ManagedLedger, Position

log = logging.getLogger(__name__)

# Entries dispatch has not read yet that TTL scans for delayed ones, per subscription and check.
expire_scan_entries_max = 2_000_000
read_batch_entries = 500
ack_slice_entries = 20_000  # TTL acknowledges this many entries between two yields to the loop
# Topics checked between two yields to the loop.
slice_topics = 500


class PolicyTasks:
    """The periodic policy checker: one task that wakes every interval of the injected clock and
    runs check_topic on every loaded topic, one after another. `checks_total` counts its rounds, so
    a test (or an operator) can tell that a check ran after some point."""

    def __init__(self, clock: Clock, interval_s: float, topics: Callable[[], Iterable[Topic]]) -> None:
        self._clock = clock
        self._interval_s = interval_s
        self._topics = topics
        self._task: asyncio.Task[None] | None = None
        self.checks_total = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="policy-tasks")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while True:
            await self._clock.sleep(self._interval_s)
            await self._round()
            self.checks_total += 1

    async def _round(self) -> None:
        # A method of its own: its locals (the round's list of topics) are gone while the task
        # sleeps, so a topic unloaded meanwhile is not kept alive by them.
        topics = list(self._topics())
        for start in range(0, len(topics), slice_topics):
            if start:
                await asyncio.sleep(0)
            for topic in topics[start:start + slice_topics]:
                if topic.closed:
                    continue
                try:
                    await check_topic(topic, self._clock)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("policy check failed for %s", topic.full_name)


async def check_topic(topic: Topic, clock: Clock) -> None:
    """One round of every policy on one topic, at the clock's current time."""
    now_s = clock.monotonic_s()
    now_ms = clock.now_ms()
    sample_rates(topic, now_s)
    policies = topic.policies
    if policies.message_ttl_s > 0:
        cutoff = now_ms - policies.message_ttl_s * 1000
        for name, cursor in list(topic.ledger.cursors.items()):
            subscription = topic.subscriptions.get(name)
            expired = await expire(topic, cursor, cutoff, now_ms, subscription)
            if subscription is not None and expired:
                subscription.count_expired(expired)
                subscription.forget_acked()
    await enforce_backlog_quota(topic, now_ms)
    await apply_retention(topic, now_ms)
    if policies.ack_hole_redelivery_ms > 0:
        for subscription in topic.subscriptions.values():
            subscription.redeliver_stuck_holes(policies.ack_hole_redelivery_ms / 1000)


def sample_rates(topic: Topic, now_s: float) -> None:
    if topic.rate_in is not NO_RATE:
        topic.rate_in.sample(now_s)
    for producer in topic.producers.values():
        producer.rate_in.sample(now_s)
        producer.chunks_in.sample(now_s)
    for subscription in topic.subscriptions.values():
        subscription.sample_rates(now_s)


# ---- TTL -----------------------------------------------------------------------------------

async def expire(
    topic: Topic, cursor: ManagedCursor, cutoff_ms: int, now_ms: int, subscription: Subscription | None = None
) -> int:
    """TTL by position (BR-5, BR-6): find the newest entry published before cutoff_ms by binary
    search over the log (a whole ledger older than the cutoff costs no more than one probe) and
    move the mark-delete there in one step, sparing only delayed messages whose delivery time is
    still ahead of now_ms: they stay unacknowledged and pending. Dispatch knows the delayed entries
    it has read (its delayed index); what it has not read yet is scanned, at most
    expire_scan_entries_max entries a check. Returns how many entries were expired."""
    ledger = topic.ledger
    mark_delete = cursor.mark_delete_position
    last = ledger.last_confirmed
    if last is None or mark_delete >= last:
        return 0
    found = await ledger.find_first(lambda data: entry_info(data).publish_time_ms >= cutoff_ms)
    target = last if found is None else before(found)
    if target <= mark_delete:
        return 0
    spared: list[tuple[Position, Position]] = []  # runs of delayed entries not due, in order
    scan_from: Position | None = ledger.next_position(mark_delete)
    if subscription is not None and not subscription.may_delay:
        scan_from = None  # this subscription delivers delayed messages at once: nothing to spare
    elif subscription is not None:
        known = subscription.delayed_read(target)
        if known is not None:
            read_up_to, spared = known
            scan_from = ledger.next_position(read_up_to)
    if scan_from is not None and scan_from <= target:
        target, delayed = await _delayed_not_due(cursor, ledger, scan_from, target, now_ms)
        spared += _runs(ledger, delayed)
    backlog = cursor.backlog
    await _ack_all_but(cursor, ledger, target, spared)
    return backlog - cursor.backlog


def _runs(ledger: ManagedLedger, positions: list[Position]) -> list[tuple[Position, Position]]:
    runs: list[tuple[Position, Position]] = []
    for position in positions:
        if runs and ledger.next_position(runs[-1][1]) == position:
            runs[-1] = (runs[-1][0], position)
        else:
            runs.append((position, position))
    return runs


async def _delayed_not_due(
    cursor: ManagedCursor, ledger: ManagedLedger, start: Position, up_to: Position, now_ms: int
) -> tuple[Position, list[Position]]:
    """Scan [start, up_to] for delayed entries not yet due, skipping acknowledged runs (so a check
    after a cut-short one reads only the spared entries again, then goes on); returns how far it
    got (it stops after reading expire_scan_entries_max entries) and those entries."""
    found: list[Position] = []
    acked = cursor.individually_acked.ranges()
    i = 0
    position = start
    scanned_to = before(start)
    scanned = 0
    while position <= up_to and scanned < expire_scan_entries_max:
        while i < len(acked) and acked[i][1] < position:
            i += 1
        count = read_batch_entries
        if i < len(acked):
            first, last = acked[i]
            if first <= position:
                scanned_to = min(last, up_to)
                position = ledger.next_position(last)
                continue
            if first.ledger_id == position.ledger_id:
                count = min(count, first.entry_id - position.entry_id)
        entries = await ledger.read_entries(position, count)
        if not entries:
            break
        for entry in entries:
            if entry.position > up_to:
                return scanned_to, found
            if entry_info(entry.data).deliver_at_ms > now_ms:
                found.append(entry.position)
            scanned_to = entry.position
        scanned += len(entries)
        position = ledger.next_position(entries[-1].position)
    return scanned_to, found


async def _ack_all_but(
    cursor: ManagedCursor, ledger: ManagedLedger, up_to: Position, spared: list[tuple[Position, Position]]
) -> None:
    """Acknowledge everything up to `up_to` except the spared runs (in order): the mark-delete
    moves to the first spared entry, the entries between spared runs are acknowledged
    individually, a slice at a time with the loop free in between."""
    spared = [run for run in spared if run[0] <= up_to]
    if not spared:
        cursor.ack_cumulative(up_to)
        return
    cursor.ack_cumulative(before(spared[0][0]))

    def between() -> Iterator[Position]:
        for i, (_, last) in enumerate(spared):
            end = spared[i + 1][0] if i + 1 < len(spared) else None
            position = ledger.next_position(last)
            while position <= up_to and (end is None or position < end):
                yield position
                position = ledger.next_position(position)

    positions = between()
    while True:
        chunk = list(itertools.islice(positions, ack_slice_entries))
        if not chunk:
            return
        cursor.ack(chunk)
        await asyncio.sleep(0)


# ---- retention -----------------------------------------------------------------------------

async def apply_retention(topic: Topic, now_ms: int) -> None:
    policies = topic.policies
    minutes, size_mb = policies.retention_time_minutes, policies.retention_size_mb
    if minutes < 0 and size_mb < 0:
        return
    ledger = topic.ledger
    cursors = list(ledger.cursors.values())
    consumed = min(c.mark_delete_position for c in cursors) if cursors else ledger.last_confirmed
    if consumed is None:
        return
    infos = [i for i in ledger.ledgers() if i.closed_ms is not None and i.ledger_id != ledger.current_ledger_id]
    candidates = [i for i in infos if i.entries > 0 and Position(i.ledger_id, i.entries - 1) <= consumed]
    consumed_bytes = sum(i.size_bytes for i in candidates)
    trim_to: Position | None = None
    for info in candidates:
        closed_ms = info.closed_ms or now_ms
        too_old = minutes >= 0 and now_ms - closed_ms >= minutes * 60_000
        too_big = size_mb >= 0 and consumed_bytes > size_mb * MIB
        if not (too_old or too_big):
            break
        trim_to = Position(info.ledger_id, info.entries - 1)
        consumed_bytes -= info.size_bytes
    if trim_to is not None:
        deleted = await ledger.trim(trim_to)
        if deleted:
            log.info("retention deleted ledgers %s of %s", deleted, topic.full_name)
