"""How long producers stall when the primary cluster dies, with the official client's
AutoClusterFailover and with velamq's own (RP-8, RP-11), side by side.

Two velamq nodes (not linked: only the client's switch is measured). One producer sends without
pause, one message at a time, waiting for each receipt; the primary is killed with SIGKILL; the
stall is the time from the kill to the first receipt after it (the message in flight at the kill is
resent to the secondary, so it is that message's receipt). Both clients probe every
--check-interval-ms ms and switch after one failed probe, so the stall is about one interval plus
the reconnect. Each figure is the median of --runs runs, each with a fresh pair of brokers.

    python benchmarks/client_failover.py                  # ~1 min on 2 cores
    python benchmarks/client_failover.py --check-interval-ms 1000 --runs 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar
from _machine import machine_facts

from velamq import client as velamq_client
from velamq.testing import BrokerProcess


class _Load:
    """One producer sending in a loop; the time of each receipt."""

    def __init__(self, send: Callable[[bytes], Any]) -> None:
        self.receipts: list[float] = []
        self._send = send
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self._send(f"m-{i}".encode())
                self.receipts.append(time.monotonic())
            except Exception:  # a failed send: not a receipt
                pass
            i += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def _official(primary: str, secondary: str, interval_ms: int) -> tuple[Any, Callable[[bytes], Any], Callable[[], str]]:
    client = pulsar.Client(pulsar.AutoClusterFailover(
        pulsar.ServiceInfo(primary), [pulsar.ServiceInfo(secondary)], check_interval_ms=interval_ms,
        failover_threshold=1, switch_back_threshold=1_000_000), operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(f"persistent://public/default/fo-{uuid.uuid4().hex[:8]}",
                                      send_timeout_millis=30_000, batching_enabled=False)
    return client, producer.send, lambda: str(client.get_service_info().service_url)


def _velamq(primary: str, secondary: str, interval_ms: int) -> tuple[Any, Callable[[bytes], Any], Callable[[], str]]:
    failover = velamq_client.AutoClusterFailover(
        velamq_client.ServiceInfo(primary), [velamq_client.ServiceInfo(secondary)], check_interval_ms=interval_ms,
        failover_threshold=1, switch_back_threshold=1_000_000)
    client = velamq_client.Client(failover, initial_backoff_s=0.1, max_backoff_s=1.0)
    producer = client.create_producer(f"persistent://public/default/fo-{uuid.uuid4().hex[:8]}", send_timeout_ms=30_000)
    return client, producer.send, lambda: client.get_service_info().service_url


def _stall(make: Callable[[str, str, int], Any], interval_ms: int) -> float:
    root = Path(tempfile.mkdtemp(prefix="velamq-client-failover-"))
    primary, secondary = (BrokerProcess(root / name, ["--cluster-name", name]) for name in ("east", "west"))
    try:
        primary.start()
        secondary.start()
        client, send, current = make(primary.service_url, secondary.service_url, interval_ms)
        load = _Load(send)
        while len(load.receipts) < 200:
            time.sleep(0.01)
        killed_at = time.monotonic()
        primary.kill()
        while not load.receipts or load.receipts[-1] <= killed_at or current() != secondary.service_url:
            time.sleep(0.01)
            if time.monotonic() - killed_at > 60:
                raise RuntimeError("no receipt from the secondary within 60 s")
        load.stop()
        stall = next(t for t in load.receipts if t > killed_at) - killed_at
        client.close()
        return stall
    finally:
        primary.kill()
        secondary.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check-interval-ms", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for name, make in (("official client (pulsar-client)", _official), ("velamq.client", _velamq)):
        stalls = [_stall(make, args.check_interval_ms) for _ in range(args.runs)]
        rows.append((name, statistics.median(stalls), min(stalls), max(stalls)))
    for fact, value in machine_facts(["pulsar-client"]):
        print(f"{fact}: {value}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"\ncheck interval {args.check_interval_ms} ms, failover after 1 failed probe; {args.runs} runs\n")
    print("| client | producer stall after kill -9, median ms | min | max |")
    print("|---|---|---|---|")
    for name, median, low, high in rows:
        print(f"| {name} | {median * 1000:.0f} | {low * 1000:.0f} | {high * 1000:.0f} |")


if __name__ == "__main__":
    main()
