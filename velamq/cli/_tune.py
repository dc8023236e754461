"""`velamq tune`: print the producer settings of the producer tuning template (PR-12).

    velamq tune --message-bytes 1024 --partitions 8 --memory 512M --max-delay-ms 10 [--json]

From the message size, the partition count, a memory budget and the delay the application accepts,
ProducerConfig.tuned() derives every related setting so that the batch container can always build
full batches while half of each partition's pending queue waits for receipts:

    maxPendingMessages                  1000..2000, as many as the budget holds
    maxPendingMessagesAcrossPartitions  maxPendingMessages x partitions
    memoryLimit (client-wide)           maxPendingMessages x partitions x messageBytes
    batchingMaxMessages                 maxPendingMessages / 2
    batchingMaxBytes                    min(memoryLimit / partitions / 2, 1 MiB)
    batchingMaxPublishDelay             the max delay, clamped to 1..100 ms
    partition switch frequency          1: round robin moves on after every batch

The table gives each setting's velamq keyword, its Java config key (as loadConf takes it, with the
Java value where it differs: the delay in microseconds) and the formula; --json prints the same as
one object. The official Python client names the same settings as velamq does, except
batching_max_allowed_size_in_bytes for batching_max_bytes; it has no memory limit, partition switch
frequency or blocking-aware routing to set. Sizes take K, M, G (powers of 1024, as Pulsar's
SizeUnit) with an optional B or iB. Bad arguments exit 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from velamq._limits import GIB, KIB, MIB
from velamq.client import InvalidConfigurationError, ProducerConfig

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": KIB, "m": MIB, "g": GIB, "t": 1024 * GIB}

# (velamq keyword, Java config key as ProducerBuilder.loadConf / ClientBuilder.loadConf take it, formula).
# memory_limit_bytes is a client setting in every client.
_ROWS: list[tuple[str, str, str]] = [
    ("max_pending_messages", "maxPendingMessages", "1000..2000, as many as the budget holds"),
    ("max_pending_messages_across_partitions", "maxPendingMessagesAcrossPartitions",
     "maxPendingMessages x partitions"),
    ("memory_limit_bytes", "memoryLimitBytes", "maxPendingMessages x partitions x messageBytes"),
    ("batching_enabled", "batchingEnabled", "batches are what the template sizes"),
    ("batching_max_messages", "batchingMaxMessages", "maxPendingMessages / 2"),
    ("batching_max_bytes", "batchingMaxBytes", "min(memoryLimit / partitions / 2, 1 MiB)"),
    ("batching_max_publish_delay_ms", "batchingMaxPublishDelayMicros", "the max delay, clamped to 1..100 ms"),
    ("batching_partition_switch_frequency_by_publish_delay", "batchingPartitionSwitchFrequencyByPublishDelay",
     "1: switch partition after every batch"),
    ("message_routing_mode", "messageRoutingMode", "round robin over partitions"),
    ("blocking_aware_routing", "", "velamq only (PR-11): skip partitions without a free permit"),
]
_JAVA_VALUES: dict[str, Any] = {"round_robin": "RoundRobinPartition"}


def _java_value(name: str, value: Any) -> Any:
    if name == "batching_max_publish_delay_ms":
        return value * 1000
    return _JAVA_VALUES.get(value, value) if isinstance(value, str) else value


def parse_size_bytes(text: str) -> int:
    """'512M' -> 536870912; '64MiB', '1g', '4096' and '1.5G' work too."""
    match = _SIZE_RE.match(text)
    if not match:
        raise ValueError(f"bad size {text!r}: use a number with an optional K, M, G or T")
    number, unit = match.groups()
    return int(float(number) * _UNITS[unit.lower()])


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def add_tune_parser(commands: Any) -> None:
    tune = commands.add_parser(
        "tune", help="derive producer settings from message size, partitions and a memory budget (PR-12)")
    tune.add_argument("--message-bytes", type=int, required=True, help="typical message size in bytes")
    tune.add_argument("--partitions", type=int, required=True, help="partitions of the topic")
    tune.add_argument("--memory", required=True, help="memory budget for pending messages, e.g. 512M")
    tune.add_argument("--max-delay-ms", type=int, default=10, help="the publish delay the application accepts")
    tune.add_argument("--compression", help="also set compression_type (none, lz4, zlib, zstd, snappy)")
    tune.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def derive(message_bytes: int, partitions: int, memory_bytes: int, max_delay_ms: int,
           compression: str | None = None) -> dict[str, Any]:
    """The template's result as a JSON-able dict: inputs, producer options, client options."""
    overrides = {"compression_type": compression} if compression else {}
    config = ProducerConfig.tuned(message_bytes, partitions, memory_bytes, max_delay_ms, **overrides)
    producer = {name: getattr(config, name) for name, _, _ in _ROWS if name != "memory_limit_bytes"}
    if compression:
        producer["compression_type"] = config.compression_type
    memory_limit = config.memory_limit_bytes or 0
    return {
        "inputs": {"message_bytes": message_bytes, "partitions": partitions, "memory_budget_bytes": memory_bytes,
                   "max_delay_ms": max_delay_ms},
        "producer": producer,
        "client": {"memory_limit_bytes": memory_limit},
        "java": {java: _java_value(name, memory_limit if name == "memory_limit_bytes" else producer[name])
                 for name, java, _ in _ROWS if java},
        "budget_used_bytes": memory_limit,
    }


def render_table(result: dict[str, Any]) -> str:
    inputs, producer = result["inputs"], result["producer"]
    memory_limit = result["client"]["memory_limit_bytes"]
    lines = [
        f"velamq tune: {inputs['message_bytes']}-byte messages, {inputs['partitions']} partitions, "
        f"{human_bytes(inputs['memory_budget_bytes'])} memory budget, {inputs['max_delay_ms']} ms max delay "
        "(producer tuning template, PR-12)",
        "",
    ]
    rows = [("velamq keyword", "Java config key", "value", "formula")]
    for name, java, formula in _ROWS:
        value = memory_limit if name == "memory_limit_bytes" else producer[name]
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        label = f"{name} (client)" if name == "memory_limit_bytes" else name
        java_value = _java_value(name, value)
        if java and java_value != value:
            java = f"{java}={java_value}"
        rows.append((label, java or "-", shown, formula))
    if "compression_type" in producer:
        rows.append(("compression_type", "compressionType", producer["compression_type"], "as given"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for label, java, value, formula in rows:
        lines.append(f"{label:<{widths[0]}}  {java:<{widths[1]}}  {value:>{widths[2]}}  {formula}")
    lines.append("")
    pending = producer["max_pending_messages"]
    note = ("2000 pending messages per partition is the template's maximum" if pending >= 2000 else
            "the budget holds fewer than 2000 pending messages per partition")
    lines.append(f"memory: the template uses {human_bytes(memory_limit)} of the "
                 f"{human_bytes(inputs['memory_budget_bytes'])} budget ({note}).")
    if pending < 1000:
        lines.append(f"warning: only {pending} pending messages per partition fit the budget; the template "
                     "recommends 1000..2000 (raise --memory or send smaller messages).")
    args = (f"{inputs['message_bytes']}, {inputs['partitions']}, {inputs['memory_budget_bytes']}, "
            f"{inputs['max_delay_ms']}")
    lines += [
        "",
        "velamq:",
        f"    client = AsyncClient(url, memory_limit_bytes={memory_limit})",
        f"    producer = await client.create_producer(topic, ProducerConfig.tuned({args}))",
    ]
    return "\n".join(lines)


def run_tune(args: argparse.Namespace) -> int:
    try:
        memory = parse_size_bytes(args.memory)
        result = derive(args.message_bytes, args.partitions, memory, args.max_delay_ms, args.compression)
    except (ValueError, InvalidConfigurationError) as exc:
        print(f"velamq tune: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(render_table(result))
    return 0
