"""Geo-replication (tier 3): each topic of a replicating namespace copied to other clusters, with
this broker acting as a Pulsar client toward them (velamq or Apache Pulsar alike). docs/replication.md.

    service = ReplicationService(broker, metadata, config.cluster_name)   # server.py builds it
    await service.start()      # after the broker: loads the topics of replicating namespaces
    service.topic_stats(topic) # {remote: ReplicatorStats}: TopicStats.replication
    await service.close()      # before the broker

    _service      ReplicationService: which topics replicate where; starts and stops replicators
    _replicator   Replicator: one topic toward one remote (cursor, in-flight window, receipts)
    _subscriptions  ReplicatedSubscriptions: a topic's replicated subscriptions (snapshots, updates)
    _markers      Pulsar's replicated-subscription markers 10-13 (sans-IO)
    _entries      what is sent (replicated_from, replicate_to, markers) and the entry rebuilt (sans-IO)
    _clusters     RemoteCluster: a registered cluster's URL, TLS and credentials

May import: broker (its public API and the topic it is handed), client (public API), storage,
metadata, protocol. Imported by: velamq/server.py only.
"""

from velamq.replication._replicator import ReplicatorStats
from velamq.replication._service import ReplicationService

__all__ = ["ReplicationService", "ReplicatorStats"]
