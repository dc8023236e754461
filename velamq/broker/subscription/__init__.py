"""A subscription: a cursor over its topic's log, the consumers that read through it, dispatch.

    _subscription  Subscription: attaching and removing consumers, seek / reset, figures
    _state         SubscriptionState: the attributes the parts below share
    _dispatch      Dispatcher: the dispatch task (replay set first, then new entries)
    _acks          Acknowledgements: individual, cumulative, batch-index acks; nacks; FLOW permits
    _consumer      ServerConsumer: one consumer over one connection, its permits and unacked entries
    _selector      which consumer gets an entry, by subscription type
    _key_shared    Key_Shared hash ranges (auto-split and sticky)
    _chunk_owners  all chunks of a message to one consumer on Shared and Key_Shared
    _in_flight     entries between dispatch and acknowledgement
    _end_of_topic  REACHED_END_OF_TOPIC once a terminated topic's subscription consumed it all

May import: delayed, log and the broker's root leaves (_channel, _rates, _errors); storage,
protocol. Imported by: topic, session, service, stats, broker/_broker_admin.py.
"""
