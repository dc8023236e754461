"""Compatibility strategies through the protocol, as users meet them: an official-client producer with the
new schema is accepted (a new version) or refused with pulsar.IncompatibleSchema, on a real broker.

Each strategy is a namespace policy; each case a fresh topic where a first producer registers the old
schema. Changes go both ways (adding a field is removing it read backwards), and the transitive cases
need a third version that only the older first one cannot live with.
"""

from __future__ import annotations

import json
import logging
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(300)

STRATEGIES = ["ALWAYS_COMPATIBLE", "ALWAYS_INCOMPATIBLE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE",
              "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"]


def record(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Order", "fields": list(fields)}


A_INT = {"name": "a", "type": "int"}
A_LONG = {"name": "a", "type": "long"}
A_STRING = {"name": "a", "type": "string"}
B_DEFAULT = {"name": "b", "type": "string", "default": ""}
B_REQUIRED = {"name": "b", "type": "string"}

# change: (old, new) and which of BACKWARD / FORWARD / FULL accept old -> new and new -> old.
CHANGES: dict[str, tuple[dict[str, Any], dict[str, Any], set[str], set[str]]] = {
    "add a field with a default": (record(A_INT), record(A_INT, B_DEFAULT),
                                   {"BACKWARD", "FORWARD", "FULL"}, {"BACKWARD", "FORWARD", "FULL"}),
    "add a field without default": (record(A_INT), record(A_INT, B_REQUIRED), {"FORWARD"}, {"BACKWARD"}),
    "widen int to long": (record(A_INT), record(A_LONG), {"BACKWARD"}, {"FORWARD"}),
    "change int to string": (record(A_INT), record(A_STRING), set(), set()),
}


def _accepts(strategy: str, plain: set[str]) -> bool:
    if strategy == "ALWAYS_COMPATIBLE":
        return True
    if strategy == "ALWAYS_INCOMPATIBLE":
        return False
    return strategy.removesuffix("_TRANSITIVE") in plain


CASES = [
    pytest.param(strategy, change, direction, id=f"{strategy}-{change.replace(' ', '_')}-{direction}")
    for strategy in STRATEGIES for change in CHANGES for direction in ("forward", "backward")
]


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with run_broker() as b:
        for strategy in STRATEGIES:
            put(b, f"/admin/v2/namespaces/public/{strategy.lower()}", {})
            put(b, f"/admin/v2/namespaces/public/{strategy.lower()}/schemaCompatibilityStrategy", strategy)
        yield b


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, logger=logging.getLogger("pulsar-client"))
    yield c
    c.close()


def put(broker: BrokerProcess, path: str, body: Any) -> None:
    request = urllib.request.Request(broker.admin_url + path, data=json.dumps(body).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30):
        pass


def versions(broker: BrokerProcess, strategy: str, topic: str) -> list[int]:
    path = f"/admin/v2/schemas/public/{strategy.lower()}/{topic}/schemas"
    with urllib.request.urlopen(broker.admin_url + path, timeout=30) as response:
        return [v["version"] for v in json.loads(response.read())["getSchemaResponses"]]


def produce_with(client: pulsar.Client, strategy: str, topic: str, schema: dict[str, Any] | Any) -> bool:
    """Create a producer with the schema (an Avro definition, or a pulsar.schema schema): True if the
    broker accepted it, False if it refused it with IncompatibleSchema."""
    if isinstance(schema, dict):
        schema = AvroSchema(None, schema_definition=schema)
    try:
        client.create_producer(f"persistent://public/{strategy.lower()}/{topic}", schema=schema).close()
        return True
    except pulsar.IncompatibleSchema:
        return False


@pytest.mark.parametrize(("strategy", "change", "direction"), CASES)
def test_one_change(broker: BrokerProcess, client: pulsar.Client, strategy: str, change: str, direction: str) -> None:
    old, new, accepting_forward, accepting_backward = CHANGES[change]
    if direction == "backward":
        old, new = new, old
    expected = _accepts(strategy, accepting_forward if direction == "forward" else accepting_backward)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    assert produce_with(client, strategy, topic, old)
    assert produce_with(client, strategy, topic, new) is expected
    assert versions(broker, strategy, topic) == ([0, 1] if expected else [0])


# Three versions: the third is compatible with the second but not with the first.
TRANSITIVE = {
    "BACKWARD": [record(A_INT), record(A_INT, B_DEFAULT), record(A_INT, B_REQUIRED)],
    "FORWARD": [record(A_INT, B_REQUIRED), record(A_INT, B_DEFAULT), record(A_INT)],
    "FULL": [record(A_INT), record(A_INT, B_DEFAULT), record(A_INT, B_REQUIRED)],
}


@pytest.mark.parametrize("plain", ["BACKWARD", "FORWARD", "FULL"])
def test_transitive_strategies_check_every_version(broker: BrokerProcess, client: pulsar.Client, plain: str) -> None:
    v0, v1, v2 = TRANSITIVE[plain]
    for strategy, expected in ((plain, True), (plain + "_TRANSITIVE", False)):
        topic = f"tr-{uuid.uuid4().hex[:8]}"
        assert produce_with(client, strategy, topic, v0) and produce_with(client, strategy, topic, v1)
        assert produce_with(client, strategy, topic, v2) is expected, strategy
        assert versions(broker, strategy, topic) == ([0, 1, 2] if expected else [0, 1])


class J1(Record):
    a = Integer(required=True)


class J2(Record):
    a = String(required=True)


class J3(Record):
    a = Integer(required=True)
    b = String(default="", required_default=True)


def test_json_schemas_are_checked_as_avro(broker: BrokerProcess, client: pulsar.Client) -> None:
    topic = f"json-{uuid.uuid4().hex[:8]}"
    assert produce_with(client, "FULL", topic, JsonSchema(J1))
    assert produce_with(client, "FULL", topic, JsonSchema(J2)) is False  # int -> string
    assert produce_with(client, "FULL", topic, JsonSchema(J3)) is True  # a field with a default
    # Another type is refused whatever the definition (AVRO after JSON).
    assert produce_with(client, "FULL", topic, AvroSchema(J1)) is False
    assert versions(broker, "FULL", topic) == [0, 1]
