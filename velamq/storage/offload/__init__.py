"""Tiered storage: sealed ledgers offloaded as Parquet files to a filesystem or an S3 bucket, and
read back as if they were local (docs/offload.md). OffloadConfig itself is in storage/_config.py.

    _status      OffloadStatus (a topic's offload as the admin API shows it), OffloadFinding,
                 OffloadPolicy (a topic's thresholds and lag) and PolicySource (the broker's, per topic)
    _select      which ledgers of a topic are due under its policy (pure; open or stored ledgers)
    _codec       the rows' columns, and EntryRows: what makes rows of entries and entries of rows
                 (storage never reads the entry format; the broker hands its own to Storage)
    _parquet     the Arrow schema; writing a ledger's file, reading a row group, the manifest
    _store       OffloadStore: the layout under the root, through a pyarrow filesystem (blocking)
    _reads       OffloadedReader: reads of offloaded ledgers by row group, deleting their files
    _offloader   Offloader: offloads (asked or due), deletes local copies after the lag; its check
                 walks open topics, then stored ones a page at a time, borrowing only those with work
    _service     OffloadService: the above and their threads, as Storage builds it
    _check       the storage checker's findings among offloaded files

_status, _select and _codec import nothing optional; the rest needs pyarrow, an optional dependency:
Storage imports them only when offloading is configured, and says clearly when pyarrow is missing.

May import: ledger, index, formats, storage's root leaves, tier 0. Imported by: storage/_storage.py,
the checker, storage/__init__.py (OffloadStatus, OffloadPolicy, PolicySource, EntryRows, RowColumns).
"""
