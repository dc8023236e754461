"""The automatic topic creation rule: Pulsar's AutoTopicCreationOverride checks, the namespace's
override over the broker's keys, and the keys in a standalone.conf."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from velamq.broker import BrokerConfig
from velamq.metadata import partitions_max
from velamq.metadata._auto_creation import (
    NS_AUTO_TOPIC_CREATION,
    AutoTopicCreation,
    auto_topic_creation_error,
    resolve_auto_topic_creation,
)

BROKER = AutoTopicCreation(allowed=True, topic_type="non-partitioned", partitions=1)


@pytest.mark.parametrize(("body", "error"), [
    ({"allowAutoTopicCreation": False}, None),
    ({"allowAutoTopicCreation": False, "topicType": "anything"}, None),  # not checked when off, as Pulsar
    ({"allowAutoTopicCreation": True, "topicType": "non-partitioned"}, None),
    ({"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3}, None),
    ({"allowAutoTopicCreation": True, "topicType": "sharded"}, "Unknown topic type [sharded]"),
    ({"allowAutoTopicCreation": True, "topicType": "partitioned"}, "cannot be null"),
    ({"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 0}, "less than 1"),
    ({"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": partitions_max + 1},
     "less than or equal"),
    ({"allowAutoTopicCreation": True, "topicType": "non-partitioned", "defaultNumPartitions": 2}, "not allowed"),
    ({"allowAutoTopicCreation": "yes"}, "true or false"),
    ({"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": "3"}, "integer"),
    ([True], "JSON object"),
])
def test_override_checks_are_pulsars(body: Any, error: str | None) -> None:
    found = auto_topic_creation_error(body, partitions_max)
    assert found is None if error is None else error in str(found)


def test_a_valid_override_replaces_the_broker_rule() -> None:
    override = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 4}
    rule = resolve_auto_topic_creation({NS_AUTO_TOPIC_CREATION: override}, BROKER)
    assert rule == AutoTopicCreation(True, "partitioned", 4)
    assert rule.partitioned == 4
    assert rule.as_json() == override
    off = resolve_auto_topic_creation({NS_AUTO_TOPIC_CREATION: {"allowAutoTopicCreation": False}}, BROKER)
    assert not off.allowed and off.partitioned == 0


@pytest.mark.parametrize("stored", [None, {"allowAutoTopicCreation": True, "topicType": "partitioned"}, "junk"])
def test_no_or_an_invalid_override_leaves_the_broker_rule(stored: Any) -> None:
    # BrokerService.getAutoTopicCreationOverride: an override that does not validate counts as none.
    policies = {} if stored is None else {NS_AUTO_TOPIC_CREATION: stored}
    assert resolve_auto_topic_creation(policies, BROKER) is BROKER
    assert BROKER.partitioned == 0


def test_broker_keys_in_a_config_file(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("allowAutoTopicCreation=true\nallowAutoTopicCreationType=partitioned\ndefaultNumPartitions=8\n"
                    "exposeTopicLevelMetricsInPrometheus=false\ntopicLevelMetricsMaxTopics=100\n")
    config = BrokerConfig.from_file(conf)
    assert (config.auto_topic_creation_type, config.default_num_partitions) == ("partitioned", 8)
    assert (config.expose_topic_level_metrics, config.topic_level_metrics_max_topics) == (False, 100)
    assert BrokerConfig().expose_topic_level_metrics  # Pulsar's default
    with pytest.raises(ValueError, match="allowAutoTopicCreationType"):
        BrokerConfig(auto_topic_creation_type="sharded")
    with pytest.raises(ValueError, match="defaultNumPartitions"):
        BrokerConfig(default_num_partitions=0)
