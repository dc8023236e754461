"""The blocking facade (PR-10): the same client with plain methods, on its own loop thread.

    _loop      ClientLoop: the event-loop thread every blocking object runs its calls on
    _client    Client and BlockingProducer
    _consumer  BlockingConsumer and BlockingReader (a local prefetch, acks handed over)
    _ordered   BlockingOrderedConsumer

May import: client/_client.py, producer, consumer, ordered, the client's root leaves.
Imported by: client/__init__.py only.
"""
