"""velamq perf's flags become per-process plans; the coordinator merges the processes' reports."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from velamq.cli._main import build_parser
from velamq.cli._perf import build_plans, shares
from velamq.cli._perf_report import Aggregator, RunShape
from velamq.cli._perf_stats import LatencyHistogram, PerfError


def parse(*argv: str) -> Any:
    return build_parser().parse_args(["perf", *argv])


def test_pulsar_perf_flags_parse() -> None:
    args = parse("produce", "-u", "pulsar://h:6650", "-t", "3", "-n", "2", "-r", "0", "-s", "100", "-m", "10",
                 "-time", "5", "-bm", "50", "-bb", "65536", "-b", "5", "-z", "LZ4", "-o", "200", "-i", "1", "tp")
    plans, _, shape = build_plans(args)
    assert args.test_duration == 5 and args.num_topics == 3 and args.interval == 1
    assert shape.topics == 3 and shape.producers == 6
    (plan,) = plans
    assert plan.producer_topics == ("tp-0", "tp-0", "tp-1", "tp-1", "tp-2", "tp-2")
    assert plan.producer_options == {
        "batching_enabled": True, "batching_max_messages": 50, "batching_max_bytes": 65536,
        "batching_max_publish_delay_ms": 5, "max_pending_messages": 200,
        "max_pending_messages_across_partitions": 50_000, "block_if_queue_full": True, "compression_type": "lz4",
        "send_timeout_ms": 30_000,
    }
    assert plan.rate == 0 and plan.messages == 10 and plan.duration_s == 5


def test_processes_share_producers_rate_and_messages() -> None:
    args = parse("produce", "-n", "3", "-r", "900", "-m", "10", "--processes", "3", "-db", "t")
    plans, _, _ = build_plans(args)
    assert [p.producer_topics for p in plans] == [("t",), ("t",), ("t",)]
    assert [p.messages for p in plans] == [4, 3, 3]
    assert [p.rate for p in plans] == [300, 300, 300]
    assert all(p.producer_options["batching_enabled"] is False for p in plans)


def test_consume_subscriptions_and_the_coordinators_target() -> None:
    args = parse("consume", "-ns", "2", "-ss", "s", "-st", "Shared", "-n", "2", "-m", "100", "--processes", "2",
                 "-sp", "Earliest", "t")
    plans, rule, shape = build_plans(args)
    assert shape.consumers == 4
    assert plans[0].subscriptions == (("t", "s-0"), ("t", "s-1"))
    assert plans[1].subscriptions == (("t", "s-0"), ("t", "s-1"))
    assert plans[0].consumer_options["subscription_type"] == "shared"
    assert plans[0].consumer_options["initial_position"] == "earliest"
    # Several processes cannot each count to -m: the coordinator stops the run on the total.
    assert [p.consume_messages for p in plans] == [0, 0]
    assert not rule.complete(0, 99, True) and rule.complete(0, 100, True)


def test_end_to_end_waits_for_every_subscription_to_get_every_message() -> None:
    args = parse("end-to-end", "-ss", "a,b", "-ns", "2", "-nc", "1", "-m", "50", "t")
    plans, rule, shape = build_plans(args)
    assert plans[0].stamped and shape.producers == 1 and shape.consumers == 2
    assert not rule.complete(50, 99, True)
    assert not rule.complete(50, 100, False)
    assert rule.complete(50, 100, True)


@pytest.mark.parametrize(("argv", "message"), [
    (("consume", "-n", "2", "t"), "Exclusive"),
    (("produce", "-t", "2", "a", "b", "c"), "must equal -t"),
    (("produce", "--processes", "2", "t"), "--processes 2 needs"),
    (("produce", "-r", "-1", "t"), "cannot be negative"),
    (("produce", "--tuned", "-db", "t"), "--tuned"),
    (("consume", "-ns", "3", "-ss", "a,b", "t"), "subscription names"),
])
def test_bad_flags_are_refused_with_a_reason(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(PerfError, match=message):
        build_plans(parse(*argv))


def interval(worker: int, index: int, sent: int, latencies_us: list[int], pending: int = 0) -> dict[str, Any]:
    h = LatencyHistogram()
    for v in latencies_us:
        h.record_us(v)
    return {"kind": "interval", "worker": worker, "index": index, "start_s": index - 1.0, "end_s": float(index),
            "counts": {"sent": sent, "sent_bytes": sent * 100, "failed": 0, "received": 0, "received_bytes": 0},
            "pending": pending, "latency": h.encode(), "e2e": LatencyHistogram().encode()}


def test_an_interval_is_printed_once_every_running_process_reported_it() -> None:
    out = io.StringIO()
    shape = RunShape("produce", topics=1, producers=2, consumers=0, processes=2, interval_s=1.0)
    aggregator = Aggregator(shape, out, as_json=True)
    aggregator.accept(interval(0, 1, 100, [1000] * 99 + [9000], pending=3))
    aggregator.accept(interval(0, 2, 100, [1000] * 100))
    assert out.getvalue() == ""  # process 1 has not reported interval 1 yet
    aggregator.accept(interval(1, 1, 300, [2000] * 300, pending=4))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 1
    first = lines[0]
    assert first["interval"] == 1 and first["pending"] == 7
    assert first["produced"]["messages"] == 400 and first["produced"]["msg_per_s"] == 400
    latency = first["publish_latency_ms"]
    assert latency["count"] == 400
    assert latency["p50"] == pytest.approx(2.0, rel=1e-3)  # 300 of the 400 took 2 ms
    assert latency["max"] == pytest.approx(9.0, rel=1e-3)
    # Process 1 finishes without an interval 2: interval 2 is printed from process 0 alone.
    aggregator.accept({"kind": "final", "worker": 1, "elapsed_s": 1.5,
                       "counts": {"sent": 300, "sent_bytes": 30_000, "failed": 0, "received": 0, "received_bytes": 0},
                       "latency": LatencyHistogram().encode(), "e2e": LatencyHistogram().encode()})
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["interval"] for line in lines] == [1, 2]
    assert lines[1]["produced"]["messages"] == 100


def test_the_summary_merges_every_process_and_says_what_each_did() -> None:
    shape = RunShape("produce", topics=1, producers=2, consumers=0, processes=2, interval_s=0)
    aggregator = Aggregator(shape, io.StringIO(), as_json=True)
    for worker, (sent, value, elapsed) in enumerate(((1000, 1000, 1.0), (3000, 4000, 2.0))):
        h = LatencyHistogram()
        for _ in range(sent):
            h.record_us(value)
        aggregator.accept({"kind": "final", "worker": worker, "elapsed_s": elapsed,
                           "counts": {"sent": sent, "sent_bytes": sent, "failed": 0, "received": 0,
                                      "received_bytes": 0},
                           "latency": h.encode(), "e2e": LatencyHistogram().encode()})
    assert aggregator.finished
    summary = aggregator.summary()
    # 4000 messages in 2 s: process 0 finishing its share in 1 s does not make the run faster.
    assert summary["produced"]["messages"] == 4000 and summary["produced"]["msg_per_s"] == 2000
    assert summary["elapsed_s"] == 2.0
    assert summary["publish_latency_ms"]["count"] == 4000
    assert summary["publish_latency_ms"]["p50"] == pytest.approx(4.0, rel=1e-3)
    assert summary["publish_latency_ms"]["mean"] == pytest.approx(3.25, rel=1e-3)
    assert [p["sent"] for p in summary["per_process"]] == [1000, 3000]


def test_shares_follow_the_producers_each_process_has() -> None:
    assert shares(10, [1, 1, 1]) == [4, 3, 3]
    assert shares(10, [2, 1]) == [7, 3]
    assert shares(5, [0, 1]) == [0, 5]
    assert shares(0, [1, 1]) == [0, 0]
    # end-to-end: one producer, two consumers, two processes: the process without a producer
    # gets no rate and no messages, so nothing of -r or -m is lost.
    args = parse("end-to-end", "-n", "1", "-nc", "2", "-st", "Shared", "-r", "1000", "-m", "90",
                 "--processes", "2", "t")
    plans, _, _ = build_plans(args)
    assert [len(p.producer_topics) for p in plans] == [1, 0]
    assert [p.rate for p in plans] == [1000, 0]
    assert [p.messages for p in plans] == [90, 0]
    assert [len(p.subscriptions) for p in plans] == [1, 1]
