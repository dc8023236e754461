"""metadata_accepted (one parse into the strict editions twin) accepts exactly the SEND metadata
that the proto2 parse, IsInitialized() and the UTF-8 check accept together."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from velamq.broker.session._strict_metadata import metadata_accepted
from velamq.broker.session._text_fields import non_utf8_field
from velamq.protocol import pb


def _accepted_the_long_way(raw: bytes) -> bool:
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(raw)
    except Exception:
        return False
    return metadata.IsInitialized() and non_utf8_field(metadata, raw) is None


def _full_metadata() -> bytes:
    """Most fields set, nested messages and repeated fields included."""
    m = pb.MessageMetadata(
        producer_name="producer-é", sequence_id=2**40, publish_time=1_764_300_000_000,
        replicated_from="other", partition_key="key", compression=pb.LZ4, uncompressed_size=99,
        num_messages_in_batch=3, event_time=7, encryption_algo="algo", encryption_param=b"\x00\xff",
        schema_version=b"\x01", partition_key_b64_encoded=True, ordering_key=b"\xff", deliver_at_time=9,
        marker_type=2, txnid_least_bits=1, txnid_most_bits=2, highest_sequence_id=2**40 + 2, null_value=False,
        uuid="u", num_chunks_from_msg=2, total_chunk_msg_size=10, chunk_id=1, null_partition_key=False,
    )
    m.replicate_to.extend(["a", "b"])
    m.properties.add(key="k", value="v")
    keys = m.encryption_keys.add(key="kk", value=b"\x00")
    keys.metadata.add(key="mk", value="mv")
    return m.SerializeToString()


FULL = _full_metadata()
SMALL = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2).SerializeToString()


def test_a_full_metadata_is_accepted() -> None:
    assert metadata_accepted(FULL)
    assert metadata_accepted(SMALL)


def test_missing_required_fields_are_refused_even_nested() -> None:
    no_name = pb.MessageMetadata(sequence_id=1, publish_time=2).SerializePartialToString()
    assert not metadata_accepted(no_name)
    m = pb.MessageMetadata.FromString(SMALL)
    m.properties.add(key="k")  # KeyValue.value is required
    assert not metadata_accepted(m.SerializePartialToString())


def test_a_string_that_is_not_utf8_is_refused() -> None:
    assert not metadata_accepted(SMALL.replace(b"p", b"\xff", 1))


@settings(max_examples=400, deadline=None)
@given(base=st.sampled_from([FULL, SMALL]), at=st.integers(0, 10_000), byte=st.integers(0, 255),
       cut=st.integers(0, 10_000))
@example(base=SMALL, at=2, byte=0xFF, cut=10_000)
def test_the_same_answer_as_the_long_way_for_mutated_bytes(base: bytes, at: int, byte: int, cut: int) -> None:
    raw = bytearray(base)
    raw[at % len(raw)] = byte
    mutated = bytes(raw[: max(1, cut % (len(raw) + 1))])
    assert metadata_accepted(mutated) == _accepted_the_long_way(mutated)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_the_same_answer_as_the_long_way_for_any_bytes(raw: bytes) -> None:
    assert metadata_accepted(raw) == _accepted_the_long_way(raw)
