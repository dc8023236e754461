"""The garbage collector: space of deleted and trimmed ledgers comes back (BookKeeper's GC).

    _collector  the GC thread: minor and major compaction of sparse entry logs
    _schedule   when it runs (the loop side)

May import: write, index, formats, storage's root leaves. Imported by: startup, storage.
"""
