"""Disk usage and write health: when the broker refuses producers, and when it takes them back.

BookKeeper's anchors, under their names (docs/operations.md):

    usage >= diskUsageWarnThreshold (0.90)   a warning (once a minute at most)
    usage >= diskUsageThreshold (0.95)       READ-ONLY, before the disk is actually full
    a storage write failed (ENOSPC, EIO..)   READ-ONLY at once, whatever the usage said
    READ-ONLY, then usage < diskUsageLwmThreshold (0.90) and storage writable, at a check at
    least write_failure_holdoff_s after the last write failure          WRITABLE again

One addition to BookKeeper's rule: the free space that turns the broker read-only is never less
than `min_free_bytes` (the memory budget: what the broker may hold in memory on its way to disk,
which one flush can write at once). On a small filesystem the thresholds are moved down by that
much (the reading "usage" stays the plain one), so a flush cannot run the disk full between two
checks.

Read-only means: every producer is closed by the broker and PRODUCER is refused with
ProducerBlockedQuotaExceededException, the one error the official client (pulsar-client-cpp 4.x,
ProducerImpl::handleCreateProducer) answers by failing every pending send's callback at once
and then retrying the producer with back-off; its send timeout keeps running, so nothing hangs.
(A SEND_ERROR other than ChecksumError makes it close the connection, reconnect and resend the
same messages forever, with its send timer re-armed at each reconnect.) Consumers, acks and admin
(deleting topics to free space) keep working; when usage falls, the producers' own retries
succeed, no restart needed.

Usage is read with statvfs in a worker thread (never on the loop) every diskCheckInterval, and
sooner once the bytes appended since the last check could have used a quarter of the headroom
that was left below the threshold (so a fast producer cannot run the disk full between two
checks). `stat` is injected: tests pass a fake filesystem.

What this needs of storage is `StorageHealth` below: whether it accepts appends now. A write
failure reaches the broker as a failed append (StorageError), reported here by the producer
commands.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import NamedTuple, Protocol

from velamq._clock import Clock
from velamq._log_limit import RateLimitedLog

log = logging.getLogger(__name__)

# Each appended byte is counted this many times against the headroom: journal plus entry log.
bytes_on_disk_per_appended_byte = 2
# After a write failure the broker stays read-only at least this long (or one check interval if
# shorter), then a check decides: producers do not flap in and out on every failed append.
write_failure_holdoff_s = 5.0


class DiskUsage(NamedTuple):
    total_bytes: int
    available_bytes: int  # what an unprivileged writer may still use (f_bavail)

    @property
    def fraction(self) -> float:
        if self.total_bytes <= 0:
            return 0.0
        return 1.0 - self.available_bytes / self.total_bytes


def statvfs_usage(path: Path) -> DiskUsage:
    """The real filesystem: BookKeeper's usage, (total - usable) / total."""
    st = os.statvfs(path)
    return DiskUsage(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


class StorageHealth(Protocol):
    @property
    def writable(self) -> bool:
        """False while storage refuses appends (a write failed and no retry succeeded yet)."""
        ...


@dataclass(frozen=True, slots=True)
class DiskThresholds:
    warn: float = 0.90
    read_only: float = 0.95
    writable_again: float = 0.90  # diskUsageLwmThreshold
    check_interval_s: float = 10.0


class DiskState(Enum):
    WRITABLE = 0
    WARN = 1
    READ_ONLY = 2


_READ_ONLY = DiskState.READ_ONLY


class DiskGuard:
    """Decides whether producers may write, from disk usage and storage's write health, and tells
    the broker when that changes (`on_read_only`). One per broker, on its loop."""

    def __init__(
        self,
        path: Path,
        thresholds: DiskThresholds,
        clock: Clock,
        storage: StorageHealth,
        on_read_only: Callable[[str], None],
        log_limit: RateLimitedLog,
        stat: Callable[[Path], DiskUsage] = statvfs_usage,
        min_free_bytes: int = 0,
    ) -> None:
        self.path = path
        self.thresholds = thresholds
        self.min_free_bytes = min_free_bytes
        self.clock = clock
        self._storage = storage
        self._on_read_only = on_read_only
        self._log = log_limit
        self._stat = stat
        self.state = DiskState.WRITABLE
        self.reason = ""
        self.usage: DiskUsage | None = None
        self.checks_total = 0
        self.check_failures_total = 0
        self.read_only_total = 0
        self.write_failures_total = 0
        self._failed_at_s: float | None = None
        self._appended_since_check = 0
        self._early_check_bytes = 0  # 0: no early check until the first one has run
        self._task: asyncio.Task[None] | None = None
        self._checking: asyncio.Task[None] | None = None
        self._recheck: asyncio.Task[None] | None = None

    @property
    def read_only(self) -> bool:
        return self.state is _READ_ONLY  # asked once per SEND: a module global, not an Enum lookup

    async def start(self) -> None:
        """The first check before anything is served (a broker started on a full disk starts
        read-only), then one every interval."""
        await self.check_now()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        for task in (self._task, self._checking, self._recheck):
            if task is not None:
                task.cancel()

    async def _run(self) -> None:
        while True:
            await self.clock.sleep(self.thresholds.check_interval_s)
            await self.check_now()

    def check_soon(self) -> None:
        """Check off schedule (after an admin delete freed space, or many appends)."""
        if self._checking is None or self._checking.done():
            self._checking = asyncio.get_running_loop().create_task(self.check_now())

    async def check_now(self) -> None:
        try:
            usage = await asyncio.to_thread(self._stat, self.path)
        except OSError as exc:
            self.check_failures_total += 1
            self._log.warning("disk-check", "cannot read disk usage of %s: %s", self.path, exc)
            return
        self.checks_total += 1
        self.apply(usage)

    def reserve_bytes(self, total_bytes: int) -> int:
        """Free bytes at or below which the broker is read-only."""
        return max(int(total_bytes * (1 - self.thresholds.read_only)), self.min_free_bytes)

    def apply(self, usage: DiskUsage) -> None:
        """Move the state by one reading (the check, or a test with a fake filesystem)."""
        self.usage = usage
        self._appended_since_check = 0
        t = self.thresholds
        total, available = usage.total_bytes, usage.available_bytes
        reserve = self.reserve_bytes(total)
        headroom = max(0, available - reserve)
        self._early_check_bytes = max(1, headroom // (4 * bytes_on_disk_per_appended_byte))
        fraction = usage.fraction
        if not self.read_only and not self._storage.writable:
            # A write failed without failing an append (a flush: appends wait for it meanwhile).
            self._enter_read_only("storage does not write now (a write failed; it retries by itself)")
            return
        if available <= reserve:
            self._enter_read_only(
                f"disk usage {fraction:.1%} of {self.path}: {available >> 20} MiB free, at or below the "
                f"{reserve >> 20} MiB kept free (diskUsageThreshold {t.read_only:.0%}, or the memory budget)"
            )
            return
        if self.read_only:
            recent_failure = (
                self._failed_at_s is not None
                and self.clock.monotonic_s() - self._failed_at_s < self.holdoff_s
            )
            below_lwm = available >= reserve + int(total * (t.read_only - t.writable_again))
            if not below_lwm or recent_failure or not self._storage.writable:
                return
            log.warning("broker writable again: disk usage %.1f%% of %s", fraction * 100, self.path)
            self._failed_at_s = None
        if available < reserve + int(total * (t.read_only - t.warn)):
            self.state = DiskState.WARN
            self.reason = (
                f"disk usage {fraction:.1%} of {self.path}: {available >> 20} MiB free, read-only at "
                f"{reserve >> 20} MiB (diskUsageWarnThreshold {t.warn:.0%}, diskUsageThreshold {t.read_only:.0%})"
            )
            self._log.warning("disk-warn", "%s", self.reason)
        else:
            self.state = DiskState.WRITABLE
            self.reason = ""

    @property
    def holdoff_s(self) -> float:
        return min(write_failure_holdoff_s, self.thresholds.check_interval_s)

    def write_failed(self, error: BaseException) -> None:
        """An append failed in storage: read-only now, checked again once the hold-off is over."""
        self.write_failures_total += 1
        self._failed_at_s = self.clock.monotonic_s()
        self._enter_read_only(f"a storage write failed: {error}")
        if self._recheck is None or self._recheck.done():
            self._recheck = asyncio.get_running_loop().create_task(self._check_after_holdoff())

    async def _check_after_holdoff(self) -> None:
        """While read-only for a write failure: a check every hold-off (not only every interval),
        so that writing resumes soon after storage does."""
        while self._failed_at_s is not None:
            wait = self._failed_at_s + self.holdoff_s - self.clock.monotonic_s()
            await self.clock.sleep(max(wait, self.holdoff_s if wait <= 0 else wait))
            await self.check_now()

    def note_appended(self, size: int) -> None:
        """Appended bytes since the last check; past a quarter of the headroom, check now."""
        self._appended_since_check += size
        if 0 < self._early_check_bytes <= self._appended_since_check:
            self._appended_since_check = 0
            self.check_soon()

    def _enter_read_only(self, reason: str) -> None:
        self.reason = reason
        if self.read_only:
            self._log.warning("read-only", "broker read-only, producers refused: %s", reason)
            return
        self.state = DiskState.READ_ONLY
        self.read_only_total += 1
        self._log.warning("read-only", "broker read-only, producers refused: %s", reason)
        self._on_read_only(reason)

    def metrics(self) -> dict[str, float]:
        p = "velamq_broker_disk_"
        usage = self.usage
        return {
            p + "usage_ratio": usage.fraction if usage is not None else 0.0,
            p + "total_bytes": usage.total_bytes if usage is not None else 0,
            p + "available_bytes": usage.available_bytes if usage is not None else 0,
            p + "state": self.state.value,
            p + "read_only": 1 if self.read_only else 0,
            p + "read_only_total": self.read_only_total,
            p + "write_failures_total": self.write_failures_total,
            p + "checks_total": self.checks_total,
            p + "check_failures_total": self.check_failures_total,
            p + "usage_warn_threshold": self.thresholds.warn,
            p + "usage_threshold": self.thresholds.read_only,
            p + "usage_lwm_threshold": self.thresholds.writable_again,
            p + "reserve_bytes": self.reserve_bytes(usage.total_bytes) if usage is not None else self.min_free_bytes,
        }
