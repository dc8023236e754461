"""How a Storage starts and stops.

    _threads     StorageThreads: the data directory's lock, the journal, flusher and GC threads
    _recovery    entry logs back to what the index committed, then journal replay
    _migrate_v1  storage format 1 (a file per ledger) migrated at start
    _ballast     the emergency ballast: space kept back so storage can start on a full disk

May import: every other part of storage. Imported by: storage/_storage.py, the checker, metrics.
"""
