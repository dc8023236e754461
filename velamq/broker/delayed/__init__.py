"""Delayed delivery (CO-4): entries whose deliver_at_time is ahead wait here, not at consumers.

    _tracker   DelayedDeliveryTracker: one subscription's index, its release timer and persister
    _buckets   the mutable and sealed buckets of the index (sans-IO)
    _bitmap    a compact set of the delayed positions a subscription must not read again
    _store     where a durable subscription's index is kept: a managed ledger of its own

May import: storage, protocol, tier 0. Imported by: subscription, topic, service.
"""
