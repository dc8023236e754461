"""One client connection of the binary port, and its commands.

    _listener          BrokerPorts, Listener: the plain and TLS ports, accept, connection caps
    _connection        ServerConnection: frames in, the command routing table, error replies
    _liveness          the handshake deadline, then keep-alive (PING, close when silent)
    _transport_flow    coalesced writes, water marks, why reading is paused
    _auth              CONNECT's credentials and their refresh (AUTH_CHALLENGE)
    _command_authz     which command needs which permission
    _text_fields       every string field a client sends must be UTF-8
    _context           the narrow protocols the handlers see of the broker (BrokerContext, ...)
    _topic_ports       a topic and subscription as the handlers see them, persistent or not
    _producer_commands PRODUCER, SEND, receipts
    _consumer_commands SUBSCRIBE, FLOW, ACK, SEEK, ...
    _discovery_commands LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE, schemas

May import: topic, subscription, log, guards and the broker's root leaves (_channel, _config,
_errors, _rates); protocol, security, metadata, storage. Imported by: broker/_service.py only.
"""
