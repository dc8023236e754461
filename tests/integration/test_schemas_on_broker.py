"""The schema registry on a real broker process: versions survive restarts and SIGKILL, the official client
and velamq's agree on Avro and JSON records across two versions (both ways), and deleting a topic
deletes its schemas, leaving nothing for the storage checker."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pulsar.schema as ps
import pytest
from interop_helpers import close_after_kill

from velamq.client import AsyncClient, AvroSchema, IncompatibleSchemaError, JsonSchema, Schema
from velamq.client import schema as vs
from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(300)


# The same records in both clients' classes: v2 adds a field with a default (FULL accepts it).
class OfficialV1(ps.Record):
    name = ps.String()
    age = ps.Integer(required=True)


class OfficialV2(ps.Record):
    name = ps.String()
    age = ps.Integer(required=True)
    email = ps.String(default="none", required_default=True)


class VelamqV1(vs.Record):
    name = vs.String()
    age = vs.Integer(required=True)


class VelamqV2(vs.Record):
    name = vs.String()
    age = vs.Integer(required=True)
    email = vs.String(default="none", required_default=True)


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with run_broker() as b:
        yield b


def official(broker: BrokerProcess) -> pulsar.Client:
    return pulsar.Client(broker.service_url, logger=logging.getLogger("pulsar-client"))


def rest(broker: BrokerProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(broker.admin_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw.strip() else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def schemas_of(broker: BrokerProcess, topic: str) -> list[tuple[int, str]]:
    status, answer = rest(broker, "GET", f"/admin/v2/schemas/public/default/{topic}/schemas")
    assert status == 200
    return [(v["version"], json.loads(v["data"])["name"]) for v in answer["getSchemaResponses"]]


def receive_all(service_url: str, topic: str, schema: Schema[Any], n: int) -> list[Any]:
    async def run() -> list[Any]:
        async with AsyncClient(service_url) as client:
            consumer = await client.subscribe(topic, f"s-{uuid.uuid4().hex[:6]}", schema=schema,
                                              initial_position="earliest")
            return [(await consumer.receive(10_000)) for _ in range(n)]

    return asyncio.run(run())


# ---- durability ----------------------------------------------------------------------------------


def test_versions_survive_a_restart_and_a_kill(tmp_path: Path) -> None:
    with run_broker(tmp_path / "data") as broker:
        topic = f"durable-{uuid.uuid4().hex[:6]}"
        client = official(broker)
        client.create_producer(topic, schema=ps.AvroSchema(OfficialV1)).send(OfficialV1(name="a", age=1))
        client.create_producer(topic, schema=ps.AvroSchema(OfficialV2)).send(OfficialV2(name="b", age=2))
        client.close()
        assert schemas_of(broker, topic) == [(0, "OfficialV1"), (1, "OfficialV2")]

        broker.stop()
        broker.start()
        assert schemas_of(broker, topic) == [(0, "OfficialV1"), (1, "OfficialV2")]
        messages = receive_all(broker.service_url, topic, AvroSchema(VelamqV2), 2)
        assert [(m.value.name, m.value.email) for m in messages] == [("a", "none"), ("b", "none")]

        # A version registered just before SIGKILL is there afterwards: the PRODUCER_SUCCESS that
        # carried it came after the metadata store's commit.
        client = official(broker)
        # A third version: VelamqV1's definition (another record name) through the official client.
        producer = client.create_producer(topic, schema=ps.AvroSchema(VelamqV1))
        producer.send(VelamqV1(name="c", age=3))
        broker.kill()
        close_after_kill(client)
        broker.start()
        assert [v for v, _ in schemas_of(broker, topic)] == [0, 1, 2]
        # An equal schema gets its old version, not a new one.
        client = official(broker)
        again = client.create_producer(topic, schema=ps.AvroSchema(OfficialV2))
        again.send(OfficialV2(name="d", age=4, email="d@x"))
        client.close()
        assert [v for v, _ in schemas_of(broker, topic)] == [0, 1, 2]
        messages = receive_all(broker.service_url, topic, AvroSchema(VelamqV2), 4)
        assert [m.schema_version for m in messages] == [bytes(7) + bytes([v]) for v in (0, 1, 2, 1)]


# ---- the two clients -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["avro", "json"])
def test_official_producers_velamq_consumer(broker: BrokerProcess, kind: str) -> None:
    topic = f"o2v-{kind}-{uuid.uuid4().hex[:6]}"
    make = ps.AvroSchema if kind == "avro" else ps.JsonSchema
    client = official(broker)
    client.create_producer(topic, schema=make(OfficialV1)).send(OfficialV1(name="ada", age=36))
    client.create_producer(topic, schema=make(OfficialV2)).send(OfficialV2(name="bob", age=7, email="b@x"))
    client.close()
    ours = AvroSchema if kind == "avro" else JsonSchema
    new = receive_all(broker.service_url, topic, ours(VelamqV2), 2)
    assert [m.value for m in new] == [VelamqV2(name="ada", age=36, email="none"),
                                      VelamqV2(name="bob", age=7, email="b@x")]
    old = receive_all(broker.service_url, topic, ours(VelamqV1), 2)  # the new field is dropped
    assert [m.value for m in old] == [VelamqV1(name="ada", age=36), VelamqV1(name="bob", age=7)]
    assert [m.schema_version for m in new] == [bytes(8), bytes(7) + b"\x01"]
    assert isinstance(new[0].data(), bytes) and new[0].data() != b""


@pytest.mark.parametrize("kind", ["avro", "json"])
def test_velamq_producers_official_consumer(broker: BrokerProcess, kind: str) -> None:
    topic = f"v2o-{kind}-{uuid.uuid4().hex[:6]}"
    make = ps.AvroSchema if kind == "avro" else ps.JsonSchema
    client = official(broker)
    consumer = client.subscribe(topic, "sub", schema=make(OfficialV2),
                                initial_position=pulsar.InitialPosition.Earliest)

    async def produce() -> None:
        ours = AvroSchema if kind == "avro" else JsonSchema
        async with AsyncClient(broker.service_url) as velamq:
            await (await velamq.create_producer(topic, schema=ours(VelamqV1))).send(VelamqV1(name="ada", age=36))
            await (await velamq.create_producer(topic, schema=ours(VelamqV2))).send(
                VelamqV2(name="bob", age=7, email="b@x"))

    asyncio.run(produce())
    values = [consumer.receive(10_000).value() for _ in range(2)]
    client.close()
    assert [(v.name, v.age, v.email) for v in values] == [("ada", 36, "none"), ("bob", 7, "b@x")]
    # The official consumer's schema registered v0 on the idle topic; the record names differ, so each
    # class is a version of its own.
    assert [name for _, name in schemas_of(broker, topic)] == ["OfficialV2", "VelamqV1", "VelamqV2"]


def test_a_velamq_consumer_with_an_incompatible_schema_is_refused(broker: BrokerProcess) -> None:
    topic = f"refuse-{uuid.uuid4().hex[:6]}"
    client = official(broker)
    client.create_producer(topic, schema=ps.AvroSchema(OfficialV1))

    class Wrong(vs.Record):
        name = vs.Integer(required=True)

    async def subscribe() -> None:
        async with AsyncClient(broker.service_url) as velamq:
            with pytest.raises(IncompatibleSchemaError):
                await velamq.subscribe(topic, "sub", schema=AvroSchema(Wrong))
            with pytest.raises(IncompatibleSchemaError):
                await velamq.subscribe(topic, "sub", schema=JsonSchema(VelamqV1))  # another type
            await velamq.subscribe(topic, "sub", schema=AvroSchema(VelamqV2))  # reads v1 data

    asyncio.run(subscribe())
    client.close()


# ---- deletion ------------------------------------------------------------------------------------


def test_deleting_topics_deletes_their_schemas_and_leaves_nothing_orphaned(tmp_path: Path) -> None:
    from velamq.cli._storage_check import check_storage

    with run_broker(tmp_path / "data") as broker:
        plain, parted = f"del-{uuid.uuid4().hex[:6]}", f"delp-{uuid.uuid4().hex[:6]}"
        assert rest(broker, "PUT", f"/admin/v2/persistent/public/default/{parted}/partitions", 2)[0] == 204
        client = official(broker)
        for topic in (plain, parted):
            client.create_producer(topic, schema=ps.AvroSchema(OfficialV1)).close()
            client.create_producer(topic, schema=ps.AvroSchema(OfficialV2)).close()
        client.close()
        assert len(schemas_of(broker, plain)) == len(schemas_of(broker, parted)) == 2
        assert rest(broker, "DELETE", f"/admin/v2/persistent/public/default/{plain}?force=true")[0] == 204
        assert rest(broker, "DELETE", f"/admin/v2/persistent/public/default/{parted}/partitions?force=true")[0] == 204
        for topic in (plain, parted):
            assert rest(broker, "GET", f"/admin/v2/schemas/public/default/{topic}/schema")[0] == 404
            assert schemas_of(broker, topic) == []
        # A new topic of the same name starts again at version 0.
        client = official(broker)
        client.create_producer(plain, schema=ps.AvroSchema(OfficialV2)).close()
        client.close()
        assert [v for v, _ in schemas_of(broker, plain)] == [0]
        assert rest(broker, "DELETE", f"/admin/v2/persistent/public/default/{plain}?force=true")[0] == 204
        broker.stop()
        report = check_storage(broker.data_dir)
        assert report.errors == [] and report.findings == []


def test_the_same_record_in_both_clients_is_one_version(broker: BrokerProcess) -> None:
    def official_same() -> type:
        class Same(ps.Record):
            name = ps.String()
            tags = ps.Array(ps.String())
        return Same

    def velamq_same() -> type:
        class Same(vs.Record):
            name = vs.String()
            tags = vs.Array(vs.String())
        return Same

    topic = f"same-{uuid.uuid4().hex[:6]}"
    client = official(broker)
    client.create_producer(topic, schema=ps.AvroSchema(official_same())).close()
    client.close()

    async def produce() -> None:
        async with AsyncClient(broker.service_url) as velamq:
            await (await velamq.create_producer(topic, schema=AvroSchema(velamq_same()))).close()

    asyncio.run(produce())
    assert schemas_of(broker, topic) == [(0, "Same")]


def test_receive_nowait_and_batch_receive_decode_too(broker: BrokerProcess) -> None:
    topic = f"nowait-{uuid.uuid4().hex[:6]}"
    client = official(broker)
    client.create_producer(topic, schema=ps.AvroSchema(OfficialV1)).send(OfficialV1(name="a", age=1))
    client.create_producer(topic, schema=ps.AvroSchema(OfficialV2)).send(OfficialV2(name="b", age=2, email="e"))
    client.close()

    async def run() -> list[Any]:
        async with AsyncClient(broker.service_url) as velamq:
            consumer = await velamq.subscribe(topic, "s", schema=AvroSchema(VelamqV2), initial_position="earliest")
            got: list[Any] = []
            deadline = asyncio.get_running_loop().time() + 20
            # receive_nowait holds a message back while its writer's schema is fetched, then hands it out.
            while not got and asyncio.get_running_loop().time() < deadline:
                message = consumer.receive_nowait()
                if message is None:
                    await asyncio.sleep(0.01)
                else:
                    got.append(message)
            while len(got) < 2 and asyncio.get_running_loop().time() < deadline:
                got += await consumer.batch_receive(max_messages=2 - len(got), timeout_ms=1000)
            return [m.value for m in got]

    assert asyncio.run(run()) == [VelamqV2(name="a", age=1, email="none"), VelamqV2(name="b", age=2, email="e")]
