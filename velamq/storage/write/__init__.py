"""From a durable journal group to the entry logs: the write cache, the flusher, write health.

    _write_path      WritePath: journal groups into the write cache, halves to the flusher (loop side)
    _write_cache     the double-buffered write cache (ME-4)
    _flusher         the flusher thread: a half into the entry logs and the index, then journal trim
    _log_writer      one flush, in order: entry logs, then the index
    _publish_buffer  the broker-wide publish buffer (ME-2): appended, not yet durable
    _health          WriteHealth: whether storage writes now, and the retries after a failure

May import: journal, index, formats, storage's root leaves. Imported by: ledger, startup, gc, storage.
"""
