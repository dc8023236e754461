"""Namespace bundles, as Apache Pulsar defines them: the unit a broker (here, a worker) owns.

A namespace's hash space [0x00000000, 0xffffffff] is cut into bundles by sorted boundaries; a topic
belongs to the bundle that holds the CRC-32 of its full name (`persistent://t/ns/topic`, each
partition hashed on its own, so one partitioned topic spreads over bundles). Every range is
[lower, upper) except the last, which is closed at 0xffffffff. A bundle is written
`0x%08x_0x%08x`, and a namespace's boundaries live in its policies as Pulsar's `bundles`
({"boundaries": [...], "numBundles": n}); a namespace without them has the default count.

Pure functions and values: no I/O, used by metadata, broker, admin and the worker supervisor.
"""

from __future__ import annotations

import bisect
import itertools
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from velamq._errors import VelamqError

FULL_LOWER: Final = 0x00000000
FULL_UPPER: Final = 0xFFFFFFFF
# Pulsar's defaultNumberOfNamespaceBundles.
default_bundles: Final = 4
# A namespace may be cut into at most this many bundles (each costs a storage directory when
# several workers run).
bundles_max: Final = 1024


class BundleError(VelamqError, ValueError):
    """A bundle name or a boundaries list that is not well formed."""


def topic_hash(full_name: str) -> int:
    """The unsigned CRC-32 of a full topic name: Pulsar's ConsistentHashingTopicBundleAssigner."""
    return zlib.crc32(full_name.encode()) & 0xFFFFFFFF


@dataclass(frozen=True, order=True, slots=True)
class BundleRange:
    lower: int
    upper: int

    @property
    def name(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    def __str__(self) -> str:
        return self.name

    def holds(self, hash_value: int) -> bool:
        if self.upper == FULL_UPPER:
            return self.lower <= hash_value <= FULL_UPPER
        return self.lower <= hash_value < self.upper


def parse_bundle(name: str) -> BundleRange:
    """`0x00000000_0x40000000` -> BundleRange; BundleError if it is not one."""
    parts = name.split("_")
    if len(parts) != 2 or not all(p.lower().startswith("0x") for p in parts):
        raise BundleError(f"bad bundle range {name!r}: expected 0xLOWER_0xUPPER")
    try:
        lower, upper = (int(p, 16) for p in parts)
    except ValueError:
        raise BundleError(f"bad bundle range {name!r}: not hexadecimal") from None
    if not FULL_LOWER <= lower < upper <= FULL_UPPER:
        raise BundleError(f"bad bundle range {name!r}: lower must be below upper, both 32-bit")
    return BundleRange(lower, upper)


def even_boundaries(count: int) -> tuple[int, ...]:
    """Boundaries of `count` equal bundles (Pulsar's PoliciesUtil.getBundles): 0, seg, 2*seg, ...,
    the last forced to 0xffffffff."""
    if not 1 <= count <= bundles_max:
        raise BundleError(f"a namespace has 1 to {bundles_max} bundles, not {count}")
    segment = (FULL_UPPER + 1) // count
    return (*(i * segment for i in range(count)), FULL_UPPER)


@dataclass(frozen=True, slots=True)
class NamespaceBundles:
    """One namespace's bundles: sorted boundaries, the first 0 and the last 0xffffffff."""

    boundaries: tuple[int, ...]

    def __post_init__(self) -> None:
        b = self.boundaries
        if len(b) < 2 or b[0] != FULL_LOWER or b[-1] != FULL_UPPER:
            raise BundleError("bundle boundaries must start at 0x00000000 and end at 0xffffffff")
        if any(x >= y for x, y in itertools.pairwise(b)):
            raise BundleError("bundle boundaries must be strictly ascending")
        if len(b) - 1 > bundles_max:
            raise BundleError(f"a namespace has at most {bundles_max} bundles")

    @classmethod
    def even(cls, count: int = default_bundles) -> NamespaceBundles:
        return cls(even_boundaries(count))

    @property
    def ranges(self) -> tuple[BundleRange, ...]:
        b = self.boundaries
        return tuple(BundleRange(b[i], b[i + 1]) for i in range(len(b) - 1))

    def index_of_hash(self, hash_value: int) -> int:
        """The index of the bundle holding a hash (binary search, as NamespaceBundles.getBundle)."""
        return min(bisect.bisect_right(self.boundaries, hash_value) - 1, len(self.boundaries) - 2)

    def index_of(self, full_topic_name: str) -> int:
        return self.index_of_hash(topic_hash(full_topic_name))

    def bundle_of(self, full_topic_name: str) -> BundleRange:
        i = self.index_of(full_topic_name)
        return BundleRange(self.boundaries[i], self.boundaries[i + 1])

    def index_of_range(self, bundle: BundleRange) -> int:
        """The index of a bundle given by its range; BundleError if it is not one of these."""
        i = bisect.bisect_left(self.boundaries, bundle.lower)
        b = self.boundaries
        if i >= len(b) - 1 or b[i] != bundle.lower or b[i + 1] != bundle.upper:
            raise BundleError(f"{bundle.name} is not a bundle of this namespace")
        return i

    def to_policy(self) -> dict[str, Any]:
        """As Pulsar's Policies.bundles (BundlesData): boundaries as 0x%08x strings."""
        return {"boundaries": [f"0x{x:08x}" for x in self.boundaries], "numBundles": len(self.boundaries) - 1}

    @classmethod
    def from_policy(cls, data: Mapping[str, Any] | None, default_count: int = default_bundles) -> NamespaceBundles:
        """From a BundlesData dict ({"boundaries": [...]} or {"numBundles": n}); the default count
        when absent. BundleError if it is malformed."""
        if not data:
            return cls.even(default_count)
        boundaries = data.get("boundaries")
        if boundaries:
            return cls(tuple(_parse_boundary(x) for x in _as_sequence(boundaries)))
        count = data.get("numBundles")
        if not isinstance(count, int) or isinstance(count, bool):
            raise BundleError("bundles needs boundaries or numBundles")
        return cls.even(count)


def _as_sequence(value: object) -> Sequence[object]:
    if not isinstance(value, list | tuple):
        raise BundleError("bundle boundaries must be a list")
    return value


def _parse_boundary(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value, 16)
        except ValueError:
            pass
    raise BundleError(f"bad bundle boundary {value!r}: expected 0x%08x")


def default_owner(namespace: str, bundle_index: int, workers: int) -> int:
    """The worker a bundle belongs to when no move has recorded another owner: namespaces start at
    different workers so that many small namespaces spread too."""
    return (zlib.crc32(namespace.encode()) + bundle_index) % workers
