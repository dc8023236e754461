"""The offloader: which ledgers go, writing them, marking them, and deleting local copies.

A ledger is offloaded when an admin asks (everything sealed before a message id) or when the
topic's offload policy says it is due (_select: past the size or the age threshold, oldest sealed
first). Each check goes over the open topics, then over every other stored one a page at a time,
from the storage database alone: only a topic with something due is opened (borrowed) for the work
and closed again after, unless someone opened it meanwhile. The policy of each topic comes from
the broker (a PolicySource: namespace policies over the broker-wide settings), read at each check,
so a changed policy applies at the next one. Offloading a
ledger: its entries are read through the managed ledger (so from wherever they are: caches or entry
logs) a chunk at a time and handed to the offload's writer thread, which adds them to the Parquet
file; the file is closed (it appears whole), the manifest written, and only then is the ledger
marked offloaded, a journaled operation (ledger/_offloaded). Once that mark is older than the
deletion lag, the local copy is deleted. So at every step a complete copy exists: a crash (kill -9)
before the mark leaves the ledger local and readable and its files unreferenced, and the next check
offloads it again, overwriting them.

All file work runs in the offload's own writer thread: an object store that is slow or down slows
offloading only. A failure ends that topic's offload with status ERROR and its reason, counts in
`errors_total`, and is retried at the next check; producers and local reads never wait for it.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Protocol

import pyarrow as pa  # type: ignore[import-untyped]

from velamq._clock import Clock
from velamq._errors import StorageError
from velamq._topic_name import TopicName
from velamq.storage._config import OffloadConfig
from velamq.storage._position import LedgerInfo, Position
from velamq.storage.index._storage_db import StoredOffloadSummary
from velamq.storage.ledger._managed_ledger import ManagedLedger
from velamq.storage.offload._select import Ledger, local_copies_due, may_be_due, stored_due, to_offload
from velamq.storage.offload._status import OffloadPolicy, OffloadStatus, PolicySource
from velamq.storage.offload._store import OffloadStore

log = logging.getLogger("velamq.storage.offload")

# Entries read from the managed ledger and handed to the writer at a time.
read_chunk_entries = 256
# Stored topics looked at per trip to the storage database in a check.
check_page_names = 500


class OffloadLedgers(Protocol):
    """What the offloader needs of its storage's managed ledgers (ledger/_directory's LedgerDirectory)."""

    open: dict[str, ManagedLedger]

    async def stored_page(self, after: str, limit: int) -> list[StoredOffloadSummary]: ...

    async def borrow(self, name: str) -> ManagedLedger | None: ...

    async def give_back(self, ml: ManagedLedger) -> None: ...


def partition_of(ml_name: str) -> int:
    try:
        return TopicName.parse(ml_name).partition_index
    except ValueError:  # InvalidTopicNameError: a store that is not a topic
        return -1


def internal(ml_name: str) -> bool:
    """A broker's own store (a compacted view, delayed buckets), not a topic: never offloaded."""
    return "#" in ml_name


def first_unoffloaded(ml: ManagedLedger) -> tuple[int, int]:
    for info in ml.ledgers():
        if info.offloaded_ms is None:
            return (info.ledger_id, 0)
    return (ml.current_ledger_id, 0)


class Offloader:
    """Offloads of one Storage, on its event loop: asked (`request`) or by threshold (`check`)."""

    def __init__(self, config: OffloadConfig, store: OffloadStore, clock: Clock, writes: ThreadPoolExecutor,
                 ledgers: OffloadLedgers) -> None:
        self.config = config
        self.default_policy = OffloadPolicy(config.threshold_bytes, config.threshold_s, config.deletion_lag_ms)
        self.policies: PolicySource | None = None  # the broker's, per topic; None: the default for all
        self._store = store
        self._clock = clock
        self._writes = writes
        self._ledgers = ledgers
        self._statuses: dict[str, OffloadStatus] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._one_at_a_time = asyncio.Lock()
        self._one_check = asyncio.Lock()  # the periodic check and one asked for never overlap
        self._checker: asyncio.Task[None] | None = None
        self.ledgers_total = 0
        self.bytes_total = 0  # local bytes of the ledgers offloaded
        self.errors_total = 0
        self.local_deleted_total = 0

    # -- asked -----------------------------------------------------------------------------------

    def status(self, ml_name: str) -> OffloadStatus:
        return self._statuses.get(ml_name, OffloadStatus())

    def request(self, ml: ManagedLedger, up_to: Position) -> bool:
        """Offload, in the background, every sealed ledger whose entries all come before up_to.
        False if an offload of this topic is running already."""
        if ml.name in self._running:
            return False
        wanted = [i for i in ml.ledgers() if i.ledger_id < up_to.ledger_id]
        self._start(ml, wanted)
        return True

    @property
    def running(self) -> int:
        return len(self._running)

    def _start(self, ml: ManagedLedger, infos: list[LedgerInfo]) -> asyncio.Task[None]:
        self._statuses[ml.name] = OffloadStatus("RUNNING", "", first_unoffloaded(ml))
        task = asyncio.get_running_loop().create_task(self._offload(ml, infos))
        self._running[ml.name] = task
        task.add_done_callback(lambda _: self._running.pop(ml.name, None))
        return task

    async def _offload(self, ml: ManagedLedger, infos: list[LedgerInfo]) -> None:
        try:
            async with self._one_at_a_time:
                for info in infos:
                    if self._offloadable(ml, info):
                        await self._offload_ledger(ml, info)
        except (StorageError, OSError, pa.ArrowException) as exc:
            self._failed(ml, exc)
            return
        except Exception as exc:  # a bug must not leave the status RUNNING for ever
            log.exception("offloading %s failed unexpectedly", ml.name)
            self._failed(ml, exc)
            return
        self._statuses[ml.name] = OffloadStatus("SUCCESS", "", first_unoffloaded(ml))

    def _failed(self, ml: ManagedLedger, exc: BaseException) -> None:
        self.errors_total += 1
        log.warning("offloading %s failed (retried at the next check): %s", ml.name, exc)
        self._statuses[ml.name] = OffloadStatus("ERROR", str(exc) or type(exc).__name__, first_unoffloaded(ml))

    def _offloadable(self, ml: ManagedLedger, info: LedgerInfo) -> bool:
        state = ml.ledger_state(info.ledger_id)
        return (
            state is not None and state.offloaded_ms is None and state.local and state.entries > 0
            and state.closed_ms is not None and state.entries == state.assigned
            and info.ledger_id != ml.current_ledger_id
        )

    async def _offload_ledger(self, ml: ManagedLedger, info: LedgerInfo) -> None:
        loop = asyncio.get_running_loop()
        ledger_id = info.ledger_id
        writer = await loop.run_in_executor(
            self._writes, partial(self._store.begin, ml.name, ledger_id, partition=partition_of(ml.name))
        )
        try:
            entry_id = 0
            while entry_id < info.entries:
                entries = await ml.read_entries(Position(ledger_id, entry_id), read_chunk_entries)
                items = [(e.position.entry_id, e.data) for e in entries if e.position.ledger_id == ledger_id]
                if not items or items[0][0] != entry_id:
                    raise StorageError(f"ledger {ledger_id} of {ml.name}: entry {entry_id} could not be read")
                await loop.run_in_executor(self._writes, writer.add, items)
                entry_id = items[-1][0] + 1
            await loop.run_in_executor(self._writes, partial(
                self._store.finish, ml.name, ledger_id, writer, size_bytes=info.size_bytes, created_ms=info.created_ms
            ))
        except BaseException:
            self._writes.submit(writer.abort)
            raise
        try:
            await ml.mark_offloaded(ledger_id)
        except StorageError:
            if ml.ledger_state(ledger_id) is None:  # trimmed meanwhile: its files are nobody's
                self._writes.submit(self._store.delete, ml.name, ledger_id)
            raise
        self.ledgers_total += 1
        self.bytes_total += info.size_bytes
        log.info("offloaded ledger %d of %s (%d entries, %d bytes)", ledger_id, ml.name, info.entries, info.size_bytes)

    # -- by threshold and lag --------------------------------------------------------------------

    def start(self) -> None:
        self._checker = asyncio.get_running_loop().create_task(self._check_forever())

    async def _check_forever(self) -> None:
        while True:
            await self._clock.sleep(self.config.check_interval_s)
            try:
                await self.check()
            except Exception:  # one bad topic must not end the checks of all
                log.exception("offload check failed")

    async def check(self) -> None:
        """One pass: the open topics, then every other stored topic, a page at a time. For each,
        under its policy: offload what is past a threshold, delete the local copies whose
        offloaded copy is older than the deletion lag."""
        async with self._one_check:
            await self._check_all()

    async def _check_all(self) -> None:
        open_now = {n: ml for n, ml in self._ledgers.open.items() if not internal(n) and ml.closing_or_closed is None}
        policies = await self._policies_of(list(open_now))
        for name, ml in open_now.items():
            await self._check_ledger(ml, policies.get(name, self.default_policy))
        after = ""
        while True:
            page = await self._ledgers.stored_page(after, check_page_names)
            if not page:
                return
            after = page[-1].name
            await self._check_stored(page, set(open_now))
            if len(page) < check_page_names:
                return

    async def _check_stored(self, page: list[StoredOffloadSummary], seen: set[str]) -> None:
        now = self._clock.now_ms()
        candidates = [
            summary for summary in page
            if summary.name not in seen and summary.name not in self._ledgers.open and not internal(summary.name)
            and may_be_due(summary)
        ]
        policies = await self._policies_of([summary.name for summary in candidates])
        for summary in candidates:
            policy = policies.get(summary.name, self.default_policy)
            if not stored_due(summary, policy, now):
                continue
            ml = await self._ledgers.borrow(summary.name)
            if ml is None:
                continue
            try:
                await self._check_ledger(ml, policy)
            finally:
                await self._ledgers.give_back(ml)

    async def _policies_of(self, names: list[str]) -> dict[str, OffloadPolicy]:
        if self.policies is None or not names:
            return {}
        return await self.policies(names)

    async def _check_ledger(self, ml: ManagedLedger, policy: OffloadPolicy) -> None:
        if ml.closing_or_closed is not None:
            return
        await self._delete_local_copies(ml, policy)
        if ml.name not in self._running:
            wanted = self._past_threshold(ml, policy)
            if wanted:
                await asyncio.shield(self._start(ml, wanted))

    def _past_threshold(self, ml: ManagedLedger, policy: OffloadPolicy) -> list[LedgerInfo]:
        infos = ml.ledgers()
        chosen = set(to_offload([Ledger.of_info(i) for i in infos], policy, self._clock.now_ms()))
        return [i for i in infos if i.ledger_id in chosen and self._offloadable(ml, i)]

    async def _delete_local_copies(self, ml: ManagedLedger, policy: OffloadPolicy) -> None:
        now = self._clock.now_ms()
        for ledger_id in local_copies_due([Ledger.of_info(i) for i in ml.ledgers()], policy, now):
            await ml.delete_local_copy(ledger_id)
            self.local_deleted_total += 1

    async def close(self) -> None:
        tasks = [t for t in (self._checker, *self._running.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
