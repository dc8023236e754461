"""A topic's log as the broker reads it: what an entry says, where a cursor goes, the compacted view.

    _entry_info   EntryInfo: what dispatch needs of an entry's MessageMetadata, and nothing more
    _positions    mark-delete positions for seeks, resets and non-durable starts; the last message
    _compaction   topic compaction: the latest value per key, for read_compacted readers
    _offload_rows PulsarEntryRows: entries as offloaded rows (one per message) and back, byte for
                  byte (storage's EntryRows; docs/offload.md)

May import: storage, protocol, tier 0. Imported by: subscription, topic, session, service,
broker/_broker_admin.py.
"""
