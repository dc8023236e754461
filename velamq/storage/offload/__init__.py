"""Tiered storage: sealed ledgers offloaded as Parquet files to a filesystem or an S3 bucket, and
read back as if they were local (docs/offload.md).

    _config      OffloadConfig: the driver (filesystem, aws-s3), where, the threshold, the lag
    _status      OffloadStatus: a topic's offload as the admin API shows it (NOT_RUN, RUNNING, ...)
    _rows        stored entries as rows, one per message, and back to the exact stored bytes
    _parquet     the Arrow schema; writing a ledger's file, reading a row group, the manifest
    _store       OffloadStore: the layout under the root, through a pyarrow filesystem (blocking)
    _offloader   Offloader: offloads (asked or past the threshold), deletes local copies after the
                 lag and offloaded copies after retention, serves reads of offloaded ledgers

_config and _status import nothing optional; the rest needs pyarrow, which is an optional
dependency: Storage imports them only when offloading is configured, and says so clearly when
pyarrow is missing. _rows is the one module of storage that reads the Pulsar entry format (through
velamq.protocol, which is sans-IO).

May import: ledger (its public side), storage's root leaves, velamq.protocol, tier 0. Imported by:
storage/_storage.py, the checker.
"""
