"""Non-persistent topics: in memory only, nothing written to storage (Pulsar's NonPersistentTopic).

    _table         NonPersistentTopics: the loaded ones by name; loading (their metadata row, by
                   the same rules as a persistent topic's), dropping idle ones, deleting, rates
    _topic         NonPersistentTopic: producers, access modes, subscriptions; publish_with hands
                   an entry to every subscription and answers the producer in the same call
    _subscription  NonPersistentSubscription: the consumers attached now and the rule that picks
                   one per entry; what no consumer can take is dropped and counted (msgDropRate)
    _stats         NonPersistentTopicStats (TopicStats plus the drop rates) and TopicMetrics
    _admin         the admin operations on one: internal stats, subscriptions listed, made, deleted

A non-persistent topic has no managed ledger, cursor or deduplication state: not the journal, not
an entry log. It meets the command handlers through the same narrow protocols as the persistent
Topic (session/_topic_ports.py: CommandTopic, PublishingTopic, ConsumerSubscription), so the
session code has one path for both kinds.

May import: topic (ServerProducer, ProducerAccess, Published), subscription (ServerConsumer,
ConsumerSelector), log (EntryInfo), stats (the records) and the broker's root leaves; metadata,
protocol, storage (Position only). Imported by: broker/_service.py and broker/_broker_admin.py.
"""
