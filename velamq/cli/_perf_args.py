"""`velamq perf produce | consume | end-to-end`: the flags, with pulsar-perf's names where it has one.

    velamq perf produce   [-u URL] [-t N] [-n N] [-r MSG/S] [-s BYTES | -f FILE] [-m N] [-time S]
                          [-b MS] [-bm N] [-bb BYTES] [-db] [-z CODEC] [-o N] [-p N] [-np N]
                          [--tuned] [-i S] [--json] [--processes N] TOPIC...
    velamq perf consume   [-u URL] [-t N] [-n N] [-ns N] [-ss SUB,..] [-st TYPE] [-sp POS] [-q N]
                          [-r MSG/S] [-m N] [-time S] [-i S] [--json] [--processes N] TOPIC...
    velamq perf end-to-end  the producer flags, plus -nc/--num-consumers and the subscription flags

Where velamq differs from pulsar-perf it says so in the help: `-i` is the interval of the live
lines (pulsar-perf's is the client's own stats interval and its lines come every 10 s, our
default), `-b` is whole milliseconds, `--send-timeout` defaults to 30 s (pulsar-perf: 0, never),
`--processes` plays the part of `-threads` (each process a client and an event loop, sharing the
producers, consumers, rate and message count), and `--tuned` is velamq's own.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from velamq.cli._perf_stats import PerfError
from velamq.cli._security_args import add_security_arguments
from velamq.cli._tune import parse_size_bytes

SUBSCRIPTION_TYPES = {"exclusive": "exclusive", "shared": "shared", "failover": "failover",
                      "key_shared": "key_shared", "keyshared": "key_shared"}
POSITIONS = ("latest", "earliest")
COMPRESSIONS = ("none", "lz4", "zlib", "zstd", "snappy")

# pulsar-perf's producer defaults (where velamq's client has others, the tool uses pulsar-perf's).
default_rate = 100
default_size = 1024
default_batch_window_ms = 1.0
default_batch_max_messages = 1000
default_batch_max_bytes = 4 * 1024 * 1024
default_max_outstanding = 1000
default_max_outstanding_across_partitions = 50_000
default_tuned_delay_ms = 10  # velamq tune's default
default_interval_s = 10.0
default_drain_timeout_s = 10.0


def _size(text: str) -> int:
    try:
        return parse_size_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _choice(allowed: Any) -> Any:
    def parse(text: str) -> str:
        key = text.strip().lower().replace("-", "_")
        if key not in allowed:
            raise argparse.ArgumentTypeError(f"{text!r}: one of {', '.join(sorted(set(allowed)))}")
        return str(allowed[key]) if isinstance(allowed, dict) else key
    return parse


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("topics", nargs="+", metavar="TOPIC",
                   help="topic names; with one name and -t N: NAME-0 .. NAME-(N-1)")
    # Connection: pulsar-perf's --auth-plugin, --auth-params, --trust-cert-file, --tls-allow-insecure,
    # --tls-enable-hostname-verification and -cf/--conf-file, turned into AsyncClient options by
    # velamq.cli._perf.client_options().
    p.add_argument("-u", "--service-url", default=None,
                   help="the broker's Pulsar URL, pulsar:// or pulsar+ssl:// (default: the client.conf's "
                        "brokerServiceUrl, else pulsar://localhost:6650)")
    add_security_arguments(p)
    p.add_argument("-ml", "--memory-limit", type=_size, default=None,
                   help="client memory limit for pending payloads, e.g. 64M (default: the client's, 64 MiB)")
    p.add_argument("-t", "--num-topics", "--num-topic", dest="num_topics", type=int, default=1,
                   help="number of topics (default 1)")
    p.add_argument("-m", "--num-messages", type=int, default=0,
                   help="messages in total over all topics and processes; 0 = no limit")
    p.add_argument("-time", "--test-duration", dest="test_duration", type=float, default=0.0,
                   help="seconds to run; 0 = until -m or Ctrl-C")
    p.add_argument("-i", "--stats-interval-seconds", dest="interval", type=float, default=default_interval_s,
                   help="seconds between live lines (default 10, as pulsar-perf prints); 0 = summary only")
    p.add_argument("--json", action="store_true", help="one JSON object per interval and one for the summary")
    p.add_argument("--processes", type=int, default=1,
                   help="worker processes (like pulsar-perf's -threads), each with its share of the producers, "
                        "consumers, rate and messages; percentiles are merged exactly")


def _add_producer(p: argparse.ArgumentParser, with_rate: bool = True) -> None:
    p.add_argument("-n", "--num-producers", type=int, default=1, help="producers per topic (default 1)")
    if with_rate:
        p.add_argument("-r", "--rate", type=float, default=default_rate,
                       help="messages per second over all producers; 0 = as fast as possible (default 100)")
    p.add_argument("-s", "--size", type=int, default=default_size, help="payload bytes (default 1024)")
    p.add_argument("-f", "--payload-file", type=Path,
                   help="UTF-8 text file; each message is one of its lines, chosen at random")
    p.add_argument("-e", "--payload-delimiter", default="\\n", help="what separates payloads in the file")
    p.add_argument("-o", "--max-outstanding", type=int, default=None,
                   help="max pending messages per producer (default 1000); sends wait when full")
    p.add_argument("-p", "--max-outstanding-across-partitions", type=int, default=None,
                   help="max pending messages across partitions (default 50000)")
    p.add_argument("-np", "--partitions", type=int, default=None,
                   help="create the topics as partitioned topics with this many partitions (admin REST)")
    p.add_argument("-au", "--admin-url", help="admin URL for -np (default: http://<service host>:8080)")
    p.add_argument("-b", "--batch-time-window", type=float, default=None,
                   help="batch publish delay in whole ms (default 1; 10 with --tuned)")
    p.add_argument("-bm", "--batch-max-messages", type=int, default=None, help="messages per batch (default 1000)")
    p.add_argument("-bb", "--batch-max-bytes", type=int, default=None, help="bytes per batch (default 4 MiB)")
    p.add_argument("-db", "--disable-batching", action="store_true", help="send every message on its own")
    p.add_argument("-z", "--compression", type=_choice(COMPRESSIONS), default="none",
                   help="none, lz4, zlib, zstd or snappy")
    p.add_argument("--tuned", action="store_true",
                   help="velamq tune's template (ProducerConfig.tuned) from -s, the topic's partitions, "
                        "-ml and -b; explicit -bm, -bb, -o and -p still win")
    p.add_argument("--send-timeout", type=float, default=30.0,
                   help="seconds before an unacknowledged send fails (default 30; 0 = never, as pulsar-perf)")


def _add_consumer(p: argparse.ArgumentParser, consumers_flags: tuple[str, ...], with_rate: bool) -> None:
    p.add_argument(*consumers_flags, dest="num_consumers", type=int, default=1,
                   help="consumers per subscription (default 1; Exclusive allows one)")
    p.add_argument("-ns", "--num-subscriptions", type=int, default=1, help="subscriptions per topic (default 1)")
    p.add_argument("-ss", "--subscriptions", action="append", default=None,
                   help="subscription names, comma separated (default sub; with -ns N and one name: NAME-0..)")
    p.add_argument("-st", "--subscription-type", type=_choice(SUBSCRIPTION_TYPES), default="exclusive",
                   help="Exclusive (default), Shared, Failover or Key_Shared")
    p.add_argument("-sp", "--subscription-position", type=_choice(POSITIONS), default="latest",
                   help="where a new subscription starts: Latest (default) or Earliest")
    p.add_argument("-q", "--receiver-queue-size", type=int, default=1000, help="receiver queue (default 1000)")
    p.add_argument("--acks-delay-millis", type=int, default=100, help="acknowledgement grouping delay in ms")
    if with_rate:
        p.add_argument("-r", "--rate", type=float, default=0.0,
                       help="simulate a slow consumer: messages per second over all consumers (0 = no limit)")


def add_perf_parser(commands: Any) -> None:
    perf = commands.add_parser("perf", help="load a broker: produce, consume, end-to-end (like pulsar-perf)")
    kinds = perf.add_subparsers(dest="perf_command", required=True)
    produce = kinds.add_parser("produce", help="publish at a rate; publish -> receipt latency",
                               allow_abbrev=False)
    _add_common(produce)
    _add_producer(produce)
    produce.add_argument("--lean", action="store_true",
                         help="drive the broker to saturation: pre-built SEND frames on plain connections, no "
                              "client library (velamq's own; unbatched with -db, else entries of -bm messages; "
                              "-o is the window per producer, default 5000); pulsar:// only, no -np/-f/-z/--tuned")
    consume = kinds.add_parser("consume", help="receive and acknowledge; rate and publish-time latency",
                               allow_abbrev=False)
    _add_common(consume)
    _add_consumer(consume, ("-n", "--num-consumers"), with_rate=True)
    both = kinds.add_parser("end-to-end", help="produce and consume at once; send -> receive latency",
                            allow_abbrev=False)
    _add_common(both)
    _add_producer(both)
    _add_consumer(both, ("-nc", "--num-consumers"), with_rate=False)
    both.add_argument("--drain-timeout", type=float, default=default_drain_timeout_s,
                      help="seconds to wait for the last messages once the producers are done (default 10)")


def topic_names(args: argparse.Namespace) -> list[str]:
    """pulsar-perf's rule: N names for -t N, or one name that becomes NAME-0 .. NAME-(N-1)."""
    for name in args.topics:
        if name.startswith("-"):
            raise PerfError(f"invalid option {name!r}; to use a topic of that name, give its full name")
    if args.num_topics < 1:
        raise PerfError("-t/--num-topics must be at least 1")
    if len(args.topics) == args.num_topics:
        return list(args.topics)
    if len(args.topics) == 1:
        return [f"{args.topics[0]}-{i}" for i in range(args.num_topics)]
    raise PerfError(f"the number of topic names ({len(args.topics)}) must equal -t/--num-topics ({args.num_topics})")


def subscription_names(args: argparse.Namespace) -> list[str]:
    """pulsar-perf's rule: -ns N names, or one name that becomes NAME-0 .. NAME-(N-1)."""
    names = [n.strip() for item in (args.subscriptions or ["sub"]) for n in item.split(",") if n.strip()]
    if args.num_subscriptions < 1:
        raise PerfError("-ns/--num-subscriptions must be at least 1")
    if len(names) == args.num_subscriptions:
        return names
    if len(names) == 1:
        return [f"{names[0]}-{i}" for i in range(args.num_subscriptions)]
    raise PerfError(f"{len(names)} subscription names for -ns {args.num_subscriptions}")


def payload_choices(args: argparse.Namespace) -> tuple[bytes, ...]:
    if args.payload_file is None:
        if args.size < 1:
            raise PerfError("-s/--size must be at least 1 byte")
        return ()
    try:
        text = args.payload_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PerfError(f"cannot read the payload file: {exc}") from None
    delimiter = "\n" if args.payload_delimiter == "\\n" else args.payload_delimiter
    choices = tuple(line.encode() for line in text.split(delimiter) if line)
    if not choices:
        raise PerfError(f"the payload file {args.payload_file} is empty")
    return choices


def check_lean(args: argparse.Namespace) -> None:
    """What --lean cannot do, refused up front with the reason."""
    if not getattr(args, "lean", False):
        return
    refused = [(args.partitions, "-np (partitioned topics)"), (args.payload_file, "-f (payload files)"),
               (args.compression != "none", "-z (compression)"), (args.tuned, "--tuned")]
    for given, what in refused:
        if given:
            raise PerfError(f"--lean builds plain SEND frames itself: it cannot go with {what}")
    if args.size < 1:
        raise PerfError("-s/--size must be at least 1 byte")


def check_counts(args: argparse.Namespace, producers: int, consumers: int) -> None:
    if args.processes < 1:
        raise PerfError("--processes must be at least 1")
    if args.num_messages < 0 or args.test_duration < 0 or args.interval < 0:
        raise PerfError("-m, -time and -i cannot be negative")
    if getattr(args, "rate", 0) < 0:
        raise PerfError("-r/--rate cannot be negative (0 = as fast as possible)")
    if consumers and args.subscription_type == "exclusive" and args.num_consumers > 1:
        raise PerfError("only one consumer per subscription is allowed when the subscription type is Exclusive")
    workers = max(producers, consumers)
    if args.processes > workers:
        raise PerfError(f"--processes {args.processes} needs at least as many producers or consumers "
                        f"(there are {workers}): raise -n or -t")
