"""storage.db (SQLite in WAL mode): the entry index and storage metadata.

    _storage_db  StorageDb: one connection and its queries
    _changes     metadata operations applied in journal order, deletions, orphan checks
    _db_reader   the loop's way to the database (queries in the storage's I/O threads)

May import: formats, storage's root leaves. Imported by: write, ledger, startup, gc.
"""
