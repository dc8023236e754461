"""The data source's options, checked at once with errors that name the option (SP-3).

Names follow Spark's Kafka source and the Pulsar Spark connector. Spark hands options over with
lower-cased keys, so they match in any case; errors print the documented spelling.

    option                 read   stream  write   value
    service.url            yes    yes     yes     pulsar://host:6650 (required)
    admin.url              yes    yes     yes     http://host:8080 (required)
    topic                  one of the three       yes     a topic name; for a write it wins over the topic column
    topics                 one of the three       -       comma-separated topic names
    topicsPattern          one of the three       -       a regular expression over full topic names
    startingOffsets        yes    yes     -       earliest | latest | JSON per partition (batch default earliest,
                                                  streaming default latest)
    endingOffsets          yes    -       -       latest | JSON per partition (default latest)
    startingTime           yes    yes     -       epoch milliseconds or ISO-8601; not with startingOffsets
    maxEntriesPerTrigger   -      yes     -       entries per micro-batch, over all partitions
    failOnDataLoss         yes    yes     -       true | false (default true)
    includeProperties      yes    yes     -       true | false (default true): the properties column
    decodeValues           yes    yes     -       true | false (default false): values decoded into columns by
                                                  the topic's AVRO or JSON schema (_decode.py); needs 'topic'
    offloadPath            yes    yes     -       the root the broker offloads ledgers to (a path, file:// or
                                                  s3://bucket[?endpoint_override=...]): offloaded ledgers are
                                                  read from their Parquet files in the executors (_offloaded.py)
    subscriptionName       -      yes     -       the durable cursor commit() moves (default generated
                                                  once per query and kept in its offsets)
    checkpointLocation     Spark's own, which it passes to a streaming sink; accepted there
    queryName              (same)
    authPluginClassName, authParams, tlsTrustCertsFilePath, tlsAllowInsecureConnection,
    tlsHostnameVerificationEnable (and pulsar.client.* / pulsar.admin.* forms)
                           yes    yes     yes     authentication and TLS for both connections (_security.py)

Per-partition JSON, for startingOffsets and endingOffsets, names partitions (or non-partitioned
topics) by full or short name; a value is "earliest", "latest", {"ledgerId": L, "entryId": E
[, "batchIndex": B]} or the serialized MessageId as a list of bytes (the Pulsar connector's form).
A message id means the last message NOT to read for startingOffsets and the last message to read
for endingOffsets, the same convention as the offsets in the checkpoint; partitions left out start
at earliest and end at latest.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from velamq._errors import VelamqError
from velamq._topic_name import TopicPattern
from velamq.client import ConnectionSecurity
from velamq.spark._admin import parse_topic
from velamq.spark._offsets import PartitionOffset
from velamq.spark._security import SECURITY_OPTIONS, SecurityOptionError, parse_security

SERVICE_URL = "service.url"
ADMIN_URL = "admin.url"
TOPIC = "topic"
TOPICS = "topics"
TOPICS_PATTERN = "topicsPattern"
STARTING_OFFSETS = "startingOffsets"
ENDING_OFFSETS = "endingOffsets"
STARTING_TIME = "startingTime"
MAX_ENTRIES_PER_TRIGGER = "maxEntriesPerTrigger"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
INCLUDE_PROPERTIES = "includeProperties"
DECODE_VALUES = "decodeValues"
SUBSCRIPTION_NAME = "subscriptionName"
OFFLOAD_PATH = "offloadPath"
CHECKPOINT_LOCATION = "checkpointLocation"
QUERY_NAME = "queryName"
# Spark's own options, which it hands to a streaming sink with the user's.
_SPARK_OWN = {CHECKPOINT_LOCATION, QUERY_NAME}

_READ = {SERVICE_URL, ADMIN_URL, TOPIC, TOPICS, TOPICS_PATTERN, STARTING_OFFSETS, ENDING_OFFSETS, STARTING_TIME,
         FAIL_ON_DATA_LOSS, INCLUDE_PROPERTIES, DECODE_VALUES, OFFLOAD_PATH} | SECURITY_OPTIONS
_STREAM_READ = (_READ - {ENDING_OFFSETS}) | {MAX_ENTRIES_PER_TRIGGER, SUBSCRIPTION_NAME}
_WRITE = {SERVICE_URL, ADMIN_URL, TOPIC} | _SPARK_OWN | SECURITY_OPTIONS
ALL_OPTIONS = _READ | _STREAM_READ | _WRITE
_BY_LOWER = {name.lower(): name for name in ALL_OPTIONS}

# A per-partition spec: "earliest", "latest" or a position.
PartitionSpec = str | PartitionOffset


class VelamqOptionError(VelamqError, ValueError):
    """An option is unknown, missing, malformed or in conflict with another: the message names it."""


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """startingOffsets / endingOffsets: a default for every partition plus per-partition overrides."""

    default: str  # "earliest" or "latest"
    partitions: Mapping[str, PartitionSpec] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    service_url: str
    admin_url: str
    topics: tuple[str, ...]  # full names, or empty with a pattern
    pattern: str | None  # a full-name regular expression
    starting: OffsetSpec
    ending: OffsetSpec
    starting_time_ms: int | None
    max_entries_per_trigger: int | None
    fail_on_data_loss: bool
    include_properties: bool
    subscription_name: str | None
    decode_values: bool = False
    # With decode_values: the schema fetched when the query was defined (_decode.ValueDecoding).
    decoding: Any = None
    # offloadPath: where offloaded ledgers are read from in the executors (None: all through the broker).
    offload_path: str | None = None
    # Authentication and TLS of the binary protocol and of the admin API (_security.py).
    client_security: ConnectionSecurity = field(default_factory=ConnectionSecurity)
    admin_security: ConnectionSecurity = field(default_factory=ConnectionSecurity)


@dataclass(frozen=True, slots=True)
class SinkOptions:
    service_url: str
    admin_url: str
    topic: str | None  # full name; None: every row names its topic
    client_security: ConnectionSecurity = field(default_factory=ConnectionSecurity)
    admin_security: ConnectionSecurity = field(default_factory=ConnectionSecurity)


def canonical(options: Mapping[str, str]) -> dict[str, str]:
    """Options by their documented name; an unknown one fails, naming it."""
    result: dict[str, str] = {}
    for key, value in options.items():
        name = _BY_LOWER.get(key.lower())
        if key.lower() == "path":
            raise VelamqOptionError("the velamq data source takes no path: name the topic with the 'topic' option")
        if name is None:
            raise VelamqOptionError(f"unknown option {key!r} for the velamq data source; known options: "
                                    f"{', '.join(sorted(ALL_OPTIONS - _SPARK_OWN))}")
        result[name] = value
    return result


def parse_source(options: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Check read options. streaming None: only what holds for both kinds of read (schema time)."""
    opts = canonical(options)
    allowed = _READ | _STREAM_READ if streaming is None else (_STREAM_READ if streaming else _READ)
    for name in opts:
        if name not in allowed:
            kind = "streaming" if streaming else "batch"
            if name in _WRITE:
                raise VelamqOptionError(f"option {name!r} is for writes, not for a {kind} read")
            raise VelamqOptionError(f"option {name!r} does not apply to a {kind} read")
    given = [name for name in (TOPIC, TOPICS, TOPICS_PATTERN) if opts.get(name, "").strip()]
    if len(given) != 1:
        what = "none" if not given else " and ".join(repr(g) for g in given)
        raise VelamqOptionError(f"give exactly one of 'topic', 'topics' or 'topicsPattern' (got {what})")
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    if TOPICS_PATTERN in given:
        pattern = _pattern(opts[TOPICS_PATTERN])
    else:
        raw = opts[given[0]]
        names = [n for n in raw.split(",") if n.strip()] if given[0] == TOPICS else [raw]
        topics = tuple(dict.fromkeys(_topic(given[0], n) for n in names))
    decode_values = _bool(DECODE_VALUES, opts.get(DECODE_VALUES, "false"))
    if decode_values and TOPIC not in given:
        raise VelamqOptionError("option 'decodeValues' needs one topic ('topic'): the values are decoded by its schema")
    if STARTING_TIME in opts and STARTING_OFFSETS in opts:
        raise VelamqOptionError("options 'startingOffsets' and 'startingTime' conflict: give one of them")
    starting = _offsets(STARTING_OFFSETS, opts.get(STARTING_OFFSETS, "latest" if streaming else "earliest"))
    ending = _offsets(ENDING_OFFSETS, opts.get(ENDING_OFFSETS, "latest"))
    if ending.default == "earliest" and ENDING_OFFSETS in opts and not ending.partitions:
        raise VelamqOptionError("option 'endingOffsets' cannot be 'earliest'")
    max_entries = None
    if MAX_ENTRIES_PER_TRIGGER in opts:
        max_entries = _positive_int(MAX_ENTRIES_PER_TRIGGER, opts[MAX_ENTRIES_PER_TRIGGER])
    subscription = opts.get(SUBSCRIPTION_NAME)
    if subscription is not None and not re.fullmatch(r"[-=:.\w]+", subscription):
        raise VelamqOptionError(f"option 'subscriptionName' is not a valid subscription name: {subscription!r}")
    client_security, admin_security = _security(opts)
    return SourceOptions(
        client_security=client_security,
        admin_security=admin_security,
        service_url=_service_url(opts),
        admin_url=_admin_url(opts),
        topics=topics,
        pattern=pattern,
        starting=starting,
        ending=ending,
        starting_time_ms=_time(opts[STARTING_TIME]) if STARTING_TIME in opts else None,
        max_entries_per_trigger=max_entries,
        fail_on_data_loss=_bool(FAIL_ON_DATA_LOSS, opts.get(FAIL_ON_DATA_LOSS, "true")),
        include_properties=_bool(INCLUDE_PROPERTIES, opts.get(INCLUDE_PROPERTIES, "true")),
        subscription_name=subscription,
        decode_values=decode_values,
        offload_path=opts.get(OFFLOAD_PATH) or None,
    )


def parse_sink(options: Mapping[str, str]) -> SinkOptions:
    opts = canonical(options)
    for name in opts:
        if name not in _WRITE:
            raise VelamqOptionError(f"option {name!r} is for reads, not for a write")
    topic = opts.get(TOPIC, "").strip()
    client_security, admin_security = _security(opts)
    return SinkOptions(_service_url(opts), _admin_url(opts), _topic(TOPIC, topic) if topic else None,
                       client_security, admin_security)


def _security(opts: Mapping[str, str]) -> tuple[ConnectionSecurity, ConnectionSecurity]:
    try:
        return parse_security(opts)
    except SecurityOptionError as exc:
        raise VelamqOptionError(str(exc)) from None


# ---- values -------------------------------------------------------------------------------------


def _service_url(opts: Mapping[str, str]) -> str:
    url = opts.get(SERVICE_URL, "").strip()
    if not url:
        raise VelamqOptionError("option 'service.url' is required (e.g. pulsar://localhost:6650)")
    if not re.match(r"^pulsar(\+ssl)?://[^/]+", url):
        raise VelamqOptionError(f"option 'service.url' must be pulsar://host:port or pulsar+ssl://..., not {url!r}")
    return url


def _admin_url(opts: Mapping[str, str]) -> str:
    url = opts.get(ADMIN_URL, "").strip()
    if not url:
        raise VelamqOptionError("option 'admin.url' is required (e.g. http://localhost:8080)")
    if not re.match(r"^https?://[^/]+", url):
        raise VelamqOptionError(f"option 'admin.url' must be http://host:port or https://..., not {url!r}")
    return url.rstrip("/")


def _topic(option: str, name: str) -> str:
    try:
        topic = parse_topic(name)
    except ValueError as exc:
        raise VelamqOptionError(f"option {option!r}: {exc}") from None
    return str(topic)


def _pattern(raw: str) -> str:
    text = TopicPattern.parse(raw).regex
    try:
        re.compile(text)
    except re.error as exc:
        raise VelamqOptionError(f"option 'topicsPattern' is not a regular expression: {exc}") from None
    return text


def _bool(option: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise VelamqOptionError(f"option {option!r} must be true or false, not {raw!r}")
    return value == "true"


def _positive_int(option: str, raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise VelamqOptionError(f"option {option!r} must be a positive integer, not {raw!r}") from None
    if value <= 0:
        raise VelamqOptionError(f"option {option!r} must be a positive integer, not {raw!r}")
    return value


def _time(raw: str) -> int:
    text = raw.strip()
    try:
        value = int(text)
    except ValueError:
        try:
            moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise VelamqOptionError(f"option 'startingTime' must be epoch milliseconds or an ISO-8601 time, "
                                    f"not {raw!r}") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        value = int(moment.timestamp() * 1000)
    if value < 0:
        raise VelamqOptionError(f"option 'startingTime' must not be negative, not {raw!r}")
    return value


def _offsets(option: str, raw: str) -> OffsetSpec:
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(text.lower())
    try:
        parsed = json.loads(text)
    except ValueError:
        raise VelamqOptionError(f"option {option!r} must be earliest, latest or a JSON object of partition -> "
                                f"message id, not {raw!r}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise VelamqOptionError(f"option {option!r}: the JSON must be a non-empty object of partition -> message id")
    partitions: dict[str, PartitionSpec] = {}
    for name, value in parsed.items():
        full = _topic(option, name)
        if isinstance(value, str) and value.lower() in ("earliest", "latest"):
            partitions[full] = value.lower()
            continue
        try:
            partitions[full] = PartitionOffset.from_json(value)
        except ValueError as exc:
            raise VelamqOptionError(f"option {option!r}, partition {name!r}: {exc}") from None
    default = "earliest" if option == STARTING_OFFSETS else "latest"
    return OffsetSpec(default, partitions)
