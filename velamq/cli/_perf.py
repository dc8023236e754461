"""`velamq perf`: a load tool for velamq or any Pulsar broker, after pulsar-perf (OP-4, OT-1).

    velamq perf produce -u pulsar://localhost:6650 -r 10000 -s 1024 -time 60 my-topic
    velamq perf consume -u pulsar://localhost:6650 -st Shared -n 2 my-topic
    velamq perf end-to-end -r 5000 -time 30 --processes 2 -n 2 -nc 2 -st Shared my-topic

It speaks only the Pulsar protocol, through velamq's public client API. A live line per interval
gives msg/s, MB/s, pending sends and the interval's latency percentiles (p50, p95, p99, p99.9, max
in ms); the summary gives the same over the whole run; `--json` prints both as JSON lines.
Latency: produce measures publish -> receipt; end-to-end measures send -> receive (a stamp in the
payload); consume measures publish time -> receive. Percentiles come from HdrHistogram, merged
exactly across `--processes`. The flags are in _perf_args.py, the workers in _perf_worker.py.

Authentication and TLS take pulsar-perf's flags (--auth-plugin, --auth-params, --trust-cert-file,
--tls-allow-insecure, --tls-enable-hostname-verification, -cf/--conf-file client.conf; see
_security_args.py); the service URL may be pulsar+ssl://.

This module turns the flags into one WorkerPlan per process (each with its share of producers,
consumers, rate and messages), creates partitioned topics for `-np`, and runs the plans.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any
from urllib.parse import urlsplit

from velamq._topic_name import TopicName
from velamq.cli._perf_args import (
    check_counts,
    check_lean,
    default_batch_max_bytes,
    default_batch_max_messages,
    default_batch_window_ms,
    default_max_outstanding,
    default_max_outstanding_across_partitions,
    default_tuned_delay_ms,
    payload_choices,
    subscription_names,
    topic_names,
)
from velamq.cli._perf_lean import broker_address, default_lean_window
from velamq.cli._perf_produce import Payloads
from velamq.cli._perf_report import Aggregator, RunShape
from velamq.cli._perf_runner import run_in_process, run_in_processes
from velamq.cli._perf_stats import PerfError
from velamq.cli._perf_worker import StopRule, WorkerPlan
from velamq.cli._security_args import read_client_conf, security_from_args
from velamq.cli._tune import human_bytes
from velamq.client import AdminClient, AdminError, ConnectionSecurity, InvalidConfigurationError

admin_timeout_s = 30.0


service_url_default = "pulsar://localhost:6650"


def resolve_connection(args: argparse.Namespace) -> None:
    """The service URL, admin URL and security from the flags, else the client.conf, else defaults
    (args.security is set: a picklable ConnectionSecurity the workers' clients are made with)."""
    try:
        conf = read_client_conf(args.client_conf)
        args.security = security_from_args(args, conf)
    except InvalidConfigurationError as exc:
        raise PerfError(str(exc)) from None
    args.service_url = args.service_url or conf.broker_service_url or service_url_default
    if getattr(args, "admin_url", None) is None and conf.web_service_url:
        args.admin_url = conf.web_service_url


def security_of(args: argparse.Namespace) -> ConnectionSecurity:
    security = getattr(args, "security", None)
    return security if isinstance(security, ConnectionSecurity) else ConnectionSecurity()


def client_options(args: argparse.Namespace) -> dict[str, Any]:
    """AsyncClient keyword options from the connection flags: memory limit, authentication, TLS."""
    options: dict[str, Any] = security_of(args).client_options()
    if args.memory_limit is not None:
        options["memory_limit_bytes"] = args.memory_limit
    return options


def producer_options(args: argparse.Namespace, producers_per_worker: int) -> dict[str, Any]:
    """create_producer keyword options; with --tuned, the template's inputs instead (see ProduceSide)."""
    explicit = {
        "batching_max_messages": args.batch_max_messages,
        "batching_max_bytes": args.batch_max_bytes,
        "max_pending_messages": args.max_outstanding,
        "max_pending_messages_across_partitions": args.max_outstanding_across_partitions,
    }
    common = {"block_if_queue_full": True, "compression_type": args.compression,
              "send_timeout_ms": int(args.send_timeout * 1000)}
    if args.tuned:
        if args.disable_batching:
            raise PerfError("--tuned sizes batches: it cannot go with -db/--disable-batching")
        window = args.batch_time_window if args.batch_time_window is not None else default_tuned_delay_ms
        budget = args.memory_limit or 64 * 1024 * 1024
        return {"tuned": {"message_bytes": args.size, "memory_limit_bytes": budget // max(1, producers_per_worker),
                          "max_delay_ms": max(1, round(window))},
                **common, **{k: v for k, v in explicit.items() if v is not None}}
    window = args.batch_time_window if args.batch_time_window is not None else default_batch_window_ms
    defaults = {"batching_max_messages": default_batch_max_messages, "batching_max_bytes": default_batch_max_bytes,
                "max_pending_messages": default_max_outstanding,
                "max_pending_messages_across_partitions": default_max_outstanding_across_partitions}
    options = {k: (v if v is not None else defaults[k]) for k, v in explicit.items()}
    return {**options, **common, "batching_enabled": not args.disable_batching,
            "batching_max_publish_delay_ms": max(1, round(window))}


def consumer_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"subscription_type": args.subscription_type, "initial_position": args.subscription_position,
            "receiver_queue_size": args.receiver_queue_size, "ack_grouping_time_ms": args.acks_delay_millis}


def shares(total: int, weights: list[int]) -> list[int]:
    """`total` split in proportion to `weights`, in whole units that add up to `total`."""
    weight = sum(weights)
    if not weight:
        return [0] * len(weights)
    out = [total * w // weight for w in weights]
    # The remainder goes one by one to the largest fractional parts (ties: the first process).
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % weight), i))
    for i in order[:total - sum(out)]:
        out[i] += 1
    return out


def lean_entry_messages(args: argparse.Namespace) -> int:
    """--lean: one message per entry with -db, else batches of -bm messages."""
    return 1 if args.disable_batching else int(args.batch_max_messages or default_batch_max_messages)


def build_plans(args: argparse.Namespace) -> tuple[list[WorkerPlan], StopRule, RunShape]:
    if getattr(args, "security", None) is None:
        resolve_connection(args)
    command = args.perf_command
    topics = topic_names(args)
    producing = command in ("produce", "end-to-end")
    consuming = command in ("consume", "end-to-end")
    producer_topics = [t for t in topics for _ in range(args.num_producers)] if producing else []
    subscriptions = subscription_names(args) if consuming else []
    consumer_pairs = ([(t, s) for t in topics for s in subscriptions for _ in range(args.num_consumers)]
                      if consuming else [])
    check_counts(args, len(producer_topics), len(consumer_pairs))
    lean = bool(getattr(args, "lean", False))
    if lean:
        check_lean(args)
        if security_of(args).client_options():
            raise PerfError("--lean builds plain SEND frames itself: it cannot go with authentication or TLS")
        broker_address(args.service_url)
    n = args.processes
    payloads = Payloads(size=args.size, choices=payload_choices(args)) if producing else Payloads()
    produce_rate = args.rate if producing else 0.0
    consume_rate = args.rate if command == "consume" else 0.0
    # Each process gets the producers and consumers dealt to it round robin, and the rate and
    # message count in proportion to them (a process without producers sends nothing).
    producers_of = [len(producer_topics[i::n]) for i in range(n)]
    consumers_of = [len(consumer_pairs[i::n]) for i in range(n)]
    messages_of = shares(args.num_messages, producers_of) if producing else [0] * n
    plans = []
    for i in range(n):
        mine = producer_topics[i::n]
        plans.append(WorkerPlan(
            index=i, command=command, service_url=args.service_url, client_options=client_options(args),
            producer_topics=tuple(mine),
            producer_options=producer_options(args, len(mine)) if producing else {},
            payloads=payloads, rate=produce_rate * producers_of[i] / max(1, len(producer_topics)),
            messages=messages_of[i],
            subscriptions=tuple(consumer_pairs[i::n]),
            consumer_options=consumer_options(args) if consuming else {},
            consume_rate=consume_rate * consumers_of[i] / max(1, len(consumer_pairs)),
            consume_messages=args.num_messages if command == "consume" and n == 1 else 0,
            duration_s=args.test_duration, interval_s=args.interval, stamped=command == "end-to-end",
            drain_timeout_s=getattr(args, "drain_timeout", 0.0),
            lean=lean, lean_batch=lean_entry_messages(args) if lean else 1,
            lean_window=(args.max_outstanding or default_lean_window) if lean else 0,
        ))
    rule = StopRule(command, consume_messages=args.num_messages if command == "consume" else 0,
                    subscriptions_per_topic=len(subscriptions) or 1)
    shape = RunShape(command, len(topics), len(producer_topics), len(consumer_pairs), n, args.interval)
    return plans, rule, shape


def admin_url_for(args: argparse.Namespace) -> str:
    if args.admin_url:
        return str(args.admin_url).rstrip("/")
    parts = urlsplit(args.service_url)
    host = parts.hostname or "localhost"
    return f"https://{host}:8443" if parts.scheme == "pulsar+ssl" else f"http://{host}:8080"


def create_partitioned_topics(args: argparse.Namespace, topics: list[str]) -> None:
    """pulsar-perf's -np: create each topic with N partitions; an existing one must have N."""
    base = admin_url_for(args)
    admin = AdminClient(base, security=security_of(args), timeout_s=admin_timeout_s)
    for topic in topics:
        path = AdminClient.topic_path(TopicName.parse(topic), "partitions")
        try:
            admin.request("PUT", path, args.partitions)
            continue
        except AdminError as exc:
            if exc.status == 0:
                raise PerfError(f"cannot reach the admin API at {base} (set -au/--admin-url): {exc.reason}") from None
            if exc.status != 409:
                raise PerfError(f"cannot create {topic} with {args.partitions} partitions: "
                                f"HTTP {exc.status} {exc.reason}") from None
        existing = (admin.request("GET", path) or {}).get("partitions", 0)
        if existing != args.partitions:
            raise PerfError(f"{topic} exists with {existing} partitions, not {args.partitions}")


def _header(plans: list[WorkerPlan], shape: RunShape, args: argparse.Namespace) -> str:
    parts = [f"velamq perf {shape.command} against {args.service_url}: {shape.topics} topic(s)"]
    if shape.producers:
        options = plans[0].producer_options
        rate = f"{args.rate:,.0f} msg/s" if args.rate else "max rate"
        size = f"{len(plans[0].payloads.choices)} payloads from {args.payload_file}" if args.payload_file \
            else f"{args.size}-byte payloads"
        if plans[0].lean:
            batching = (f"lean SEND frames, entries of {plans[0].lean_batch} msg, "
                        f"{plans[0].lean_window} in flight per producer")
        elif "tuned" in options:
            batching = "tuned batching (velamq tune's template)"
        elif options["batching_enabled"]:
            batching = (f"batches of up to {options['batching_max_messages']} msg / "
                        f"{human_bytes(options['batching_max_bytes'])} / "
                        f"{options['batching_max_publish_delay_ms']} ms")
        else:
            batching = "no batching"
        parts.append(f"{shape.producers} producer(s), {rate}, {size}, {batching}, compression {args.compression}")
    if shape.consumers:
        parts.append(f"{shape.consumers} consumer(s), {args.subscription_type}")
    parts.append(f"{shape.processes} process(es)")
    return ", ".join(parts)


def run_perf(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        resolve_connection(args)
        plans, rule, shape = build_plans(args)
        if getattr(args, "partitions", None):
            create_partitioned_topics(args, topic_names(args))
    except PerfError as exc:
        print(f"velamq perf: {exc}", file=sys.stderr)
        return 2
    print(_header(plans, shape, args), file=sys.stderr, flush=True)
    aggregator = Aggregator(shape, sys.stdout, args.json)
    if len(plans) == 1:
        run_in_process(plans[0], rule, aggregator)
    else:
        run_in_processes(plans, rule, aggregator)
    summary = aggregator.print_summary()
    return 1 if summary.get("errors") else 0
