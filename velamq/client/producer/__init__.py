"""The producer pipeline (PR-1..PR-11): from send() to the receipt.

    _producer         Producer: the producer the application holds, over one or many partitions
    _partition        PartitionProducer: one partition's send path and connection
    _send_ops         the SEND ops of a partition producer (batches and single messages)
    _pending          the pending queue: sends written and waiting for their receipts
    _backpressure     pending-message permits and the client-wide memory limit
    _batch_container  message metadata and the batch container (sans-IO)
    _bulk_send        send_many: one future for many messages
    _routing          choosing the partition of a message, as the official clients do
    _boost_hash       the key hashes the official clients route by
    _interceptors     producer interceptors
    _entry_producer   EntryProducer: entries already built, sent as they are (a geo-replicator's)

May import: transport, schema, the client's root leaves (_config, _errors, _message, _arrow),
protocol. Imported by: consumer (dead letters), blocking, client/_client.py.
"""
