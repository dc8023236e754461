"""The pipeline's input: click events produced to a topic with velamq's client (SP-6).

Each event is a JSON payload {"user", "page", "amount"} keyed by user, with its event time set on
the message (the source's `eventTime` column). Event times are spread evenly over a simulated span
(several minutes of clicks produced in a few seconds), so a short run fills many windows. A last
event on the page "__end__", two minutes later, moves the job's watermark past every real window
so that all of them are emitted (the job drops that page after aggregating).
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass

from velamq.client import Client

END_PAGE = "__end__"
PAGES = ("/", "/search", "/product", "/cart", "/checkout")
window_ms = 60_000


@dataclass(frozen=True, slots=True)
class Expected:
    """What the windowed aggregation must find: per (window start ms, page) the count and amount."""

    totals: dict[tuple[int, str], tuple[int, float]]
    events: int


def produce_events(service_url: str, topic: str, events: int, span_ms: int = 5 * window_ms,
                   seed: int = 7) -> Expected:
    rng = random.Random(seed)
    start_ms = 1_767_225_600_000  # 2026-01-01T00:00:00Z: whole minutes, the same windows on every run
    totals: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0, 0.0])
    with Client(service_url) as client:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=500,
                                          block_if_queue_full=True, max_pending_messages=5000)
        futures = []
        for i in range(events):
            event_ms = start_ms + i * span_ms // events
            event = {"user": f"u{rng.randrange(200)}", "page": rng.choice(PAGES),
                     "amount": round(rng.uniform(1, 100), 2)}
            futures.append(producer.send_async(json.dumps(event).encode(), key=event["user"], event_time=event_ms))
            bucket = totals[(event_ms - event_ms % window_ms, str(event["page"]))]
            bucket[0] += 1
            bucket[1] += float(event["amount"])
        end = {"user": "-", "page": END_PAGE, "amount": 0.0}
        futures.append(producer.send_async(json.dumps(end).encode(), key="-", event_time=start_ms + span_ms + 120_000))
        for future in futures:
            future.result(60)
        producer.close()
    return Expected({k: (int(v[0]), round(v[1], 2)) for k, v in totals.items()}, events)
