"""The ordered key-parallel consumer (OC-1..OC-4): order per key, keys in parallel.

    _consumer   OrderedConsumer: one per topic, a runner per partition (over OrderedClient)
    _partition  PartitionRunner: a partition's fetch loop, its workers, its acknowledgements
    _progress   what may be acknowledged (the completed prefix) and which worker runs a message
    _metrics    how parallel each partition really is

May import: consumer, the client's root leaves. Imported by: blocking, client/__init__.py.
"""
