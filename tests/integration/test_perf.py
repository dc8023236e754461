"""`velamq perf` as an operator runs it: a subprocess against a real broker, short runs (OP-4, OT-1).

Each run prints JSON lines (--json); the test checks counts against what the broker holds (read
back with the official client, or the subscription's backlog from the admin API), that the latency
percentiles are all there and ordered, that --rate holds within 10 % by the tool's own count over
its own elapsed time, and that --processes 2 merges the two processes' figures.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from typing import Any

import pulsar
import pytest
from wait_helpers import wait_until

from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(240)

run_timeout_s = 180
LATENCY_KEYS = ("p50", "p95", "p99", "p99.9", "max")


def perf(broker: BrokerProcess, *argv: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run `velamq perf ... --json`; (interval objects, summary object). Fails on a non-zero exit."""
    done = subprocess.run(
        [sys.executable, "-m", "velamq", "perf", *argv, "-u", broker.service_url, "--json"],
        capture_output=True, text=True, timeout=run_timeout_s,
    )
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    objects = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    *intervals, summary = objects
    assert summary["type"] == "summary" and all(o["type"] == "interval" for o in intervals)
    assert "errors" not in summary, summary
    return intervals, summary


def assert_latency_ordered(latency: dict[str, Any], count: int) -> None:
    assert latency["count"] == count
    values = [latency[key] for key in LATENCY_KEYS]
    assert all(v > 0 for v in values), latency
    assert values == sorted(values), latency


def stored_count(client: Any, topic: str) -> int:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    n = 0
    while reader.has_message_available():
        reader.read_next(10_000)
        n += 1
    reader.close()
    return n


def subscription_backlog(broker: BrokerProcess, topic: str, subscription: str) -> int:
    url = f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/stats"
    with urllib.request.urlopen(url, timeout=30) as response:
        return int(json.loads(response.read())["subscriptions"][subscription]["msgBacklog"])


def test_produce_n_messages_stores_n(broker: BrokerProcess, client: Any, topic: str) -> None:
    intervals, summary = perf(broker, "produce", "-r", "0", "-m", "3000", "-s", "200", "-i", "1", topic)
    assert summary["produced"] == {**summary["produced"], "messages": 3000, "bytes": 600_000, "failed": 0}
    assert_latency_ordered(summary["publish_latency_ms"], 3000)
    assert sum(i["produced"]["messages"] for i in intervals) <= 3000
    assert stored_count(client, topic) == 3000


def test_consume_counts_what_was_produced_and_acknowledges_it(broker: BrokerProcess, client: Any,
                                                              topic: str) -> None:
    # The subscription exists before anything is produced, so every message is in its backlog.
    client.subscribe(topic, "perf-sub", initial_position=pulsar.InitialPosition.Earliest).close()
    _, produced = perf(broker, "produce", "-r", "0", "-m", "2500", "-db", "-i", "0", topic)
    assert produced["produced"]["messages"] == 2500
    _, consumed = perf(broker, "consume", "-ss", "perf-sub", "-m", "2500", "-i", "0", topic)
    assert consumed["consumed"]["messages"] == 2500
    assert consumed["consumed"]["bytes"] == 2500 * 1024
    # Publish time -> receive: the messages waited in the backlog, so this is large, but present.
    assert_latency_ordered(consumed["end_to_end_latency_ms"], 2500)
    wait_until(lambda: subscription_backlog(broker, topic, "perf-sub") == 0, "the consumed backlog acknowledged")


def test_consume_for_a_duration_on_an_empty_topic_ends_with_nothing(broker: BrokerProcess, topic: str) -> None:
    _, summary = perf(broker, "consume", "-time", "1", "-i", "0", topic)
    assert summary["consumed"]["messages"] == 0
    assert summary["end_to_end_latency_ms"]["count"] == 0


def test_rate_holds_within_ten_percent(broker: BrokerProcess, topic: str) -> None:
    intervals, summary = perf(broker, "produce", "-r", "500", "-time", "3", "-i", "1", "-s", "100", topic)
    achieved = summary["produced"]["messages"] / summary["elapsed_s"]
    assert 450 <= achieved <= 550, summary
    assert summary["produced"]["msg_per_s"] == pytest.approx(achieved, rel=1e-3)
    assert intervals, "no live line in a 3 s run with -i 1"
    for line in intervals:
        assert_latency_ordered(line["publish_latency_ms"], line["produced"]["messages"])


def test_end_to_end_receives_everything_with_ordered_latencies(broker: BrokerProcess, topic: str) -> None:
    _, summary = perf(broker, "end-to-end", "-r", "0", "-m", "3000", "-s", "64", "-i", "1", topic)
    assert summary["produced"]["messages"] == summary["consumed"]["messages"] == 3000
    assert_latency_ordered(summary["publish_latency_ms"], 3000)
    assert_latency_ordered(summary["end_to_end_latency_ms"], 3000)


def test_end_to_end_across_two_processes(broker: BrokerProcess, topic: str) -> None:
    # One producer (process 0) and two Shared consumers (one per process): messages sent by one
    # process are received by both, and the coordinator ends the run once all arrived.
    _, summary = perf(broker, "end-to-end", "-n", "1", "-nc", "2", "-st", "Shared", "--processes", "2", "-r", "0",
                      "-m", "3000", "-s", "64", "-i", "1", topic)
    assert summary["produced"]["messages"] == summary["consumed"]["messages"] == 3000
    assert [p["sent"] for p in summary["per_process"]] == [3000, 0]
    assert sum(p["received"] for p in summary["per_process"]) == 3000
    assert_latency_ordered(summary["end_to_end_latency_ms"], 3000)


def test_two_processes_share_the_work_and_merge_their_figures(broker: BrokerProcess, client: Any,
                                                              topic: str) -> None:
    client.subscribe(topic, "shared-sub", consumer_type=pulsar.ConsumerType.Shared,
                     initial_position=pulsar.InitialPosition.Earliest).close()
    _, produced = perf(broker, "produce", "-n", "2", "--processes", "2", "-r", "0", "-m", "4000", "-i", "1", topic)
    assert produced["processes"] == 2
    assert [p["sent"] for p in produced["per_process"]] == [2000, 2000]
    assert produced["produced"]["messages"] == 4000
    # The run's rate is all messages over the run's time (elapsed_s is rounded to the millisecond).
    elapsed = produced["elapsed_s"]
    assert produced["produced"]["msg_per_s"] == pytest.approx(4000 / elapsed, abs=4000 * 0.0005 / elapsed**2 + 0.1)
    # One histogram holding both processes' samples, not an average of two sets of percentiles.
    assert_latency_ordered(produced["publish_latency_ms"], 4000)
    assert stored_count(client, topic) == 4000

    _, consumed = perf(broker, "consume", "-n", "2", "-st", "Shared", "-ss", "shared-sub", "--processes", "2",
                       "-m", "4000", "-i", "1", topic)
    assert consumed["consumed"]["messages"] == 4000
    assert sum(p["received"] for p in consumed["per_process"]) == 4000
    assert_latency_ordered(consumed["end_to_end_latency_ms"], 4000)


def test_bad_flags_exit_2_with_the_reason(broker: BrokerProcess, topic: str) -> None:
    done = subprocess.run([sys.executable, "-m", "velamq", "perf", "consume", "-n", "2", "-u", broker.service_url,
                           topic], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "Exclusive" in done.stderr


@pytest.mark.parametrize("processes", [1, 2])
def test_ctrl_c_ends_the_run_with_a_summary(broker: BrokerProcess, topic: str, processes: int) -> None:
    # As in a terminal: SIGINT reaches the whole process group, the workers included.
    proc = subprocess.Popen(
        [sys.executable, "-m", "velamq", "perf", "produce", "-u", broker.service_url, "--json", "-r", "200",
         "-i", "0.5", "-n", str(processes), "--processes", str(processes), topic],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())  # blocks until the first live line
        assert first["type"] == "interval"
        os.killpg(proc.pid, signal.SIGINT)
        rest, stderr = proc.communicate(timeout=run_timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = json.loads(rest.splitlines()[-1])
    assert proc.returncode == 0, stderr
    assert summary["type"] == "summary" and "errors" not in summary
    assert summary["produced"]["messages"] >= first["produced"]["messages"] > 0
    assert_latency_ordered(summary["publish_latency_ms"], summary["produced"]["messages"])


def msg_in_counter(broker: BrokerProcess, topic: str) -> int:
    url = f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/stats"
    with urllib.request.urlopen(url, timeout=30) as response:
        return int(json.loads(response.read())["msgInCounter"])


@pytest.mark.parametrize("processes", [1, 3])
def test_lean_produce_counts_match_the_topics_msg_in_counter(broker: BrokerProcess, client: Any, topic: str,
                                                             processes: int) -> None:
    _, summary = perf(broker, "produce", "--lean", "-db", "-n", str(processes), "--processes", str(processes),
                      "-r", "0", "-m", "9001", "-s", "100", "-i", "1", topic)
    assert summary["produced"] == {**summary["produced"], "messages": 9001, "bytes": 900_100, "failed": 0}
    assert [p["sent"] for p in summary["per_process"]] == [9001 // processes + (i < 9001 % processes)
                                                           for i in range(processes)]
    assert_latency_ordered(summary["publish_latency_ms"], 9001)
    assert msg_in_counter(broker, topic) == 9001
    assert stored_count(client, topic) == 9001  # the official client reads every lean message back


def test_lean_produce_batched_entries(broker: BrokerProcess, client: Any, topic: str) -> None:
    _, summary = perf(broker, "produce", "--lean", "-bm", "50", "-r", "0", "-m", "5000", "-s", "64", "-i", "0", topic)
    assert summary["produced"]["messages"] == 5000
    assert_latency_ordered(summary["publish_latency_ms"], 5000)
    assert msg_in_counter(broker, topic) == 5000
    assert stored_count(client, topic) == 5000


def test_lean_produce_refuses_what_it_cannot_build(broker: BrokerProcess, topic: str) -> None:
    for flags, reason in ((["-z", "lz4"], "compression"), (["-np", "2"], "partitioned"),
                          (["--tuned"], "--tuned")):
        done = subprocess.run([sys.executable, "-m", "velamq", "perf", "produce", "--lean", *flags,
                               "-u", broker.service_url, topic], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert reason in done.stderr


def test_lean_produce_ends_with_the_in_flight_sends_failed_when_the_broker_dies(topic: str) -> None:
    with run_broker() as own:
        proc = subprocess.Popen(
            [sys.executable, "-m", "velamq", "perf", "produce", "--lean", "-db", "-r", "0", "-time", "120",
             "-i", "0.5", "-u", own.service_url, "--json", topic],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            assert proc.stdout is not None
            first = json.loads(proc.stdout.readline())  # sending is under way
            assert first["type"] == "interval"
            own.kill()
            rest, stderr = proc.communicate(timeout=run_timeout_s)  # ends: no hang on the lost receipts
        finally:
            if proc.poll() is None:
                proc.kill()
    summary = json.loads(rest.splitlines()[-1])
    assert summary["type"] == "summary", stderr
    # At -r 0 the window is never empty: what was in flight when the connection broke failed.
    assert summary["produced"]["failed"] > 0
    assert summary["elapsed_s"] < 120
