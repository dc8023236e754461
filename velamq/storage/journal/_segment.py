"""The journal's current segment file, as its thread writes it: create, write, sync, cut back, roll.

The journal (_journal) decides what goes in a group and what a failure means for it; this object
does the file work and keeps the file's state: which segment is current (seq), where its end is
(offset), where it was last synced, and whether a failed write is still to be cut off
(`repair_at`: the segment is cut back to there before anything more is written). Its methods
raise OSError as the system reports it, after leaving the file's state consistent: a failed write
is cut off at once if it can be, else later (repair_at); a failed sync under "fsync" cuts back to
the last sync, under "interval" the next sync tries again; a segment that cannot be created
changes nothing (the old one stays current). Byte layout: _journal_file.

Counters (JournalStats) are written by the journal's thread only and read from the loop (single
writer; int reads are atomic under the GIL).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from velamq._clock import Clock
from velamq.storage import _layout
from velamq.storage._layout import write_all
from velamq.storage.formats._journal_file import SEGMENT_HEADER_BYTES, encode_segment_header, segment_name

PROBE_FILE = "probe.tmp"
probe_bytes = 64 * 1024


@dataclass(slots=True)
class JournalStats:
    """The journal's counters, for metrics (_storage_metrics)."""

    appends_total: int = 0
    bytes_total: int = 0  # record bytes written, headers included
    groups_total: int = 0
    fsyncs_total: int = 0
    fsync_seconds_total: float = 0.0
    fsync_seconds_max: float = 0.0
    write_seconds_total: float = 0.0
    entries_per_fsync_last: float = 0.0
    segments_created_total: int = 0
    write_failures_total: int = 0
    segment_failures_total: int = 0  # a segment could not be created (at a roll, or at start)
    repairs_total: int = 0  # a failed write's bytes cut off after a first attempt failed
    probes_total: int = 0


class SegmentFile:
    """The journal's current segment (see the module docstring). Used by the journal's thread only
    (and by `Journal.open` before that thread starts)."""

    def __init__(self, journal_dir: Path, first_seq: int, *, policy: str, clock: Clock, stats: JournalStats) -> None:
        self._dir = journal_dir
        self._policy = policy
        self._clock = clock
        self._stats = stats
        self.seq = first_seq
        self.fd = -1  # -1: no segment yet (it could not be created)
        self.offset = 0
        self.synced_offset = 0  # where the current segment was last synced (or created)
        self.repair_at: int | None = None  # cut the segment back to here before writing more
        self.unsynced = False
        self.last_sync_s = clock.monotonic_s()

    @property
    def writable(self) -> bool:
        """A segment exists and no failed write is waiting to be cut off."""
        return self.fd >= 0 and self.repair_at is None

    def create(self, seq: int) -> None:
        """Create segment `seq` and make it the current one; on failure nothing changes (a partly
        created file is removed)."""
        self._dir.mkdir(parents=True, exist_ok=True)
        path = self._dir / segment_name(seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            write_all(fd, [encode_segment_header(seq)])
            if self._policy != "none":
                _layout.sync_fd(fd)
                _layout.fsync_dir(self._dir)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        self.fd = fd
        self.seq = seq
        self.offset = self.synced_offset = SEGMENT_HEADER_BYTES
        self.repair_at = None
        self.unsynced = False
        self._stats.segments_created_total += 1

    def create_next(self) -> None:
        """Make segment seq + 1 the current one and close the old one; if it cannot be created,
        the old one stays current (and open)."""
        old_fd, old_seq, old_offset = self.fd, self.seq, self.offset
        try:
            self.create(self.seq + 1)
        except OSError:
            self.fd, self.seq, self.offset = old_fd, old_seq, old_offset
            raise
        os.close(old_fd)

    def cut_back(self) -> bool:
        """Cut off a failed write still pending (repair_at), if any; whether one was cut off."""
        if self.repair_at is None or self.fd < 0:
            return False
        os.ftruncate(self.fd, self.repair_at)
        os.lseek(self.fd, self.repair_at, os.SEEK_SET)
        if self._policy != "none":
            _layout.sync_fd(self.fd)
        self.offset = self.synced_offset = self.repair_at
        self.repair_at = None
        self.unsynced = False
        self._stats.repairs_total += 1
        return True

    def cut_back_to_last_sync(self) -> None:
        """Before anything more is written, cut back to the last sync (an unexpected failure)."""
        if self.fd >= 0:
            self.repair_at = self.synced_offset

    def write(self, buffers: list[bytes], size: int) -> None:
        """Append the buffers (`size` bytes). On failure what reached the file is cut off (or, if
        that fails too, left for `cut_back`) and the OSError is raised."""
        started = time.perf_counter()
        try:
            write_all(self.fd, buffers)
        except OSError:
            try:  # cut off what part of the group reached the file, so replay never sees it
                os.ftruncate(self.fd, self.offset)
                os.lseek(self.fd, self.offset, os.SEEK_SET)
            except OSError:
                self.repair_at = self.offset  # tried again before the next write
            raise
        stats = self._stats
        stats.write_seconds_total += time.perf_counter() - started
        self.offset += size
        stats.bytes_total += size
        self.unsynced = True

    def sync(self) -> None:
        """Sync what was written (unless the policy is none). On failure the page cache may have
        dropped what it could not write: under "fsync" what was written since the last sync is to
        be cut off (repair_at); under "interval" the next sync tries again. Raises the OSError."""
        self.unsynced = False
        self.last_sync_s = self._clock.monotonic_s()
        if self._policy == "none" or self.fd < 0:
            return
        started = time.perf_counter()
        try:
            _layout.sync_fd(self.fd)
        except OSError:
            if self._policy == "fsync":
                self.repair_at = self.synced_offset
            else:
                self.unsynced = True  # the next interval tries again
            raise
        else:
            self.synced_offset = self.offset
        finally:
            elapsed = time.perf_counter() - started
            stats = self._stats
            stats.fsyncs_total += 1
            stats.fsync_seconds_total += elapsed
            if elapsed > stats.fsync_seconds_max:
                stats.fsync_seconds_max = elapsed

    def sync_due(self, interval_s: float) -> bool:
        """Something is unsynced and the last sync is at least `interval_s` ago (by the clock)."""
        return self.unsynced and self._clock.monotonic_s() - self.last_sync_s >= interval_s

    def probe(self) -> None:
        """Write, sync and remove a small file next to the segments: whether writing works again.
        Raises the OSError if it does not."""
        self._stats.probes_total += 1
        path = self._dir / PROBE_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, [bytes(probe_bytes)])
            if self._policy != "none":
                _layout.sync_fd(fd)
        finally:
            os.close(fd)
            path.unlink(missing_ok=True)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
