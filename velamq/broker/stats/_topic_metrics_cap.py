"""Whether a /metrics scrape lists each loaded topic or sums them per namespace.

Pulsar's exposeTopicLevelMetricsInPrometheus (default true, as in Pulsar) asks for a series per
topic and per subscription. A topic with one subscription is about 30 series, some 3 KiB of text
and 0.2 ms of a scrape on a small machine, so at tens of thousands of loaded topics a per-topic
page would take seconds and hundreds of MiB. Above `topicLevelMetricsMaxTopics` loaded topics
(3 000 by default, 0: no cap) the scrape falls back to the namespace series (what
exposeTopicLevelMetricsInPrometheus=false gives), and says so in one log line; it lists topics
again, with one more line, once fewer are loaded. docs/admin.md ("Metrics") has the measurements.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class TopicLevelMetrics:
    """The per-topic switch of the /metrics scrape: on when configured and under the cap."""

    def __init__(self, enabled: bool, max_topics: int) -> None:
        self.enabled = enabled
        self.max_topics = max_topics
        self._over_cap = False

    def per_topic(self, loaded: int) -> bool:
        """Whether this scrape lists each of the `loaded` topics."""
        if not self.enabled:
            return False
        over = 0 < self.max_topics < loaded
        if over != self._over_cap:
            self._over_cap = over
            if over:
                log.warning(
                    "%d topics loaded, more than topicLevelMetricsMaxTopics=%d: /metrics shows namespace series "
                    "instead of per-topic ones until fewer are loaded", loaded, self.max_topics,
                )
            else:
                log.info("%d topics loaded: /metrics shows per-topic series again", loaded)
        return not over
