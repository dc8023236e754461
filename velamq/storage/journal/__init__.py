"""The journal thread: one write-ahead log for every topic, group commit (ME-6).

    _journal  Journal: one queue, a write and a sync per group, a failed write fails its group only
    _segment  the current segment file as the thread writes it: create, write, sync, cut back, roll

May import: formats, storage's root leaves. Imported by: write, ledger, startup, storage metrics.
"""
