"""Batches at once: a stored entry decoded into columns, and columns encoded into a batch payload.

The per-message codec (_batch.py) makes a protobuf object per message; at 100-byte messages that
object costs more than everything else a consumer does. Here a batch payload

    [u32 single_metadata_size][SingleMessageMetadata][payload]  x N      (see _batch.py)

is walked once, reading the few SingleMessageMetadata fields by hand, and comes out as columns:
value offsets into the one payload buffer, keys, properties, event times, sequence ids and batch
indexes, as plain lists (no pyarrow, no numpy: the protocol tier has neither). A column nobody set
is None, so a batch without keys or properties costs nothing for them. The Arrow form is built
from these lists by the client (velamq.client.arrow).

Fields are read in the protobuf wire format as upb writes them; a metadata with a field this
walk does not know (or a length that does not fit in one byte where the fast path expects one)
is parsed by protobuf instead, so the result is always what parse_batch gives.

encode_batch is the reverse: values (and optional keys, properties, event times, ordering keys)
and their sequence ids become the uncompressed batch payload, byte for byte what build_batch
makes from the same messages (fields in field-number order, as protobuf serializes them).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from velamq._errors import ProtocolError, VelamqError
from velamq.protocol import _pulsar_api_pb2 as pb

_U32 = struct.Struct(">I")
_pack_u32 = _U32.pack
Properties = list[tuple[str, str]]

# SingleMessageMetadata tags (field number << 3 | wire type).
_T_PROPERTIES = 0x0A
_T_KEY = 0x12
_T_PAYLOAD_SIZE = 0x18
_T_COMPACTED_OUT = 0x20
_T_EVENT_TIME = 0x28
_T_ORDERING_KEY = 0x3A
_T_SEQUENCE_ID = 0x40


@dataclass(slots=True)
class MessageColumns:
    """The messages of one entry, one list per field (position j is the j-th message kept).

    payload        the uncompressed batch payload (or the lone message's payload); values are
                   payload[value_starts[j]:value_ends[j]]
    batch_size     messages in the entry (num_messages_in_batch); 0 for an unbatched message
    batch_indexes  each message's index in the batch; None when every index 0..batch_size-1 is
                   there in order
    keys, properties, event_times, ordering_keys
                   None when no message has one; otherwise one item per message (None / None /
                   0 / None where a message has none)
    sequence_ids() read on demand (a second walk): each message's own, or -1 where its metadata
                   has none (then it is the entry's sequence id + batch index)
    """

    payload: bytes
    value_starts: list[int]
    value_ends: list[int]
    batch_size: int = 0
    batch_indexes: list[int] | None = None
    keys: list[str | None] | None = None
    properties: list[Properties | None] | None = None
    event_times: list[int] | None = None
    ordering_keys: list[bytes | None] | None = None
    _sequence_ids: list[int] | None = None

    def __len__(self) -> int:
        return len(self.value_starts)

    def value(self, j: int) -> bytes:
        return self.payload[self.value_starts[j] : self.value_ends[j]]

    def values(self) -> list[bytes]:
        p = self.payload
        return [p[a:b] for a, b in zip(self.value_starts, self.value_ends, strict=True)]

    def joined_values(self) -> tuple[bytes, list[int]]:
        """All values end to end and the len+1 offsets into them (Arrow's binary layout)."""
        offsets = [0]
        total = 0
        for a, b in zip(self.value_starts, self.value_ends, strict=True):
            total += b - a
            offsets.append(total)
        p = self.payload  # bytes slices, not memoryview ones: joined at once, they cost less
        return b"".join([p[a:b] for a, b in zip(self.value_starts, self.value_ends, strict=True)]), offsets

    @property
    def value_bytes(self) -> int:
        return sum(self.value_ends) - sum(self.value_starts)

    def index(self, j: int) -> int:
        return self.batch_indexes[j] if self.batch_indexes is not None else j

    def sequence_ids(self) -> list[int]:
        if self._sequence_ids is None:
            every = batch_sequence_ids(self.payload, self.batch_size)
            self._sequence_ids = every if self.batch_indexes is None else [every[i] for i in self.batch_indexes]
        return self._sequence_ids

    def sequence_id(self, j: int, entry_sequence_id: int) -> int:
        own = self.sequence_ids()[j]
        return own if own >= 0 else entry_sequence_id + self.index(j)

    def drop_before(self, j: int) -> None:
        """Keep messages j.. only (a reader's start position falls inside the batch)."""
        if j <= 0:
            return
        if self.batch_indexes is None:
            self.batch_indexes = list(range(len(self.value_starts)))
        for name in ("value_starts", "value_ends", "batch_indexes", "keys", "properties", "event_times",
                     "ordering_keys", "_sequence_ids"):
            column = getattr(self, name)
            if column is not None:
                setattr(self, name, column[j:])


def _varint_at(p: bytes, q: int) -> tuple[int, int]:
    """(value, position after it) of the varint at p[q]."""
    value = shift = 0
    while True:
        b = p[q]
        q += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, q
        shift += 7
        if shift > 63:
            raise ProtocolError("varint longer than 10 bytes in single-message metadata")


def _properties_at(p: bytes, q: int, end: int) -> tuple[str, str] | None:
    """The KeyValue at p[q:end], or None when it is not in the one-byte-lengths form."""
    if p[q] != 0x0A:
        return None
    kl = p[q + 1]
    k0 = q + 2
    if kl >= 0x80 or k0 + kl + 2 > end or p[k0 + kl] != 0x12:
        return None
    vl = p[k0 + kl + 1]
    v0 = k0 + kl + 2
    if vl >= 0x80 or v0 + vl != end:
        return None
    return p[k0 : k0 + kl].decode(), p[v0 : v0 + vl].decode()


class _Slow(VelamqError):
    """This metadata needs protobuf (a field or form the hand-written walk does not read)."""


_Meta = tuple[int, str | None, "Properties | None", int, int, "bytes | None", bool]


def _parse_meta(p: bytes, m: int, e: int) -> _Meta:
    """(payload_size, key, properties, event_time, sequence_id or -1, ordering_key, compacted_out)
    of the SingleMessageMetadata at p[m:e]."""
    key: str | None = None
    plist: Properties | None = None
    ps = -1
    et = 0
    seq = -1
    okey: bytes | None = None
    compacted = False
    q = m
    try:
        while q < e:
            t = p[q]
            if t == _T_PAYLOAD_SIZE:
                ps, q = _varint_at(p, q + 1)
            elif t == _T_SEQUENCE_ID:
                seq, q = _varint_at(p, q + 1)
            elif t == _T_KEY:
                n = p[q + 1]
                if n >= 0x80:
                    raise _Slow
                key = p[q + 2 : q + 2 + n].decode()
                q += 2 + n
            elif t == _T_EVENT_TIME:
                et, q = _varint_at(p, q + 1)
            elif t == _T_PROPERTIES:
                n = p[q + 1]
                if n >= 0x80:
                    raise _Slow
                kv = _properties_at(p, q + 2, q + 2 + n)
                if kv is None:
                    raise _Slow
                if plist is None:
                    plist = []
                plist.append(kv)
                q += 2 + n
            elif t == _T_ORDERING_KEY:
                n = p[q + 1]
                if n >= 0x80:
                    raise _Slow
                okey = p[q + 2 : q + 2 + n]
                q += 2 + n
            elif t == _T_COMPACTED_OUT:
                flag = p[q + 1]
                if flag >= 0x80:  # not a one-byte varint: protobuf decides (or refuses a truncated one)
                    raise _Slow
                compacted = flag != 0
                q += 2
            else:
                raise _Slow
        if q != e or ps < 0:
            raise _Slow
    except (_Slow, IndexError, UnicodeDecodeError):
        return _parse_single(p[m:e])
    return ps, key, plist, et, seq, okey, compacted


_HIGH = bytes(range(0x80, 0x100))
_LOW = bytes(range(0x80))


def _uniform(p: bytes, count: int) -> tuple[int, int, int] | None:
    """(meta size, payload size, stride) when every message of the batch has the same layout,
    [u32 m] 0x18 <payload size> [0x40 <sequence id of a fixed length>] <payload>, the batches a
    producer of equal-sized values without keys makes: then positions are arithmetic and each
    check runs over one byte column of all messages at once (bytes slicing with a step)."""
    if len(p) < 7 or p[4] != _T_PAYLOAD_SIZE:
        return None
    ms = (p[0] << 24) | (p[1] << 16) | (p[2] << 8) | p[3]
    v = p[5]
    if v < 0x80:
        ps, q = v, 6
    elif p[6] < 0x80:
        ps, q = (v & 0x7F) | (p[6] << 7), 7
    else:
        return None
    stride = 4 + ms + ps
    if stride * count != len(p) or q > 4 + ms:
        return None
    rest = 4 + ms - q  # metadata bytes after the payload size: none, or a sequence id
    if rest == 1 or rest > 11 or (rest and p[q] != _T_SEQUENCE_ID):
        return None
    for k in range(q + (1 if rest else 0)):  # size, tags and payload size: equal in every message
        if p[k::stride].count(p[k]) != count:
            return None
    if rest:
        last = q + rest - 1  # the sequence id's last byte ends the varint, the ones before continue it
        if len(p[last::stride].translate(None, _HIGH)) != count:
            return None
        for k in range(q + 1, last):
            if len(p[k::stride].translate(None, _LOW)) != count:
                return None
    return ms, ps, stride


def decode_batch(payload: bytes, count: int, skip: set[int] | frozenset[int] | None = None) -> MessageColumns:
    """The messages of an uncompressed batch payload of `count` messages, as columns. Indexes in
    `skip` (acknowledged already) and messages compaction left out are not kept.

    The common metadata, [key] payload_size [sequence_id] (what every client writes for a message
    without properties, event time or ordering key), is read inline; anything else goes through
    _parse_meta. Sequence ids are not read here: MessageColumns.sequence_ids() walks again when
    someone asks."""
    p = payload
    size = len(p)
    if skip is None and count > 8 and (uniform := _uniform(p, count)) is not None:
        ms, ps, stride = uniform
        first = 4 + ms
        return MessageColumns(p, list(range(first, first + count * stride, stride)),
                              list(range(first + ps, first + ps + count * stride, stride)), count)
    starts: list[int] = []
    ends: list[int] = []
    keys: list[str | None] = []
    rare: dict[int, _Meta] = {}
    dropped: list[int] = []
    add_start, add_end, add_key = starts.append, ends.append, keys.append
    from_bytes = int.from_bytes
    o = 0
    # The hot loop: tags as literals (0x12 key, 0x18 payload size, 0x40 sequence id), no bounds
    # checks of its own (an index past the payload is a truncated batch: IndexError below).
    try:
        for i in range(count):
            m = o + 4
            e = m + from_bytes(p[o:m])
            key: str | None = None
            q = m
            t = p[q]
            if t == 0x12 and (n := p[q + 1]) < 0x80:
                try:
                    key = p[q + 2 : q + 2 + n].decode()
                    q += 2 + n
                    t = p[q] if q < e else -1
                except UnicodeDecodeError:
                    t = -1
            ps = -1
            if t == 0x18:
                v = p[q + 1]
                if v < 0x80:
                    ps = v
                    q += 2
                elif (w := p[q + 2]) < 0x80:
                    ps = (v & 0x7F) | (w << 7)
                    q += 3
            if ps < 0 or q > e or (q != e and p[q] != 0x40):
                meta = _parse_meta(p, m, e)
                ps, key = meta[0], meta[1]
                if meta[6] or (skip and i in skip):
                    o = e + ps
                    dropped.append(i)
                    continue
                if meta[2] is not None or meta[3] or meta[5] is not None:
                    rare[len(starts)] = meta
            elif skip and i in skip:
                o = e + ps
                dropped.append(i)
                continue
            o = e + ps
            add_start(e)
            add_end(o)
            add_key(key)
        if o > size:
            raise ProtocolError("truncated batch: payload")
    except IndexError:
        raise ProtocolError("truncated batch") from None
    any_key = keys.count(None) != len(keys)
    columns = MessageColumns(p, starts, ends, count, keys=keys if any_key else None)
    if dropped:
        gone = set(dropped)
        columns.batch_indexes = [i for i in range(count) if i not in gone]
    if rare:
        n = len(starts)
        if any(meta[2] is not None for meta in rare.values()):
            columns.properties = [rare[j][2] if j in rare else None for j in range(n)]
        if any(meta[3] for meta in rare.values()):
            columns.event_times = [rare[j][3] if j in rare else 0 for j in range(n)]
        if any(meta[5] is not None for meta in rare.values()):
            columns.ordering_keys = [rare[j][5] if j in rare else None for j in range(n)]
    return columns


def _parse_single(meta: bytes) -> _Meta:
    single = pb.SingleMessageMetadata()
    try:
        single.ParseFromString(meta)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ProtocolError(f"undecodable single-message metadata: {exc}") from None
    if not single.HasField("payload_size") or single.payload_size < 0:
        raise ProtocolError("single-message metadata without a valid payload_size")
    return (single.payload_size, single.partition_key if single.HasField("partition_key") else None,
            [(kv.key, kv.value) for kv in single.properties] or None,
            single.event_time,
            single.sequence_id if single.HasField("sequence_id") else -1,
            single.ordering_key if single.HasField("ordering_key") else None,
            single.compacted_out)


def batch_sequence_ids(payload: bytes, count: int) -> list[int]:
    """Every message's sequence id from its metadata (-1 where it has none), by batch index."""
    out: list[int] = []
    o = 0
    for _ in range(count):
        m = o + 4
        e = m + _U32.unpack_from(payload, o)[0]
        meta = _parse_meta(payload, m, e)
        out.append(meta[4])
        o = e + meta[0]
    return out


def single_columns(metadata: pb.MessageMetadata, payload: bytes) -> MessageColumns:
    """An unbatched message (its fields are in the entry's MessageMetadata) as columns of one."""
    return MessageColumns(
        payload, [0], [len(payload)], 0, None,
        [metadata.partition_key] if metadata.HasField("partition_key") else None,
        [[(kv.key, kv.value) for kv in metadata.properties]] if metadata.properties else None,
        [metadata.event_time] if metadata.event_time else None,
        [metadata.ordering_key] if metadata.HasField("ordering_key") else None,
        [metadata.sequence_id])


# ---- encoding -----------------------------------------------------------------------------------

_VARINT1 = [bytes((v,)) for v in range(128)]


def varint(v: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int (negative ints as their uint64)."""
    if v < 0x80:
        if v >= 0:
            return _VARINT1[v]
        v &= (1 << 64) - 1
    if v < 0x4000:
        return bytes(((v & 0x7F) | 0x80, v >> 7))
    if v < 0x200000:
        return bytes(((v & 0x7F) | 0x80, ((v >> 7) & 0x7F) | 0x80, v >> 14))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _len_field(tag: bytes, data: bytes) -> bytes:
    return tag + varint(len(data)) + data


def _properties_bytes(properties: Mapping[str, str] | Sequence[tuple[str, str]]) -> bytes:
    items = properties.items() if isinstance(properties, Mapping) else properties
    out = []
    for k, v in items:
        kv = _len_field(b"\x0a", k.encode()) + _len_field(b"\x12", v.encode())
        out.append(_len_field(b"\x0a", kv))
    return b"".join(out)


_LOW14: list[bytes] = []
_SMALL14: list[bytes] = []


def _low14() -> list[bytes]:
    """The 14 low bits of a varint that goes on, as 2 bytes (built on first use: 16 384 entries)."""
    if not _LOW14:
        _LOW14.extend(bytes(((v & 0x7F) | 0x80, (v >> 7) | 0x80)) for v in range(0x4000))
    return _LOW14


def _small14() -> list[bytes]:
    """varint(v) for v < 16 384 (payload sizes, key lengths): a table, built on first use."""
    if not _SMALL14:
        _SMALL14.extend(varint(v) for v in range(0x4000))
    return _SMALL14


_U32_SMALL = [_pack_u32(v) for v in range(256)]
# Keys repeat (a few thousand users, devices, ...): their metadata prefix, "0x12 <len> key 0x18",
# kept for the next batch. Bounded: emptied when full.
_key_prefixes: dict[str, bytes] = {}
key_prefixes_max = 65_536


def _key_prefix(key: str) -> bytes:
    kb = key.encode()
    prefix = b"\x12" + varint(len(kb)) + kb + b"\x18"
    if len(_key_prefixes) >= key_prefixes_max:
        _key_prefixes.clear()
    _key_prefixes[key] = prefix
    return prefix


def encode_batch(values: Sequence[bytes], sequence_ids: Sequence[int] | int, *,
                 keys: Sequence[str | None] | None = None,
                 properties: Sequence[Mapping[str, str] | Sequence[tuple[str, str]] | None] | None = None,
                 event_times: Sequence[int | None] | None = None,
                 ordering_keys: Sequence[bytes | None] | None = None) -> bytes:
    """The uncompressed batch payload of these messages: what build_batch makes of them.

    sequence_ids: one per message, or the first of consecutive ids. keys, properties, event times
    and ordering keys: None, or one per message (None / empty / 0 for a message without)."""
    n = len(values)
    seqs: Sequence[int] = range(sequence_ids, sequence_ids + n) if isinstance(sequence_ids, int) else sequence_ids
    plain = properties is None and event_times is None and ordering_keys is None
    small, low, u32 = _small14(), _low14(), _U32_SMALL
    key_prefix = _key_prefixes
    high, high_bytes = -1, b""
    parts: list[bytes] = []
    append = parts.append
    pack = _pack_u32
    for j in range(n):
        value = values[j]
        size = len(value)
        if plain:  # the common metadata, [key] payload_size sequence_id, inline
            v = seqs[j]
            if 0x4000 <= v < 1 << 63:  # growing ids: the high part is the same for 16 384 of them
                if v >> 14 != high:
                    high = v >> 14
                    high_bytes = varint(high)
                sv = low[v & 0x3FFF] + high_bytes
            else:
                sv = varint(v)
            key = keys[j] if keys is not None else None
            if key:
                prefix = key_prefix.get(key)
                if prefix is None:
                    prefix = _key_prefix(key)
                meta = prefix + (small[size] if size < 0x4000 else varint(size)) + b"\x40" + sv
            else:
                meta = b"\x18" + (small[size] if size < 0x4000 else varint(size)) + b"\x40" + sv
            ms = len(meta)
            append(u32[ms] if ms < 256 else pack(ms))
            append(meta)
            append(value)
            continue
        # Properties, event time or ordering key: field by field, in field-number order.
        meta = _properties_bytes(properties[j]) if properties is not None and properties[j] else b""  # type: ignore[arg-type]
        key = keys[j] if keys is not None else None
        if key:
            meta += _len_field(b"\x12", key.encode())
        meta += b"\x18" + varint(size)
        et = event_times[j] if event_times is not None else None
        if et:
            meta += b"\x28" + varint(et)
        okey = ordering_keys[j] if ordering_keys is not None else None
        if okey is not None:
            meta += _len_field(b"\x3a", okey)
        meta += b"\x40" + varint(seqs[j])
        append(pack(len(meta)))
        append(meta)
        append(value)
    return b"".join(parts)
