"""The storage's byte layouts, each opening with its layout field by field.

    _journal_file  journal segment files, records and the checkpoint
    _entry_log     shared entry logs (many ledgers per file) and the runs that index them
    _meta_ops      metadata operations, journaled like entries

May import: storage/_layout.py, tier 0. Imported by every other part of storage.
"""
