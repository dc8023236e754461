"""Namespace bundles: Pulsar's hashing, boundaries and names (velamq/_bundles.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from velamq._bundles import (
    FULL_UPPER,
    BundleError,
    BundleRange,
    NamespaceBundles,
    default_owner,
    parse_bundle,
    topic_hash,
)


def test_pulsar_examples() -> None:
    # The CRC-32 and bundle of three names, as Pulsar's NamespaceBundleFactory computes them.
    nb = NamespaceBundles.even(4)
    assert [r.name for r in nb.ranges] == [
        "0x00000000_0x40000000",
        "0x40000000_0x80000000",
        "0x80000000_0xc0000000",
        "0xc0000000_0xffffffff",
    ]
    assert topic_hash("persistent://public/default/my-topic") == 0x2BAD45F7
    assert nb.bundle_of("persistent://public/default/my-topic-partition-0").name == "0x00000000_0x40000000"
    assert nb.bundle_of("persistent://public/default/my-topic-partition-1").name == "0x40000000_0x80000000"


@given(st.integers(1, 64), st.integers(0, FULL_UPPER))
def test_every_hash_is_in_exactly_one_bundle(count: int, hash_value: int) -> None:
    nb = NamespaceBundles.even(count)
    holding = [i for i, r in enumerate(nb.ranges) if r.holds(hash_value)]
    assert holding == [nb.index_of_hash(hash_value)]


@given(st.integers(1, 64))
def test_policy_round_trip_and_names(count: int) -> None:
    nb = NamespaceBundles.even(count)
    assert NamespaceBundles.from_policy(nb.to_policy()) == nb
    assert NamespaceBundles.from_policy({"numBundles": count}) == nb
    for i, r in enumerate(nb.ranges):
        assert parse_bundle(r.name) == r
        assert nb.index_of_range(r) == i


def test_defaults_and_bad_input() -> None:
    assert NamespaceBundles.from_policy(None) == NamespaceBundles.even(4)
    assert NamespaceBundles.from_policy({}, default_count=2) == NamespaceBundles.even(2)
    for bad in ("0x1_", "00000000_40000000", "0x40000000_0x00000000", "0xzz_0x10", "0x0_0x100000000"):
        with pytest.raises(BundleError):
            parse_bundle(bad)
    bad_policies = ({"boundaries": ["0x0", "0x10"]}, {"boundaries": "x"}, {"numBundles": 0}, {"numBundles": True})
    for policy in bad_policies:
        with pytest.raises(BundleError):
            NamespaceBundles.from_policy(policy)
    with pytest.raises(BundleError):
        NamespaceBundles.even(4).index_of_range(BundleRange(0, 0x20000000))


def test_default_owner_spreads_bundles_over_workers() -> None:
    owners = {default_owner("public/default", i, 2) for i in range(4)}
    assert owners == {0, 1}
    assert all(0 <= default_owner(f"t/ns{i}", 0, 3) < 3 for i in range(50))
