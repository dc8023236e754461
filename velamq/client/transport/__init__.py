"""How the client reaches brokers: connections, the pool, discovery and reconnecting.

    _connection    Connection: one TCP (or TLS) connection, handshake, request/response, keep-alive
    _pool          ConnectionPool: one connection per (logical URL, physical address)
    _lookup        binary-protocol discovery: partitioned metadata, lookups with redirects
    _http_lookup   discovery over the admin REST API for http(s):// service URLs
    _live_topics   LiveTopics: the topics with a connected producer or consumer of the client, and
                   their connection: a producer next to a consumer asks no PARTITIONED_METADATA
                   or LOOKUP
    _failover      ServiceInfo, ServiceInfoProvider, AutoClusterFailover: which cluster the client
                   uses, and when it moves to another (the client then calls switch_cluster on the
                   pool and cluster_switched on every handler)
    _controlled_failover  ControlledClusterFailover: the cluster an operator's HTTP endpoint names
    _handler       ConnectionHandler (what producers and consumers share: finding their broker,
                   reconnecting with back-off); ClientContext and ClientOwner, what a child may ask
                   of its client

May import: security, the client's root leaves (_config, _errors, _admin_client), protocol.
Imported by: producer, consumer, client/_client.py.
"""
