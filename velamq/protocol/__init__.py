"""The Pulsar wire codec, sans-IO: bytes in, commands out, and back. Never imports asyncio or sockets.

    pb                      the generated protobuf module (BaseCommand, MessageMetadata, ...)
    FrameDecoder            split a byte stream into Frames (command + entry)
    encode_command          a simple command as bytes
    encode_payload_command  SEND / MESSAGE around a checksummed entry
    SendReceiptEncoder      SEND_RECEIPT frames from one kept template
    build_entry / split_entry / parse_entry_metadata(_bytes) / entry_metadata_bytes / verify_entry
    build_batch / parse_batch / entry_messages
    decode_batch / encode_batch / single_columns / MessageColumns   batches at once, as columns
    compress / decompress / codec_from_name
    split_chunks / chunk_uuid / ChunkAssembler   chunking: split on the producer, reassembly state
"""

from velamq.protocol import _pulsar_api_pb2 as pb
from velamq.protocol._batch import build_batch, entry_messages, parse_batch
from velamq.protocol._chunks import (
    AssembledMessage,
    ChunkAssembler,
    ChunkOutcome,
    EvictedMessage,
    chunk_uuid,
    split_chunks,
)
from velamq.protocol._columns import MessageColumns, decode_batch, encode_batch, single_columns, varint
from velamq.protocol._compression import codec_from_name, compress, decompress
from velamq.protocol._entry import (
    build_entry,
    crc32c,
    entry_metadata_bytes,
    parse_entry_metadata,
    parse_entry_metadata_bytes,
    split_entry,
    verify_entry,
    with_checksum,
)
from velamq.protocol._frames import Frame, FrameDecoder, encode_command, encode_payload_command
from velamq.protocol._ids import I64_MAX, signed64, unsigned64
from velamq.protocol._receipts import SendReceiptEncoder

__all__ = [
    "I64_MAX",
    "AssembledMessage",
    "ChunkAssembler",
    "ChunkOutcome",
    "EvictedMessage",
    "Frame",
    "FrameDecoder",
    "MessageColumns",
    "SendReceiptEncoder",
    "build_batch",
    "build_entry",
    "chunk_uuid",
    "codec_from_name",
    "compress",
    "crc32c",
    "decode_batch",
    "decompress",
    "encode_batch",
    "encode_command",
    "encode_payload_command",
    "entry_messages",
    "entry_metadata_bytes",
    "parse_batch",
    "parse_entry_metadata",
    "parse_entry_metadata_bytes",
    "pb",
    "signed64",
    "single_columns",
    "split_chunks",
    "split_entry",
    "unsigned64",
    "varint",
    "verify_entry",
    "with_checksum",
]
