"""Make docs/console.png: the console's topic page after a minute and a half of varying traffic.

    .venv/bin/python tests/browser/console_screenshot.py [docs/console.png]

Not a test (pytest does not collect it): it starts a broker, creates a few namespaces and topics,
publishes at a rate that rises and falls while two subscriptions consume, then photographs the
topic page in headless Chromium. It takes about 100 s.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pulsar
from chromium import Chromium

from velamq.testing import run_broker

TOPIC = "persistent://acme/payments/transactions"
seconds = 90


def put(url: str, body: dict[str, object] | int | None = None) -> None:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="PUT", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).read()


def main(out: Path) -> None:
    config = Path("/tmp/velamq-console-screenshot.conf")
    config.write_text("rate_history_interval_s=1\npolicy_check_interval_s=1\n")
    with run_broker(extra_args=["--config", str(config)]) as broker:
        base = broker.admin_url
        put(f"{base}/admin/v2/tenants/acme", {"allowedClusters": ["standalone"]})
        for ns in ("payments", "audit"):
            put(f"{base}/admin/v2/namespaces/acme/{ns}", {})
        for i in range(12):
            put(f"{base}/admin/v2/persistent/acme/audit/events-{i:02d}")
        put(f"{base}/admin/v2/persistent/acme/payments/refunds/partitions", 4)
        client = pulsar.Client(broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        fraud = client.subscribe(TOPIC, "fraud-check", consumer_name="fraud-check-1",
                                 consumer_type=pulsar.ConsumerType.Shared)
        ledger = client.subscribe(TOPIC, "ledger-writer", consumer_name="ledger-writer-1")
        producer = client.create_producer(TOPIC, producer_name="checkout-api", batching_enabled=False)
        stop = threading.Event()

        def consume(consumer: pulsar.Consumer, keep_up: float) -> None:
            while not stop.is_set():
                try:
                    message = consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    continue
                consumer.acknowledge(message)
                time.sleep(1 / keep_up)

        def produce() -> None:
            start = time.monotonic()
            while not stop.is_set():
                elapsed = time.monotonic() - start
                rate = 60 + 140 * (1 - abs(elapsed - seconds / 2) / (seconds / 2))  # up, then down
                producer.send_async(b'{"amount": 42}', None)
                time.sleep(1 / max(rate, 20))

        threads = [threading.Thread(target=consume, args=(fraud, 400), daemon=True),
                   threading.Thread(target=consume, args=(ledger, 90), daemon=True),
                   threading.Thread(target=produce, daemon=True)]
        for t in threads:
            t.start()
        time.sleep(seconds)  # the traffic runs on while the page is photographed
        with Chromium(width=1360, height=800) as browser:
            browser.open(f"{base}/console/topics/persistent/acme/payments/transactions")
            browser.screenshot(out)
        stop.set()
        for t in threads:
            t.join()
        client.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/console.png"))
