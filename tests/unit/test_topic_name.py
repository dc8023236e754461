"""Topic names and topics patterns (WC-2): the one parser every tier uses."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from velamq import InvalidTopicNameError
from velamq._topic_name import TopicName, TopicPattern


def test_short_names_resolve_to_public_default() -> None:
    assert str(TopicName.parse("orders")) == "persistent://public/default/orders"
    assert str(TopicName.parse("acme/ns/orders")) == "persistent://acme/ns/orders"
    assert str(TopicName.parse("non-persistent://acme/ns/x")) == "non-persistent://acme/ns/x"
    v1 = TopicName.parse("persistent://acme/cluster/ns/x")
    assert (v1.namespace, v1.local_name) == ("acme/cluster/ns", "x")


def test_partitions() -> None:
    topic = TopicName.parse("orders")
    partition = topic.partition(3)
    assert str(partition) == "persistent://public/default/orders-partition-3"
    assert partition.partition_index == 3 and partition.partitioned_parent == topic
    assert topic.partition_index == -1 and topic.partitioned_parent == topic


@pytest.mark.parametrize("bad", ["", "a/b", "unknown://a/b/c", "a//c", "a/b/c/d", "persistent://a/b"])
def test_bad_names_are_refused_with_a_value_error(bad: str) -> None:
    with pytest.raises(InvalidTopicNameError) as info:
        TopicName.parse(bad)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("pattern", "namespace", "regex"), [
    ("ev-.*", "public/default", "persistent://public/default/ev-.*"),
    ("acme/ns/ev-.*", "acme/ns", "persistent://acme/ns/ev-.*"),
    ("persistent://acme/ns/ev-.*", "acme/ns", "persistent://acme/ns/ev-.*"),
    ("non-persistent://acme/ns/(a|b)", "acme/ns", "non-persistent://acme/ns/(a|b)"),
    ("a/b.*", "public/default", "persistent://public/default/a/b.*"),
])
def test_patterns_name_their_namespace_as_topic_names_do(pattern: str, namespace: str, regex: str) -> None:
    parsed = TopicPattern.parse(pattern)
    assert (parsed.namespace, parsed.regex) == (namespace, regex)


def test_one_rule_for_partition_names() -> None:
    from velamq._topic_name import PartitionRole, partition_role

    bar3 = TopicName.parse("bar-partition-3")
    assert partition_role(bar3, 0) is PartitionRole.ORDINARY  # no partitioned "bar": an ordinary topic
    assert partition_role(bar3, 4) is PartitionRole.PARTITION
    assert partition_role(bar3, 3) is PartitionRole.OUT_OF_RANGE
    assert partition_role(TopicName.parse("bar"), 4) is PartitionRole.ORDINARY


def test_a_name_parsed_again_is_the_same_object_and_a_bad_one_fails_each_time() -> None:
    first = TopicName.parse("tenant/ns/again")
    assert TopicName.parse("tenant/ns/again") is first
    assert str(first) == "persistent://tenant/ns/again"
    assert first == TopicName("persistent", "tenant", "ns", "again")
    assert hash(first) == hash(TopicName("persistent", "tenant", "ns", "again"))
    for _ in range(2):
        with pytest.raises(InvalidTopicNameError):
            TopicName.parse("a/b/c/d/e")


def test_the_memory_of_parsed_names_stays_bounded() -> None:
    from velamq import _topic_name

    for i in range(_topic_name._parsed_max * 3):
        assert TopicName.parse(f"t/n/x{i}").local_name == f"x{i}"
    assert len(_topic_name._parsed) <= _topic_name._parsed_max


_PIECES = st.sampled_from(["a", "b-", "-partition-", "partition", "-", "0", "7", "12", "=", ".", "x9"])


@given(st.lists(_PIECES, min_size=1, max_size=6).map("".join), st.sampled_from(["public/default", "t/c/ns"]))
def test_the_parts_made_once_are_what_the_name_says(local: str, namespace: str) -> None:
    name = TopicName.parse(f"persistent://{namespace}/{local}")
    m = re.match(r"^(.*)-partition-(\d+)$", local)
    assert name.namespace == namespace
    assert name.partition_index == (int(m.group(2)) if m else -1)
    parent = name.partitioned_parent
    assert parent is name if m is None else (parent.local_name == m.group(1) and parent.namespace == namespace)
    assert name.partition(3).partition_index == 3 and name.partition(3).partitioned_parent == name
