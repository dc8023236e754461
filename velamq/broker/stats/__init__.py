"""Figures of the broker as records the admin tier renders (it never sees a live object).

    _records           the stats records: TopicStats, SubscriptionStats, BrokerMetrics, ...
    _topic_stats       a loaded topic's figures as those records
    _metrics_snapshot  the /metrics scrape: loaded topics per namespace or one by one
    _rate_history      the console's msg/s history in bounded rings
    _topic_metrics_cap per-topic /metrics series, or namespace ones above topicLevelMetricsMaxTopics

May import: topic, subscription and the broker's root leaves. Imported by: broker/_service.py,
broker/_broker_admin.py.
"""
