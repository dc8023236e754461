"""The connector's pure parts, without Spark: partition offsets and their order, the offset JSON, entry
arithmetic for maxEntriesPerTrigger, and option checking (SP-2, SP-3)."""

from __future__ import annotations

import json

import pytest

from velamq.client import AdminClient, MessageId
from velamq.spark._admin import parse_topic
from velamq.spark._offsets import EARLIEST, LedgerMap, PartitionOffset, StreamOffset, allocate, message_key
from velamq.spark._options import VelamqOptionError, parse_sink, parse_source

BASE = {"service.url": "pulsar://h:6650", "admin.url": "http://h:8080"}


def test_position_order_puts_a_whole_entry_after_its_batch_messages() -> None:
    assert EARLIEST < PartitionOffset(0, -1) < PartitionOffset(0, 0, 0) < PartitionOffset(0, 0, 5)
    assert PartitionOffset(0, 0, 5) < PartitionOffset(0, 0) < PartitionOffset(0, 1, 0)
    assert PartitionOffset(3, 9) < PartitionOffset(4, -1) < PartitionOffset(4, 0)
    batched, single = MessageId(4, 7, 2, 3, 10), MessageId(4, 7, 2)
    assert message_key(batched) <= PartitionOffset(4, 7).key() and message_key(single) == PartitionOffset(4, 7).key()
    assert message_key(batched) > PartitionOffset(4, 7, 2).key() > message_key(MessageId(4, 7, 2, 1, 10))


def test_position_before_a_message() -> None:
    assert PartitionOffset.before(MessageId(4, 7, 0, 3, 10)) == PartitionOffset(4, 7, 2)
    assert PartitionOffset.before(MessageId(4, 7, 0, 0, 10)) == PartitionOffset(4, 6)
    assert PartitionOffset.before(MessageId(4, 0)) == PartitionOffset(4, -1)
    chunked = MessageId(5, 9, first_chunk=MessageId(5, 6))
    assert PartitionOffset.before(chunked) == PartitionOffset(5, 5)


def test_position_json_forms() -> None:
    mid = MessageId(12, 40, 1, 3, 5)
    assert PartitionOffset.from_json(list(mid.serialize())) == PartitionOffset(12, 40, 3)
    signed = [b - 256 if b > 127 else b for b in MessageId(300, 200).serialize()]  # Java's bytes
    assert PartitionOffset.from_json(signed) == PartitionOffset(300, 200)
    assert PartitionOffset.from_json({"ledgerId": 1, "entryId": 2}) == PartitionOffset(1, 2, -1)
    with pytest.raises(ValueError, match="needs ledgerId and entryId"):
        PartitionOffset.from_json({"ledger": 1})


def test_stream_offset_json_is_deterministic_and_round_trips() -> None:
    offset = StreamOffset("velamq-spark-x", {"persistent://p/n/t-partition-1": PartitionOffset(2, 3),
                                             "persistent://p/n/t-partition-0": PartitionOffset(1, 5, 0)})
    text = json.dumps(offset.to_json())
    same = StreamOffset("velamq-spark-x", dict(reversed(list(offset.partitions.items()))))
    assert json.dumps(same.to_json()) == text
    assert text.index("t-partition-0") < text.index("t-partition-1")
    assert StreamOffset.from_json(json.loads(text)) == offset


def test_ledger_map_counts_and_steps_across_ledgers() -> None:
    # Pulsar reports 0 entries for the open ledger; lastConfirmedEntry has them.
    stats = {"lastConfirmedEntry": "9:3", "ledgers": [{"ledgerId": 3, "entries": 10}, {"ledgerId": 5, "entries": 0},
                                                      {"ledgerId": 9, "entries": 0}]}
    ledgers = LedgerMap.from_internal_stats(stats)
    assert ledgers.ledgers == ((3, 10), (5, 0), (9, 4))
    assert ledgers.count_through(EARLIEST) == 0 and ledgers.count_through(PartitionOffset(9, 3)) == 14
    assert ledgers.count_through(PartitionOffset(3, 4, 2)) == 4  # a partly read entry is not read
    assert ledgers.advance(EARLIEST, PartitionOffset(9, 3), 10) == PartitionOffset(3, 9)
    assert ledgers.advance(PartitionOffset(3, 9), PartitionOffset(9, 3), 2) == PartitionOffset(9, 1)
    assert ledgers.advance(PartitionOffset(3, 9), PartitionOffset(9, 3), 100) == PartitionOffset(9, 3)
    assert ledgers.advance(PartitionOffset(9, -1), PartitionOffset(9, 3), 1) == PartitionOffset(9, 0)


def test_allocate_is_proportional_deterministic_and_never_starves() -> None:
    assert allocate(100, {"a": 10, "b": 20}) == {"a": 10, "b": 20}
    assert allocate(10, {"a": 90, "b": 10, "c": 0}) == {"a": 9, "b": 1, "c": 0}
    shares = allocate(3, {"a": 1000, "b": 1, "c": 1, "d": 1})
    assert sum(shares.values()) == 3 and shares["b"] == shares["c"] == 1
    assert allocate(7, {"x": 50, "y": 50}) == allocate(7, {"y": 50, "x": 50})


def test_topic_names() -> None:
    t = parse_topic(" orders ")
    assert str(t) == "persistent://public/default/orders"
    assert str(t.partition(3)) == "persistent://public/default/orders-partition-3"
    assert t.partition(3).partition_index == 3 and t.partition(3).partitioned_parent == t
    assert AdminClient.topic_path(parse_topic("acme/ns/a b")) == "/admin/v2/persistent/acme/ns/a%20b"
    with pytest.raises(ValueError):
        parse_topic("a/b")


def test_source_options() -> None:
    opts = parse_source({**BASE, "TOPICS": "a, b,a", "startingoffsets": '{"a-partition-0": "latest"}'},
                        streaming=True)
    assert opts.topics == ("persistent://public/default/a", "persistent://public/default/b")
    assert opts.starting.partitions == {"persistent://public/default/a-partition-0": "latest"}
    assert opts.starting.default == "earliest" and opts.include_properties and opts.fail_on_data_loss
    assert parse_source({**BASE, "topic": "a"}, streaming=True).starting.default == "latest"
    assert parse_source({**BASE, "topic": "a"}, streaming=False).starting.default == "earliest"
    pattern = parse_source({**BASE, "topicsPattern": "acme/ns/ev-.*"}, streaming=None).pattern
    assert pattern == "persistent://acme/ns/ev-.*"
    assert parse_source({**BASE, "topic": "a", "startingTime": "1970-01-01T00:00:01Z"},
                        streaming=True).starting_time_ms == 1000


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"topic": "a", "endingOffsets": "latest"}, True, "option 'endingOffsets' does not apply to a streaming read"),
    ({"topic": "a", "maxEntriesPerTrigger": "0"}, True, "option 'maxEntriesPerTrigger' must be a positive integer"),
    ({"topic": "a", "subscriptionName": "bad name"}, True, "option 'subscriptionName' is not a valid"),
    ({"topicsPattern": "(unclosed"}, None, "option 'topicsPattern' is not a regular expression"),
    ({"topic": "a/b"}, None, "option 'topic': invalid topic name"),
    ({"topic": "a", "admin.url": "localhost:8080"}, None, "option 'admin.url' must be http://"),
])
def test_bad_source_options(options: dict[str, str], streaming: bool | None, message: str) -> None:
    with pytest.raises(VelamqOptionError) as info:
        parse_source({**BASE, **options}, streaming=streaming)
    assert message in str(info.value)


def test_sink_options() -> None:
    assert parse_sink({**BASE, "checkpointLocation": "/x"}).topic is None
    assert parse_sink({**BASE, "topic": "t"}).topic == "persistent://public/default/t"
    with pytest.raises(VelamqOptionError, match="option 'maxEntriesPerTrigger' is for reads"):
        parse_sink({**BASE, "maxEntriesPerTrigger": "3"})
