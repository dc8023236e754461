"""Replicated subscriptions (Pulsar's PIP-33, RP-10): a subscription's position mirrored to the
other cluster, so that a consumer that moves there resumes close to where it was.

One ReplicatedSubscriptions per replicated topic, on the broker loop, driven by the service's one
timer (every topic, every second) and by the markers its replicators read (_markers.py has the
payloads):

    every second   if a subscription of the topic is replicated (its consumer subscribed with
                   replicate_subscription_state), data came in since the last request, every
                   remote replicator is connected and no snapshot is pending: write a REQUEST marker
    REQUEST in     (from a remote) write a RESPONSE to it with this log's last position
    RESPONSE in    a remote's position for our pending snapshot; once every remote answered:
                   with one remote, write a SNAPSHOT marker (local only) pairing the position of
                   that last response here with each remote's position there; with two or more,
                   first a second REQUEST round (as Pulsar's ReplicatedSubscriptionsSnapshotBuilder),
                   and the SNAPSHOT pairs the first round's remote positions with the position of
                   the second round's last response here
    every second   for each replicated subscription whose mark-delete passed a snapshot newer than
                   the last one it sent: write an UPDATE marker with that snapshot's remote positions
    UPDATE in      the named subscription here (made at earliest if missing) is acknowledged
                   cumulatively up to our position in it: never backwards

Why a consumer loses nothing: a snapshot (L here, W there) is written once the remote's response
came back through the replication stream, so everything the remote wrote itself up to W is in this
log before L; a subscription acknowledged past L has had all of it. Moving the remote subscription
to W skips only that. Messages after W are delivered again there (duplicates, as Pulsar documents).
With a third cluster C, what B held up to W_B also includes C's messages, which reach this log from
C, not through B: each of those was written on C before C answered the second round (that round
starts after B's first answer came back here), so it precedes C's second answer, and so L, here.

Limits: a pending snapshot is given up after 30 s, the last 100 snapshots are kept, and a
subscription is replicated from the moment a consumer asks for it (not remembered across a broker
restart until the consumer subscribes again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from velamq.replication import _markers
from velamq.replication._entries import IncomingMarker
from velamq.storage import ManagedCursor, ManagedLedger, Position

log = logging.getLogger("velamq.replication")

snapshot_interval_s = 1.0  # Pulsar's replicatedSubscriptionsSnapshotFrequencyMillis
snapshot_timeout_s = 30.0  # replicatedSubscriptionsSnapshotTimeoutSeconds
snapshots_kept = 100


class _Counter(Protocol):
    @property
    def messages_total(self) -> int: ...


class _Subscription(Protocol):
    @property
    def cursor(self) -> ManagedCursor: ...

    def acknowledge_cumulative(self, position: Position, ack_set: list[int] | None) -> None: ...


class MarkerTopic(Protocol):
    """What the controller uses of a broker topic (velamq.broker's Topic)."""

    @property
    def full_name(self) -> str: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def replicated_subscriptions(self) -> frozenset[str]: ...

    @property
    def rate_in(self) -> _Counter: ...

    @property
    def subscriptions(self) -> Mapping[str, _Subscription]: ...

    def append_marker(self, entry: bytes) -> asyncio.Future[Position]: ...


class RemoteLink(Protocol):
    @property
    def connected(self) -> bool: ...


@dataclass
class _Pending:
    snapshot_id: str
    started_s: float
    missing: set[str]  # remotes whose answer to the current round has not come back
    rounds_left: int  # REQUEST rounds after the current one: 1 with two or more remotes
    responses: dict[str, tuple[int, int]] = field(default_factory=dict)  # the first answer of each


class ReplicatedSubscriptions:
    """One topic's replicated subscriptions: its pending snapshot, the snapshots kept, the updates
    sent (see the module docstring)."""

    def __init__(self, topic: MarkerTopic, local: str, remotes: Callable[[], Mapping[str, RemoteLink]]) -> None:
        self.topic = topic
        self.local = local
        self._remotes = remotes
        self._pending: _Pending | None = None
        self._requested_after = 0  # the topic's messages in when the last request was written
        self._snapshots: deque[tuple[Position, dict[str, tuple[int, int]]]] = deque(maxlen=snapshots_kept)
        self._sent: dict[str, Position] = {}  # subscription -> local position of its last UPDATE
        self._writes: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        for task in list(self._writes):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def tick(self) -> None:
        """The timer's work (the service calls it every snapshot_interval_s for every topic)."""
        if not self.topic.replicated_subscriptions:
            return
        try:
            await self._request_snapshot()
            await self._send_updates()
        except Exception as exc:  # the topic closed, a write failed: next time
            log.debug("replicated subscriptions of %s: %s", self.topic.full_name, exc)

    # ---- snapshots -------------------------------------------------------------------------------

    async def _request_snapshot(self) -> None:
        remotes = self._remotes()
        if not remotes or not all(r.connected for r in remotes.values()):
            return
        pending = self._pending
        if pending is not None and time.monotonic() - pending.started_s < snapshot_timeout_s:
            return
        published = self.topic.rate_in.messages_total  # data only: markers are not counted
        if published == self._requested_after:
            return  # nothing new since the last snapshot
        self._requested_after = published
        snapshot_id = uuid.uuid4().hex
        self._pending = _Pending(snapshot_id, time.monotonic(), set(remotes), 1 if len(remotes) > 1 else 0)
        await self._write_request(snapshot_id)

    def on_marker(self, position: Position, incoming: IncomingMarker) -> None:
        """A marker the remote wrote, read by the replicator toward it (on the loop)."""
        marker = _markers.decode(incoming.marker_type, incoming.payload)
        if marker is None:
            return
        if marker.marker_type == _markers.REQUEST and marker.source_cluster:
            self._write(self._respond(marker.snapshot_id, marker.source_cluster))
        elif marker.marker_type == _markers.RESPONSE:
            self._responded(position, marker)
        elif marker.marker_type == _markers.UPDATE:
            for cluster, at in marker.clusters:
                if cluster == self.local:
                    self._write(self._apply(marker.subscription, Position(*at)))

    async def _respond(self, snapshot_id: str, reply_to: str) -> None:
        last = self.topic.ledger.last_confirmed or Position(-1, -1)
        entry = _markers.response_entry(snapshot_id, reply_to, self.local, (last.ledger_id, last.entry_id))
        await self.topic.append_marker(entry)

    def _responded(self, position: Position, marker: _markers.Marker) -> None:
        pending = self._pending
        if pending is None or pending.snapshot_id != marker.snapshot_id:
            return  # late, or not ours
        for cluster, at in marker.clusters:
            pending.responses.setdefault(cluster, at)
            pending.missing.discard(cluster)
        if pending.missing:
            return
        if pending.rounds_left:
            pending.rounds_left -= 1
            pending.missing = set(self._remotes())
            self._write(self._write_request(pending.snapshot_id))
            return
        self._pending = None
        remotes = dict(pending.responses)
        self._snapshots.append((position, remotes))
        self._write(self._store_snapshot(pending.snapshot_id, position, remotes))

    async def _write_request(self, snapshot_id: str) -> None:
        await self.topic.append_marker(_markers.request_entry(snapshot_id, self.local))

    async def _store_snapshot(self, snapshot_id: str, position: Position, remotes: dict[str, tuple[int, int]]) -> None:
        entry = _markers.snapshot_entry(snapshot_id, self.local, (position.ledger_id, position.entry_id), remotes)
        await self.topic.append_marker(entry)

    # ---- updates -----------------------------------------------------------------------------------

    async def _send_updates(self) -> None:
        cursors = self.topic.ledger.cursors
        for name in self.topic.replicated_subscriptions:
            cursor = cursors.get(name)
            if cursor is None:
                continue
            mark_delete = cursor.mark_delete_position
            passed = [s for s in self._snapshots if s[0] <= mark_delete]
            if not passed:
                continue
            local, remotes = passed[-1]
            if name in self._sent and local <= self._sent[name]:
                continue
            self._sent[name] = local
            await self.topic.append_marker(_markers.update_entry(name, remotes))

    async def _apply(self, subscription: str, position: Position) -> None:
        """The remote's consumers passed `position` of this log: acknowledge up to it here."""
        ledger = self.topic.ledger
        last = ledger.last_confirmed
        if last is None:
            return
        target = min(position, last)
        live = self.topic.subscriptions.get(subscription)
        if live is not None:
            if target > live.cursor.mark_delete_position:
                live.acknowledge_cumulative(target, None)
            return
        cursor = ledger.cursors.get(subscription) or await ledger.open_cursor(subscription, "earliest")
        cursor.ack_cumulative(target)

    def _write(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
