"""What a non-persistent topic saves: the same traffic through a persistent and a non-persistent topic.

One broker (velamq.testing.run_broker, default settings: fsync before each receipt on persistent
topics); per round and per kind, a consumer subscribes, the official client's producer sends N
unbatched messages with send_async and a bounded number in flight, then the consumer receives all
of them. Prints, per kind, the median over the rounds of messages per second end to end and of the
broker's CPU (user + system of its process, all threads) per message, the ratios between the kinds,
the load average before and after, and the machine. Rounds alternate the kinds, so that load on a
shared machine falls on both alike.

    .venv/bin/python benchmarks/non_persistent.py                 # 3 rounds of 20 000 messages
    .venv/bin/python benchmarks/non_persistent.py --messages 50000 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).parent))
from _machine import machine_facts

from velamq.testing import run_broker

KINDS = ("persistent", "non-persistent")


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def process_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(client: pulsar.Client, pid: int, kind: str, messages: int, size: int) -> tuple[float, float]:
    """(messages per second end to end, broker CPU microseconds per message)."""
    topic = f"{kind}://public/default/bench-{uuid.uuid4().hex[:8]}"
    consumer = client.subscribe(topic, "bench", receiver_queue_size=messages + 1)
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True,
                                      max_pending_messages=1000)
    payload = b"x" * size
    cpu_before, started = process_cpu_s(pid), time.perf_counter()
    for _ in range(messages):
        producer.send_async(payload, None)
    producer.flush()
    for _ in range(messages):
        consumer.receive(30_000)
    elapsed, cpu = time.perf_counter() - started, process_cpu_s(pid) - cpu_before
    producer.close()
    consumer.close()
    return messages / elapsed, cpu / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load_before = load_average()
    results: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    with run_broker() as broker:
        client = pulsar.Client(broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
        for round_ in range(args.rounds):
            for kind in KINDS if round_ % 2 == 0 else reversed(KINDS):
                results[kind].append(one_run(client, broker.pid or 0, kind, args.messages, args.size))
        client.close()
    load_after = load_average()
    medians = {kind: (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
               for kind, runs in results.items()}
    print(f"{args.messages} unbatched messages of {args.size} bytes per run, median of {args.rounds} runs")
    print(f"{'topic':<16} {'msg/s end to end':>18} {'broker CPU us/msg':>18}")
    for kind, (rate, cpu) in medians.items():
        print(f"{kind:<16} {rate:>18,.0f} {cpu:>18.1f}")
    (p_rate, p_cpu), (n_rate, n_cpu) = medians["persistent"], medians["non-persistent"]
    print(f"non-persistent / persistent: {n_rate / p_rate:.2f}x the rate, {n_cpu / p_cpu:.2f}x the broker CPU")
    print(f"load average before {load_before}, after {load_after}")
    for name, value in machine_facts(["pulsar-client"]):
        print(f"{name}: {value}")


if __name__ == "__main__":
    main()
