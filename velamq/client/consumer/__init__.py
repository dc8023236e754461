"""Consumers and readers: from a MESSAGE frame to an acknowledgement.

    _consumer         Consumer: one subscription over one or many topic partitions
    _topic_consumer   TopicConsumer: one partition's consumer state machine
    _intake           a MESSAGE becomes a ReceivedBatch for the receiver queue
    _receiver_queue   received entries waiting for the application
    _routing          where per-message operations go (the TopicConsumer of a message)
    _acks             what happens after delivery: ack, nack, ack timeout
    _ack_grouping     acknowledgements grouped, and acks of messages inside batches
    _ack_commands     ACK, ACK with a receipt, REDELIVER
    _redelivery       asking the broker to deliver again
    _dead_letter      publishing to the dead-letter topic
    _reader           Reader: a non-durable exclusive subscription from a chosen message id

May import: producer (dead letters), transport, schema, the client's root leaves, protocol.
Imported by: ordered, blocking, client/_client.py.
"""
