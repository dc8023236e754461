"""Schemas as the registry keeps them: types, strategies, one stored version, and their byte codecs.

Pulsar's vocabulary is kept throughout, because users meet it in the admin API and in both clients:

- `SchemaType` has Pulsar's names and numbers (org.apache.pulsar.common.schema.SchemaType); the wire
  enum `Schema.Type` uses the same numbers for 0..20 and External = 22, and AutoConsume = 21 where
  Java says -3.
- `Strategy` is Pulsar's SchemaCompatibilityStrategy; the older namespace field
  `schema_auto_update_compatibility_strategy` (AutoUpdateDisabled, Backward, ...) maps onto it.
- A schema's identity is `schema_id(topic)`: "tenant/namespace/local-name" of the partitioned parent,
  without the domain, as Pulsar's TopicName.getSchemaName(): every partition of a partitioned topic,
  and the persistent and non-persistent topics of one name, share one history.
- Its hash is SHA-256 of the schema data; two schemas are "the same" when type and hash agree
  (Pulsar's SchemaHash; properties do not count).

Byte layouts:

    schema version    8 bytes, big-endian signed 64-bit version number (LongSchemaVersion), as in
                      CommandProducerSuccess.schema_version, MessageMetadata.schema_version and
                      CommandGetSchema(Response).schema_version
    KEY_VALUE data    key length (4 bytes, big-endian signed; -1 = none) | key schema data |
                      value length (same)                                | value schema data
                      the parts' types, names and properties are properties of the KEY_VALUE schema:
                      key.schema.type / .name / .properties (a JSON object in a string), value.schema.*,
                      and kv.encoding.type (INLINE or SEPARATED), as Pulsar's KeyValueSchemaInfo writes them
"""

from __future__ import annotations

import enum
import hashlib
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from velamq._errors import MetadataError
from velamq._topic_name import TopicName

schema_version_bytes: Final = 8
_VERSION: Final = struct.Struct(">q")
_LENGTH: Final = struct.Struct(">i")


class SchemaCompatibilityError(MetadataError):
    """A schema the topic's compatibility strategy does not accept (Pulsar's IncompatibleSchema)."""


class InvalidSchemaDataError(MetadataError):
    """Schema data that is not well formed for its type (Pulsar's InvalidSchemaDataException)."""


class SchemaType(enum.Enum):
    """Pulsar's SchemaType: name and number. Negative numbers are client-side types, never stored."""

    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    DATE = 12
    TIME = 13
    TIMESTAMP = 14
    KEY_VALUE = 15
    INSTANT = 16
    LOCAL_DATE = 17
    LOCAL_TIME = 18
    LOCAL_DATE_TIME = 19
    PROTOBUF_NATIVE = 20
    EXTERNAL = 22  # data in an external schema registry (Pulsar 4's PIP-420); velamq refuses it
    BYTES = -1
    AUTO = -2
    AUTO_CONSUME = -3
    AUTO_PUBLISH = -4

    @classmethod
    def from_protocol(cls, number: int) -> SchemaType:
        """The type of a wire `Schema.Type` number."""
        if number == _PROTOCOL_AUTO_CONSUME:
            return cls.AUTO_CONSUME
        if 0 <= number <= cls.PROTOBUF_NATIVE.value or number == cls.EXTERNAL.value:
            return cls(number)
        raise InvalidSchemaDataError(f"unknown schema type number {number}")

    @classmethod
    def from_name(cls, name: str) -> SchemaType:
        """The type of a Pulsar name ("AVRO", "KEY_VALUE"), as the admin API and properties spell it."""
        try:
            return cls[name]
        except KeyError:
            raise InvalidSchemaDataError(f"unknown schema type {name!r}") from None

    @property
    def protocol_number(self) -> int:
        """The wire `Schema.Type` number; client-side types other than AUTO_CONSUME travel as None (0)."""
        if self is SchemaType.AUTO_CONSUME:
            return _PROTOCOL_AUTO_CONSUME
        return max(int(self.value), 0)

    @property
    def primitive(self) -> bool:
        """Pulsar's SchemaType.isPrimitiveType: the data of such a schema is empty (STRING: or "null")."""
        return self in _PRIMITIVE

    @property
    def avro_based(self) -> bool:
        """Types whose schema data is an Avro schema (JSON too: Pulsar defines JSON records in Avro)."""
        return self in (SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF)


_PROTOCOL_AUTO_CONSUME: Final = 21
_PRIMITIVE: Final = frozenset({
    SchemaType.NONE, SchemaType.BYTES, SchemaType.STRING, SchemaType.BOOLEAN, SchemaType.INT8,
    SchemaType.INT16, SchemaType.INT32, SchemaType.INT64, SchemaType.FLOAT, SchemaType.DOUBLE,
    SchemaType.DATE, SchemaType.TIME, SchemaType.TIMESTAMP, SchemaType.INSTANT, SchemaType.LOCAL_DATE,
    SchemaType.LOCAL_TIME, SchemaType.LOCAL_DATE_TIME,
})


class Strategy(enum.Enum):
    """Pulsar's SchemaCompatibilityStrategy. BACKWARD: the new schema reads data of the old ones;
    FORWARD: the old ones read data of the new one; FULL: both. Plain forms compare with the latest
    version, _TRANSITIVE forms with every version since the last delete."""

    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        return self in (Strategy.BACKWARD_TRANSITIVE, Strategy.FORWARD_TRANSITIVE, Strategy.FULL_TRANSITIVE)

    @property
    def new_reads_old(self) -> bool:
        return self in (Strategy.BACKWARD, Strategy.BACKWARD_TRANSITIVE, Strategy.FULL, Strategy.FULL_TRANSITIVE)

    @property
    def old_reads_new(self) -> bool:
        return self in (Strategy.FORWARD, Strategy.FORWARD_TRANSITIVE, Strategy.FULL, Strategy.FULL_TRANSITIVE)

    @classmethod
    def from_auto_update_policy(cls, value: str | None) -> Strategy:
        """Pulsar's SchemaCompatibilityStrategy.fromAutoUpdatePolicy: None and unknown give UNDEFINED."""
        return _AUTO_UPDATE.get(value or "", cls.UNDEFINED)


_AUTO_UPDATE: Final = {
    "AutoUpdateDisabled": Strategy.ALWAYS_INCOMPATIBLE,
    "Backward": Strategy.BACKWARD,
    "Forward": Strategy.FORWARD,
    "Full": Strategy.FULL,
    "AlwaysCompatible": Strategy.ALWAYS_COMPATIBLE,
    "BackwardTransitive": Strategy.BACKWARD_TRANSITIVE,
    "ForwardTransitive": Strategy.FORWARD_TRANSITIVE,
    "FullTransitive": Strategy.FULL_TRANSITIVE,
}

# Pulsar's broker setting schemaCompatibilityStrategy defaults to FULL.
broker_default_strategy: Final = Strategy.FULL
# Namespace policy fields (Pulsar's Policies) and the topic policy field (TopicPolicies).
NS_SCHEMA_COMPATIBILITY_STRATEGY: Final = "schema_compatibility_strategy"
NS_SCHEMA_AUTO_UPDATE_STRATEGY: Final = "schema_auto_update_compatibility_strategy"
NS_ALLOW_AUTO_UPDATE_SCHEMA: Final = "is_allow_auto_update_schema"
NS_SCHEMA_VALIDATION_ENFORCED: Final = "schema_validation_enforced"
TOPIC_SCHEMA_COMPATIBILITY_STRATEGY: Final = "schemaCompatibilityStrategy"
TOPIC_SCHEMA_VALIDATION_ENFORCED: Final = "schemaValidationEnforced"


def _strategy(value: Any) -> Strategy:
    if isinstance(value, str) and value in Strategy.__members__:
        return Strategy[value]
    return Strategy.UNDEFINED


def effective_strategy(
    namespace_policies: Mapping[str, Any],
    topic_policies: Mapping[str, Any] | None = None,
    broker_default: Strategy = broker_default_strategy,
) -> Strategy:
    """A topic's strategy as Pulsar resolves it: the topic policy; else the namespace's
    schema_compatibility_strategy; else its older schema_auto_update_compatibility_strategy; else the
    broker default. UNDEFINED or an unknown value counts as not set."""
    for candidate in (
        _strategy((topic_policies or {}).get(TOPIC_SCHEMA_COMPATIBILITY_STRATEGY)),
        _strategy(namespace_policies.get(NS_SCHEMA_COMPATIBILITY_STRATEGY)),
        Strategy.from_auto_update_policy(_string_or_none(namespace_policies.get(NS_SCHEMA_AUTO_UPDATE_STRATEGY))),
    ):
        if candidate is not Strategy.UNDEFINED:
            return candidate
    return broker_default


def _string_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def allow_auto_update(namespace_policies: Mapping[str, Any], broker_default: bool = True) -> bool:
    """Pulsar's isAllowAutoUpdateSchema: may a producer register a new version (default true)."""
    value = namespace_policies.get(NS_ALLOW_AUTO_UPDATE_SCHEMA)
    return value if isinstance(value, bool) else broker_default


def validation_enforced(
    namespace_policies: Mapping[str, Any],
    topic_policies: Mapping[str, Any] | None = None,
    broker_default: bool = False,
) -> bool:
    """Pulsar's schemaValidationEnforced: must a producer to a topic with a schema carry one."""
    for value in ((topic_policies or {}).get(TOPIC_SCHEMA_VALIDATION_ENFORCED),
                  namespace_policies.get(NS_SCHEMA_VALIDATION_ENFORCED)):
        if isinstance(value, bool):
            return value
    return broker_default


@dataclass(frozen=True, slots=True)
class SchemaData:
    """A schema as a client or the admin API gives it: type, definition bytes and properties."""

    type: SchemaType
    data: bytes = b""
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def hash(self) -> bytes:
        """Pulsar's SchemaHash: SHA-256 of the data (the type is compared beside it)."""
        return hashlib.sha256(self.data).digest()

    def same_as(self, other: SchemaData) -> bool:
        return self.type is other.type and self.hash == other.hash


@dataclass(frozen=True, slots=True)
class StoredSchema:
    """One version of a topic's schema history. A deletion is a version too (type NONE, no data)."""

    version: int
    schema: SchemaData
    timestamp_ms: int
    deleted: bool = False


def live_history(history: list[StoredSchema]) -> list[StoredSchema]:
    """The versions after the last deletion, oldest first: what compatibility and lookups consider
    (Pulsar's trimDeletedSchemaAndGetList)."""
    for index in range(len(history) - 1, -1, -1):
        if history[index].deleted:
            return history[index + 1:]
    return list(history)


def schema_id(topic: str) -> str:
    """The id a topic's schemas are kept under: "tenant/ns/name" of its partitioned parent."""
    parent = TopicName.parse(topic).partitioned_parent
    return f"{parent.namespace}/{parent.local_name}"


def encode_version(version: int) -> bytes:
    return _VERSION.pack(version)


def decode_version(raw: bytes) -> int:
    if len(raw) != schema_version_bytes:
        raise InvalidSchemaDataError(f"a schema version is {schema_version_bytes} bytes, not {len(raw)}")
    return int(_VERSION.unpack(raw)[0])


# ---------------------------------------------------------------------------------- KEY_VALUE


def encode_key_value(key: bytes | None, value: bytes | None) -> bytes:
    out = bytearray()
    for part in (key, value):
        out += _LENGTH.pack(-1 if part is None else len(part))
        out += part or b""
    return bytes(out)


def decode_key_value(data: bytes) -> tuple[bytes | None, bytes | None]:
    parts: list[bytes | None] = []
    offset = 0
    for what in ("key", "value"):
        if offset + _LENGTH.size > len(data):
            raise InvalidSchemaDataError(f"KEY_VALUE schema data ends before the {what} schema length")
        (length,) = _LENGTH.unpack_from(data, offset)
        offset += _LENGTH.size
        if length < 0:
            parts.append(None)
            continue
        if offset + length > len(data):
            raise InvalidSchemaDataError(f"KEY_VALUE schema data ends inside the {what} schema")
        parts.append(bytes(data[offset:offset + length]))
        offset += length
    if offset != len(data):
        raise InvalidSchemaDataError(f"KEY_VALUE schema data has {len(data) - offset} bytes after the value schema")
    return parts[0], parts[1]


def key_value_parts(schema: SchemaData) -> tuple[SchemaData, SchemaData]:
    """The key and value schemas of a KEY_VALUE schema (a missing type means BYTES, as in Pulsar)."""
    key, value = decode_key_value(schema.data)
    return _sub_schema(schema, "key", key), _sub_schema(schema, "value", value)


def _sub_schema(parent: SchemaData, prefix: str, data: bytes | None) -> SchemaData:
    props = parent.properties
    type_ = SchemaType.from_name(props.get(f"{prefix}.schema.type", SchemaType.BYTES.name))
    raw = props.get(f"{prefix}.schema.properties") or ""
    try:
        decoded = json.loads(raw) if raw else {}
    except ValueError:
        raise InvalidSchemaDataError(f"{prefix}.schema.properties is not JSON: {raw!r}") from None
    if not isinstance(decoded, dict):
        raise InvalidSchemaDataError(f"{prefix}.schema.properties is not a JSON object: {raw!r}")
    return SchemaData(type_, data or b"", {str(k): str(v) for k, v in decoded.items()})
