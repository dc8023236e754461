"""A compact set of log positions: the delayed entries a subscription must not read again.

Roaring-style, as Pulsar keeps the positions of its delayed-delivery buckets: positions are grouped
by (ledger id, entry id >> 16); a group holds a sorted array of 16-bit offsets (2 bytes a position)
while it is sparse and a 8 KiB bitmap once it has more than 4096 of them (1 bit a position). So a
million positions cost ~2 MB at worst and ~125 KB when they are dense, never a Python object each.
"""

from __future__ import annotations

import re
import struct
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import TypeAlias

from velamq.storage import Position

_SHIFT = 16
_LOW = (1 << _SHIFT) - 1
_ARRAY_MAX = 4096  # beyond it a bitmap (8 KiB) is smaller than the array
_BITMAP_BYTES = (1 << _SHIFT) // 8
_NOT_FULL = re.compile(rb"[^\xff]")
_GROUP = struct.Struct("<qqBI")  # ledger id, high bits, kind (0 array, 1 bitmap), payload bytes

_Container: TypeAlias = "array[int] | bytearray"  # array('H') sorted offsets, or a bitmap


class PositionBitmap:
    """A set of positions that costs bits, not objects (module docstring)."""

    __slots__ = ("_count", "_groups", "_set_bits")

    def __init__(self) -> None:
        self._groups: dict[tuple[int, int], _Container] = {}
        self._set_bits: dict[tuple[int, int], int] = {}  # how many bits each bitmap group has set
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __contains__(self, pos: object) -> bool:
        if not isinstance(pos, tuple):
            return False
        ledger_id, entry_id = pos
        group = self._groups.get((ledger_id, entry_id >> _SHIFT))
        if group is None:
            return False
        return _has(group, entry_id & _LOW)

    def add(self, pos: Position) -> bool:
        """True if it was not there yet."""
        key = (pos[0], pos[1] >> _SHIFT)
        low = pos[1] & _LOW
        group = self._groups.get(key)
        if group is None:
            self._groups[key] = array("H", (low,))
            self._count += 1
            return True
        if isinstance(group, bytearray):
            byte, bit = divmod(low, 8)
            if group[byte] >> bit & 1:
                return False
            group[byte] |= 1 << bit
            self._set_bits[key] += 1
        else:
            i = bisect_left(group, low)
            if i < len(group) and group[i] == low:
                return False
            group.insert(i, low)
            if len(group) > _ARRAY_MAX:
                self._groups[key] = _to_bitmap(group)
                self._set_bits[key] = len(group)
        self._count += 1
        return True

    @classmethod
    def of(cls, positions: Iterable[tuple[int, int]]) -> PositionBitmap:
        """A set of many positions at once (a bucket being sealed): one sort per group, no insert."""
        lows: dict[tuple[int, int], list[int]] = {}
        for ledger_id, entry_id in positions:
            key = (ledger_id, entry_id >> _SHIFT)
            found = lows.get(key)
            if found is None:
                lows[key] = [entry_id & _LOW]
            else:
                found.append(entry_id & _LOW)
        out = cls()
        for key, offsets in lows.items():
            group = array("H", sorted(set(offsets)))
            out._count += len(group)
            if len(group) > _ARRAY_MAX:
                out._groups[key] = _to_bitmap(group)
                out._set_bits[key] = len(group)
            else:
                out._groups[key] = group
        return out

    def update(self, positions: Iterable[Position]) -> None:
        for pos in positions:
            self.add(pos)

    def discard(self, pos: Position) -> bool:
        """True if it was there."""
        key = (pos[0], pos[1] >> _SHIFT)
        group = self._groups.get(key)
        if group is None:
            return False
        low = pos[1] & _LOW
        if isinstance(group, bytearray):
            byte, bit = divmod(low, 8)
            if not group[byte] >> bit & 1:
                return False
            group[byte] &= ~(1 << bit) & 0xFF
            left = self._set_bits[key] - 1
            if left:
                self._set_bits[key] = left
            else:
                del self._groups[key], self._set_bits[key]
        else:
            i = bisect_left(group, low)
            if i >= len(group) or group[i] != low:
                return False
            del group[i]
            if not group:
                del self._groups[key]
        self._count -= 1
        return True

    def clear(self) -> None:
        self._groups.clear()
        self._set_bits.clear()
        self._count = 0

    def next_absent(self, pos: Position) -> int:
        """The first entry id >= pos's in pos's ledger that is not in the set (may lie beyond the
        ledger's end: the caller knows where the ledger ends)."""
        ledger_id, entry_id = pos
        while True:
            group = self._groups.get((ledger_id, entry_id >> _SHIFT))
            if group is None:
                return entry_id
            low = _first_absent(group, entry_id & _LOW)
            if low <= _LOW:
                return (entry_id & ~_LOW) | low
            entry_id = (entry_id | _LOW) + 1  # the whole rest of the group is present: next group

    def runs_between(self, first: Position, last: Position) -> Iterator[tuple[Position, Position]]:
        """The positions in [first, last] as runs of consecutive entries of one ledger (first and
        last of each run), in order: as many tuples as runs, not as positions."""
        low_key, high_key = (first[0], first[1] >> _SHIFT), (last[0], last[1] >> _SHIFT)
        run: list[int] | None = None  # [ledger, first entry, last entry]
        for key in sorted(k for k in self._groups if low_key <= k <= high_key):
            base = key[1] << _SHIFT
            for low in _members(self._groups[key]):
                pos = Position(key[0], base | low)
                if pos < first or pos > last:
                    continue
                if run is not None and run[0] == pos[0] and run[2] + 1 == pos[1]:
                    run[2] = pos[1]
                    continue
                if run is not None:
                    yield Position(run[0], run[1]), Position(run[0], run[2])
                run = [pos[0], pos[1], pos[1]]
        if run is not None:
            yield Position(run[0], run[1]), Position(run[0], run[2])

    def last(self) -> Position | None:
        """The highest position in the set."""
        if not self._groups:
            return None
        key = max(self._groups)
        group = self._groups[key]
        low = group[-1] if isinstance(group, array) else max(_members(group))
        return Position(key[0], key[1] << _SHIFT | low)

    # ---- bytes (the bucket snapshot keeps them) --------------------------------------------------

    def to_bytes(self) -> bytes:
        parts: list[bytes] = []
        for (ledger_id, high), group in sorted(self._groups.items()):
            payload = bytes(group) if isinstance(group, bytearray) else group.tobytes()
            parts.append(_GROUP.pack(ledger_id, high, isinstance(group, bytearray), len(payload)))
            parts.append(payload)
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> PositionBitmap:
        out = cls()
        view = memoryview(data)
        offset = 0
        while offset < len(view):
            ledger_id, high, kind, size = _GROUP.unpack_from(view, offset)
            offset += _GROUP.size
            payload = view[offset : offset + size]
            offset += size
            if kind:
                group: _Container = bytearray(payload)
                bits = int.from_bytes(group, "little").bit_count()
                out._set_bits[(ledger_id, high)] = bits
                out._count += bits
            else:
                group = array("H")
                group.frombytes(payload)
                out._count += len(group)
            out._groups[(ledger_id, high)] = group
        return out

    def merge(self, other: PositionBitmap) -> None:
        """Add every position of `other` (a bucket restored at startup)."""
        for key, group in other._groups.items():
            mine = self._groups.get(key)
            if mine is None:
                if isinstance(group, array):
                    self._groups[key] = group[:]
                    self._count += len(group)
                else:
                    self._groups[key] = bytearray(group)
                    self._set_bits[key] = other._set_bits[key]
                    self._count += other._set_bits[key]
                continue
            ledger_id, high = key
            for low in _members(group):
                self.add(Position(ledger_id, high << _SHIFT | low))


def _has(group: _Container, low: int) -> bool:
    if isinstance(group, bytearray):
        return bool(group[low >> 3] >> (low & 7) & 1)
    i = bisect_left(group, low)
    return i < len(group) and group[i] == low


def _to_bitmap(offsets: array[int]) -> bytearray:
    bitmap = bytearray(_BITMAP_BYTES)
    for low in offsets:
        bitmap[low >> 3] |= 1 << (low & 7)
    return bitmap


def _members(group: _Container) -> Iterable[int]:
    if isinstance(group, array):
        return list(group)
    return [byte * 8 + bit for byte, value in enumerate(group) if value for bit in range(8) if value >> bit & 1]


def _first_absent(group: _Container, low: int) -> int:
    """The first offset >= low not in the group; 1 << 16 if the group is full from low on."""
    if isinstance(group, array):
        i = bisect_left(group, low)
        while i < len(group) and group[i] == low:
            i += 1
            low += 1
        return low
    byte, bit = divmod(low, 8)
    value = group[byte] >> bit
    while bit < 8:
        if not value & 1:
            return byte * 8 + bit
        value >>= 1
        bit += 1
    found = _NOT_FULL.search(group, byte + 1)
    if found is None:
        return 1 << _SHIFT
    index = found.start()
    value = group[index]
    return index * 8 + ((~value & (value + 1)).bit_length() - 1)
