"""A loaded persistent topic: its managed ledger, producers and what publishing does.

    _topic           Topic: the ledger, producers, subscriptions, policies in force, compacted view
    _producer        ServerProducer; ProducerAccess (Exclusive, WaitForExclusive, fencing, epoch)
    _publish         Published: what one entry waits for, acted on when storage makes it durable
    _dedup           producer deduplication by producer name and sequence id
    _backlog_quota   the backlog quota: size, the checks at publish and producer creation, eviction
    _schemas         what the broker's commands do with a topic's schema
    _terminate       terminating a topic: producers refused, its end recorded, consumers told

May import: subscription, delayed, log and the broker's root leaves; storage, metadata, protocol.
Imported by: session, service, stats, broker/_service.py and broker/_broker_admin.py.
"""
