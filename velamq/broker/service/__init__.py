"""The broker's table of topics and the work it does over all of them.

    _loaded_topics   LoadedTopics: loading on first use, the policies in force, unloading, deleting
    _idle_unload     IdleUnloader: topics nobody used for brokerTopicIdleUnloadSeconds unload
    _policy_tasks    the periodic TTL, retention, backlog quota and ack-hole checks
    _topic_deletion  crash-safe topic deletes (over the TopicDeleter protocol)
    _auto_create     TopicCreation: which missing topics are created on first use, and as what
    _offload_policies  TopicOffloadPolicies: each topic's offload policy, for storage's offload check

May import: topic, subscription, delayed, log and the broker's root leaves; storage, metadata.
Imported by: broker/_service.py and broker/_broker_admin.py.
"""
