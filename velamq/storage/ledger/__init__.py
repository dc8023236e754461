"""Managed ledgers (one topic's log, a list of ledgers) and their cursors.

    _managed_ledger      ManagedLedger: appends, reads, cursors, close
    _list                the list of ledgers and the questions about the log's shape
    _rollover            the current ledger and its rollover
    _read_path           tail cache, write cache, read cache, entry log
    _trim                retention: which ledgers a trim may delete
    _offloaded           marking a ledger offloaded, deleting its local copy (_context.OffloadedCopies:
                         its reads once that copy is gone; velamq/storage/offload implements it)
    _cursor              ManagedCursor: mark-delete position, acked ranges, batch ack sets (BR-2)
    _cursor_persistence  cursors persisted at a bounded rate and on close
    _directory           LedgerDirectory: managed ledgers by name, lookups, listing, deletion

May import: write, journal, index, formats, storage's root leaves. Imported by: startup, storage.
"""
