"""Schema commands at the connection (a real BrokerService over a recording transport): GET_SCHEMA,
GET_OR_CREATE_SCHEMA, schemaValidationEnforced, isAllowAutoUpdateSchema, the consumer rules."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from broker_testing import RecordingTransport, T, broker, command, connect, until_reply

from velamq._clock import ManualClock
from velamq.broker import BrokerService
from velamq.broker.session._connection import ServerConnection
from velamq.protocol import encode_command, pb

TOPIC = "persistent://public/default/orders"


def avro(*fields: str) -> pb.Schema:
    definition = {"type": "record", "name": "Order", "fields": [{"name": f, "type": "long"} for f in fields]}
    return pb.Schema(name="Order", schema_data=json.dumps(definition).encode(), type=pb.Schema.Avro)


def send(connection: ServerConnection, kind: int, field: str, schema: pb.Schema | None = None,
         **values: Any) -> None:
    message = pb.BaseCommand(type=kind)
    body = getattr(message, field)
    body.SetInParent()
    for key, value in values.items():
        setattr(body, key, value)
    if schema is not None:
        body.schema.CopyFrom(schema)
    connection.data_received(encode_command(message))


async def connected(service: BrokerService) -> tuple[ServerConnection, RecordingTransport]:
    connection, transport = connect(service)
    connection.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
    await until_reply(transport, T.CONNECTED)
    return connection, transport


def test_get_schema_by_version_and_latest(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, ManualClock()) as service:
            c, t = await connected(service)
            send(c, T.GET_SCHEMA, "getSchema", topic=TOPIC, request_id=1)
            (none,) = await until_reply(t, T.GET_SCHEMA_RESPONSE)
            assert none.getSchemaResponse.error_code == pb.TopicNotFound
            assert none.getSchemaResponse.error_message == f"Topic not found or no-schema {TOPIC}"

            send(c, T.PRODUCER, "producer", avro("id"), topic=TOPIC, producer_id=1, request_id=2)
            send(c, T.PRODUCER, "producer", avro("id", "qty"), topic=TOPIC, producer_id=2, request_id=3)
            # FULL (the default) refuses a field without default; ALWAYS_COMPATIBLE is set below.
            (refused,) = await until_reply(t, T.ERROR)
            (first,) = t.of_type(T.PRODUCER_SUCCESS)
            assert first.producer_success.schema_version == bytes(8)
            assert refused.error.error == pb.IncompatibleSchema and refused.error.request_id == 3
            await service.metadata.set_topic_policy(TOPIC, "schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
            send(c, T.PRODUCER, "producer", avro("id", "qty"), topic=TOPIC, producer_id=3, request_id=4)
            replies = await until_reply(t, T.PRODUCER_SUCCESS, 2)
            assert replies[1].producer_success.schema_version == bytes(7) + b"\x01"

            for request_id, version in ((5, None), (6, bytes(8)), (7, b""), (8, b"\x00\x01"), (9, bytes(7) + b"\x09")):
                values: dict[str, Any] = {"topic": TOPIC + "-partition-2", "request_id": request_id}
                if version is not None:
                    values["schema_version"] = version
                send(c, T.GET_SCHEMA, "getSchema", **values)
            answers = {r.getSchemaResponse.request_id: r.getSchemaResponse
                       for r in await until_reply(t, T.GET_SCHEMA_RESPONSE, 6)}
            latest, v0 = answers[5], answers[6]
            assert (latest.schema.name, latest.schema.type, latest.schema_version) == (
                "public/default/orders", pb.Schema.Avro, bytes(7) + b"\x01")
            assert latest.schema.schema_data == avro("id", "qty").schema_data
            assert v0.schema_version == bytes(8) and v0.schema.schema_data == avro("id").schema_data
            assert (answers[7].error_code, answers[7].error_message) == (pb.IncompatibleSchema, "Empty schema version")
            assert answers[8].error_code == pb.IncompatibleSchema
            assert answers[9].error_code == pb.TopicNotFound
            assert not t.closed

    asyncio.run(main())


def test_get_or_create_schema(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, ManualClock()) as service:
            c, t = await connected(service)
            send(c, T.GET_OR_CREATE_SCHEMA, "getOrCreateSchema", avro("id"), topic=TOPIC, request_id=1)
            (missing,) = await until_reply(t, T.GET_OR_CREATE_SCHEMA_RESPONSE)
            assert missing.getOrCreateSchemaResponse.error_code == pb.TopicNotFound
            await service.metadata.create_topic(TOPIC)
            send(c, T.GET_OR_CREATE_SCHEMA, "getOrCreateSchema", pb.Schema(name="", schema_data=b"", type=0),
                 topic=TOPIC, request_id=2)
            send(c, T.GET_OR_CREATE_SCHEMA, "getOrCreateSchema", avro("id"), topic=TOPIC, request_id=3)
            send(c, T.GET_OR_CREATE_SCHEMA, "getOrCreateSchema", avro("id"), topic=TOPIC, request_id=4)
            send(c, T.GET_OR_CREATE_SCHEMA, "getOrCreateSchema", pb.Schema(name="s", schema_data=b"", type=1),
                 topic=TOPIC, request_id=5)
            answers = {r.getOrCreateSchemaResponse.request_id: r.getOrCreateSchemaResponse
                       for r in await until_reply(t, T.GET_OR_CREATE_SCHEMA_RESPONSE, 5)}
            assert not answers[2].HasField("error_code") and answers[2].schema_version == b""  # None: no schema
            assert answers[3].schema_version == answers[4].schema_version == bytes(8)
            assert answers[5].error_code == pb.IncompatibleSchema  # STRING after AVRO

    asyncio.run(main())


def test_validation_enforced_and_auto_update_disabled(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, ManualClock()) as service:
            c, t = await connected(service)
            send(c, T.PRODUCER, "producer", avro("id"), topic=TOPIC, producer_id=1, request_id=1)
            await until_reply(t, T.PRODUCER_SUCCESS)
            send(c, T.PRODUCER, "producer", topic=TOPIC, producer_id=2, request_id=2)  # no schema: allowed
            (_, plain) = await until_reply(t, T.PRODUCER_SUCCESS, 2)
            assert not plain.producer_success.HasField("schema_version")

            await service.metadata.set_policy("public/default", "schema_validation_enforced", True)
            await service.metadata.set_policy("public/default", "is_allow_auto_update_schema", False)
            send(c, T.PRODUCER, "producer", topic=TOPIC, producer_id=3, request_id=3)
            send(c, T.PRODUCER, "producer", avro("id", "qty"), topic=TOPIC, producer_id=4, request_id=4)
            send(c, T.PRODUCER, "producer", avro("id"), topic=TOPIC, producer_id=5, request_id=5)
            errors = {e.error.request_id: e.error for e in await until_reply(t, T.ERROR, 2)}
            assert errors[3].error == pb.IncompatibleSchema and "without a schema" in errors[3].message
            assert errors[4].error == pb.IncompatibleSchema and "auto updating is disabled" in errors[4].message
            (*_, existing) = await until_reply(t, T.PRODUCER_SUCCESS, 3)
            assert existing.producer_success.request_id == 5  # an existing version is still fine

    asyncio.run(main())


def test_consumer_schemas(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, ManualClock()) as service:
            c, t = await connected(service)
            auto = pb.Schema(name="", schema_data=b"", type=pb.Schema.AutoConsume)
            # An AUTO_CONSUME consumer is not checked and does not make the topic active...
            send(c, T.SUBSCRIBE, "subscribe", auto, topic=TOPIC, subscription="a", subType=1, consumer_id=1,
                 request_id=1)
            await until_reply(t, T.SUCCESS)
            # ... so the first consumer with a schema registers it on the idle topic.
            send(c, T.SUBSCRIBE, "subscribe", avro("id"), topic=TOPIC, subscription="b", subType=1, consumer_id=2,
                 request_id=2)
            await until_reply(t, T.SUCCESS, 2)
            assert (await service.metadata.schemas.get(TOPIC)) is not None
            # A schema that cannot read the topic's is refused; on a schemaless active topic any is.
            send(c, T.SUBSCRIBE, "subscribe", avro("other"), topic=TOPIC, subscription="c", subType=1,
                 consumer_id=3, request_id=3)
            other = "persistent://public/default/plain"
            send(c, T.PRODUCER, "producer", topic=other, producer_id=9, request_id=4)
            await until_reply(t, T.PRODUCER_SUCCESS)
            send(c, T.SUBSCRIBE, "subscribe", avro("id"), topic=other, subscription="d", subType=1, consumer_id=4,
                 request_id=5)
            errors = {e.error.request_id: e.error for e in await until_reply(t, T.ERROR, 2)}
            assert errors[3].error == pb.IncompatibleSchema
            assert errors[5].error == pb.IncompatibleSchema and "active topic" in errors[5].message
            loaded = service.loaded_topic(TOPIC)
            assert loaded is not None and len(loaded.subscriptions["a"].consumers) == 1
            assert loaded.subscriptions["a"].consumers[0].auto_consume

    asyncio.run(main())
