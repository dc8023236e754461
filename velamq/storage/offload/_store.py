"""The offloaded files under one root, through a pyarrow filesystem (local or S3). Blocking.

Layout (docs/offload.md), one directory per topic, named after the managed ledger (the topic's
full name with "://" as "/", each part percent-encoded):

    <root>/<domain>/<tenant>/<namespace>/<topic>/
        ledger-<ledger id:020d>.parquet     the ledger's messages, one row each (_parquet)
        _manifests/ledger-<id:020d>.json    its manifest, written last: the offload is complete

Spark, pyarrow datasets and pandas skip names that start with '_' or '.', so the topic's directory
read as a Parquet dataset is exactly its offloaded ledgers' files.

A reader (the broker's, or Spark/DuckDB/pandas globbing *.parquet) sees a Parquet file whole or not
at all: a local file is written under a '.'-prefixed name and renamed, an S3 object exists only
once its upload completes. The manifest is what makes the ledger offloaded: a file without one is
an offload cut short (rewritten by the retry, or found by the checker).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pyarrow.fs as pafs  # type: ignore[import-untyped]

from velamq._errors import StorageError
from velamq.storage._config import OffloadConfig
from velamq.storage.offload._codec import EntryRows
from velamq.storage.offload._parquet import LedgerFileWriter, RowGroup, WriteLimits, manifest_bytes, read_row_group

_PREFIX = "ledger-"
MANIFESTS = "_manifests"
s3_connect_timeout_s = 5.0
s3_request_timeout_s = 60.0


@dataclass(frozen=True, slots=True)
class Manifest:
    ledger_id: int
    entries: int
    file: str
    row_groups: list[RowGroup]

    def row_group_of(self, entry_id: int) -> int:
        for k, group in enumerate(self.row_groups):
            if group.first_entry <= entry_id <= group.last_entry:
                return k
        raise StorageError(f"entry {entry_id} is not in the offloaded copy of ledger {self.ledger_id}")


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A file under the root, as the checker sees it."""

    path: str
    topic: str
    ledger_id: int | None  # None: not a ledger's file
    size: int


def topic_dir(ml_name: str) -> str:
    """The topic's directory under the root: "persistent://t/ns/x" -> "persistent/t/ns/x"."""
    domain, sep, rest = ml_name.partition("://")
    parts = [domain, *rest.split("/")] if sep else [ml_name]
    return "/".join(quote(part, safe="-_.=:") for part in parts)


def topic_of_dir(relative: str) -> str:
    parts = [unquote(p) for p in relative.split("/")]
    return f"{parts[0]}://{'/'.join(parts[1:])}" if len(parts) > 1 else parts[0]


def make_filesystem(config: OffloadConfig, data_dir: Path) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and the root path in it."""
    if config.is_s3:
        options: dict[str, Any] = {}
        if config.region:
            options["region"] = config.region
        if config.endpoint:
            options["endpoint_override"] = config.endpoint
            if config.endpoint.startswith("http://"):
                options["scheme"] = "http"
        retries = pafs.AwsStandardS3RetryStrategy(max_attempts=3)
        # Bounded waits: a store that is down fails an offload (retried at the next check) instead
        # of holding the offload's thread.
        fs = pafs.S3FileSystem(**options, retry_strategy=retries, connect_timeout=s3_connect_timeout_s,
                               request_timeout=s3_request_timeout_s)
        return fs, config.bucket
    root = config.root_dir(data_dir)
    return pafs.LocalFileSystem(), root


class OffloadStore:
    """The files of offloaded ledgers under one root (blocking: call from the offloader's threads)."""

    def __init__(self, fs: pafs.FileSystem, root: str, limits: WriteLimits, codec: EntryRows | None = None) -> None:
        self.fs = fs
        self.codec = codec  # None: the store is only listed and cleaned (the checker)
        self.root = root.rstrip("/")
        self.limits = limits

    def _dir(self, ml_name: str) -> str:
        return f"{self.root}/{topic_dir(ml_name)}"

    def parquet_path(self, ml_name: str, ledger_id: int) -> str:
        return f"{self._dir(ml_name)}/{_PREFIX}{ledger_id:020d}.parquet"

    def manifest_path(self, ml_name: str, ledger_id: int) -> str:
        return f"{self._dir(ml_name)}/{MANIFESTS}/{_PREFIX}{ledger_id:020d}.json"

    def begin(self, ml_name: str, ledger_id: int, *, partition: int) -> LedgerFileWriter:
        """Start writing the ledger's Parquet file (add entries to it, then `finish`)."""
        self.fs.create_dir(f"{self._dir(ml_name)}/{MANIFESTS}", recursive=True)
        return LedgerFileWriter(self.fs, self.parquet_path(ml_name, ledger_id), ledger_id=ledger_id, topic=ml_name,
                                partition=partition, limits=self.limits, codec=self._codec())

    def finish(self, ml_name: str, ledger_id: int, writer: LedgerFileWriter, *, size_bytes: int,
               created_ms: int) -> Manifest:
        """Close the Parquet file, then write the manifest: the offload is complete then."""
        file_bytes = writer.close()
        groups = writer.groups
        path = self.parquet_path(ml_name, ledger_id)
        count = sum(g.last_entry - g.first_entry + 1 for g in groups)
        raw = manifest_bytes(topic=ml_name, ledger_id=ledger_id, entries=count, size_bytes=size_bytes,
                             file_name=path.rpartition("/")[2], file_bytes=file_bytes, groups=groups,
                             created_ms=created_ms)
        self._put(self.manifest_path(ml_name, ledger_id), raw)
        return Manifest(ledger_id, count, path, groups)

    def _put(self, path: str, data: bytes) -> None:
        aside = path
        if isinstance(self.fs, pafs.LocalFileSystem):
            head, _, tail = path.rpartition("/")
            aside = f"{head}/.{tail}.writing"
        with self.fs.open_output_stream(aside) as out:
            out.write(data)
        if aside != path:
            self.fs.move(aside, path)

    def manifest(self, ml_name: str, ledger_id: int) -> Manifest:
        path = self.manifest_path(ml_name, ledger_id)
        try:
            with self.fs.open_input_stream(path) as source:
                doc = json.loads(source.read())
        except FileNotFoundError:
            raise StorageError(f"the offloaded copy of ledger {ledger_id} of {ml_name} has no manifest") from None
        groups = [RowGroup(int(a), int(b), int(n)) for a, b, n in doc["row_groups"]]
        return Manifest(int(doc["ledger_id"]), int(doc["entries"]), self.parquet_path(ml_name, ledger_id), groups)

    def read_group(self, manifest: Manifest, index: int) -> list[tuple[int, bytes]]:
        return read_row_group(self.fs, manifest.file, index, self._codec())

    def _codec(self) -> EntryRows:
        if self.codec is None:
            raise StorageError("offloaded ledgers cannot be written or read without an EntryRows")
        return self.codec

    def delete(self, ml_name: str, ledger_id: int) -> None:
        """Delete the ledger's files: the manifest first (the ledger stops being offloaded), then the
        Parquet file. Either may be absent already."""
        for path in (self.manifest_path(ml_name, ledger_id), self.parquet_path(ml_name, ledger_id)):
            try:
                self.fs.delete_file(path)
            except FileNotFoundError:
                pass

    def delete_topic(self, ml_name: str) -> None:
        try:
            self.fs.delete_dir(self._dir(ml_name))
        except FileNotFoundError:
            pass

    def files(self) -> list[StoredFile]:
        """Every file under the root (the checker compares them with the storage database)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, recursive=True, allow_not_found=True))
        except FileNotFoundError:
            return []
        out: list[StoredFile] = []
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            relative = info.path[len(self.root) + 1 :]
            directory, _, name = relative.rpartition("/")
            directory = directory.removesuffix(f"/{MANIFESTS}")
            ledger_id: int | None = None
            stem = name.lstrip(".").split(".")[0]
            if stem.startswith(_PREFIX) and stem[len(_PREFIX) :].isdigit():
                ledger_id = int(stem[len(_PREFIX) :])
            out.append(StoredFile(info.path, topic_of_dir(directory), ledger_id, int(info.size or 0)))
        return out
