"""A peeked entry as Pulsar's admin API returns it: the message bytes in the body, metadata in headers.

Like Pulsar, the body is the entry's payload after decompression, and a batch entry is returned
whole (its serialized batch: [u32 size][SingleMessageMetadata][payload] per message) with
X-Pulsar-num-batch-message, which is how pulsar-admin, pulsarctl and velamq's CLI know to split
it. `?batchIndex=i` is velamq's addition: just message i of the batch, its own properties and key
in the headers, and no batch header (so any client reads it as one message).

Headers (Pulsar's names; absent when the metadata has no such field):

    X-Pulsar-Message-ID            "ledger:entry"
    X-Pulsar-publish-time          ISO-8601 UTC with milliseconds, e.g. 2024-05-01T12:00:00.123Z
    X-Pulsar-event-time, X-Pulsar-deliver-at-time
    X-Pulsar-producer-name, X-Pulsar-sequence-id, X-Pulsar-highest-sequence-id
    X-Pulsar-partition-key, X-Pulsar-Base64-ordering-key, X-Pulsar-null-value
    X-Pulsar-compression, X-Pulsar-uncompressed-size
    X-Pulsar-num-batch-message, X-Pulsar-batch-size           (whole batches only)
    X-Pulsar-batch-index                                      (velamq, with ?batchIndex)
    X-Pulsar-uuid, X-Pulsar-num-chunks-from-msg, X-Pulsar-total-chunk-msg-size, X-Pulsar-chunk-id
    X-Pulsar-Is-Encrypted          true|false
    X-Pulsar-Property              all properties as one JSON object (SNIP-279)
    X-Pulsar-PROPERTY-<key>        one per property whose key and value are safe in a header
"""

from __future__ import annotations

import base64
import json
import re
import time
from typing import Final

from velamq._errors import ProtocolError
from velamq.admin._http import HttpError, Response
from velamq.protocol import decompress, entry_messages, pb, split_entry

_TOKEN_RE: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_SAFE_VALUE_RE: Final = re.compile(r"[\x20-\x7e]*")  # printable ASCII: survives every HTTP stack


def iso_ms(epoch_ms: int) -> str:
    """Pulsar's DateFormatter output in UTC (ISO_OFFSET_DATE_TIME), always with milliseconds."""
    seconds, millis = divmod(epoch_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _safe(value: str) -> str:
    """Header values go out as latin-1 with no control characters; anything else is escaped."""
    if _SAFE_VALUE_RE.fullmatch(value):
        return value
    return json.dumps(value)[1:-1]  # \\uXXXX escapes, printable ASCII only


def _property_headers(properties: list[pb.KeyValue]) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    as_dict = {kv.key: kv.value for kv in properties}
    if as_dict:
        headers.append(("X-Pulsar-Property", json.dumps(as_dict, separators=(",", ":"))))
    for key, value in as_dict.items():
        if _TOKEN_RE.fullmatch(key) and _SAFE_VALUE_RE.fullmatch(value):
            headers.append((f"X-Pulsar-PROPERTY-{key}", value))
    return headers


def _entry_headers(metadata: pb.MessageMetadata) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = [("X-Pulsar-publish-time", iso_ms(metadata.publish_time))]
    if metadata.HasField("event_time") and metadata.event_time:
        headers.append(("X-Pulsar-event-time", iso_ms(metadata.event_time)))
    if metadata.HasField("deliver_at_time"):
        headers.append(("X-Pulsar-deliver-at-time", iso_ms(metadata.deliver_at_time)))
    headers.append(("X-Pulsar-producer-name", _safe(metadata.producer_name)))
    headers.append(("X-Pulsar-sequence-id", str(metadata.sequence_id)))
    if metadata.HasField("highest_sequence_id"):
        headers.append(("X-Pulsar-highest-sequence-id", str(metadata.highest_sequence_id)))
    headers.append(("X-Pulsar-compression", pb.CompressionType.Name(metadata.compression)))
    if metadata.HasField("uncompressed_size"):
        headers.append(("X-Pulsar-uncompressed-size", str(metadata.uncompressed_size)))
    if metadata.HasField("uuid"):
        headers.append(("X-Pulsar-uuid", _safe(metadata.uuid)))
        headers.append(("X-Pulsar-num-chunks-from-msg", str(metadata.num_chunks_from_msg)))
        headers.append(("X-Pulsar-total-chunk-msg-size", str(metadata.total_chunk_msg_size)))
        headers.append(("X-Pulsar-chunk-id", str(metadata.chunk_id)))
    headers.append(("X-Pulsar-Is-Encrypted", "true" if len(metadata.encryption_keys) else "false"))
    return headers


def _message_headers(meta: pb.MessageMetadata | pb.SingleMessageMetadata) -> list[tuple[str, str]]:
    """Key, ordering key, null value and properties: per message (a batch's live in each message)."""
    headers: list[tuple[str, str]] = []
    if meta.HasField("partition_key"):
        headers.append(("X-Pulsar-partition-key", _safe(meta.partition_key)))
    if meta.HasField("ordering_key"):
        headers.append(("X-Pulsar-Base64-ordering-key", base64.b64encode(meta.ordering_key).decode("ascii")))
    if meta.HasField("null_value") and meta.null_value:
        headers.append(("X-Pulsar-null-value", "true"))
    headers.extend(_property_headers(list(meta.properties)))
    return headers


def peek_response(position: tuple[int, int], entry: bytes, batch_index: int | None = None) -> Response:
    """The response for GET .../subscription/{sub}/position/{n} on the entry found there."""
    try:
        metadata, payload = split_entry(entry)
        encrypted = len(metadata.encryption_keys) > 0
        headers = [("X-Pulsar-Message-ID", f"{position[0]}:{position[1]}"), *_entry_headers(metadata)]
        if batch_index is None or not metadata.HasField("num_messages_in_batch"):
            # Encrypted payloads cannot be decompressed here: they go out as stored, as in Pulsar.
            body = payload if encrypted else decompress(metadata.compression, payload, metadata.uncompressed_size)
            headers += _message_headers(metadata)
            if metadata.HasField("num_messages_in_batch"):
                headers.append(("X-Pulsar-num-batch-message", str(metadata.num_messages_in_batch)))
                headers.append(("X-Pulsar-batch-size", str(len(body))))
            return Response(200, body, "application/octet-stream", tuple(headers))
        if encrypted:
            raise HttpError(400, "An encrypted batch cannot be split on the broker; omit batchIndex")
        _, messages = entry_messages(entry)
        if not 0 <= batch_index < len(messages):
            raise HttpError(404, f"Batch index {batch_index} not found: the batch has {len(messages)} messages")
        single, message = messages[batch_index]
        headers.append(("X-Pulsar-batch-index", str(batch_index)))
        headers += _message_headers(single if single is not None else metadata)
        return Response(200, message, "application/octet-stream", tuple(headers))
    except ProtocolError as exc:
        raise HttpError(500, f"Stored entry {position[0]}:{position[1]} does not decode: {exc}") from None
