"""The ordered key-parallel consumer (OC-1..OC-4): order per key, keys in parallel.

    _consumer   OrderedConsumer: one per topic, a runner per partition (over OrderedClient), and
                the handler mode (async, thread, process)
    _partition  PartitionRunner: a partition's fetch loop (whole received batches), dispatch to
                its lanes, its acknowledgements
    _progress   what may be acknowledged (the completed prefix, as ranges), which lane runs a key,
                and which key a free worker may start (KeyQueue)
    _lanes      lanes that run coroutine handlers (tasks) or plain ones (bursts in a thread pool)
    _key_workers  key_assignment "free_worker": workers that share the partition's KeyQueue
                (coroutines, threads)
    _processes  lanes run by handler processes: ProcessPool, restarts, results per message
    _child      the handler process itself (a standard-library script)
    _failures   retry with backoff, dead letters (RetryPolicy, Failures)
    _metrics    how parallel each partition really is
    _official   the official client's pulsar.Client as the transport (imports pulsar only when used)

May import: consumer, the client's root leaves, protocol (_official builds MessageColumns).
Imported by: blocking, client/__init__.py.
"""
