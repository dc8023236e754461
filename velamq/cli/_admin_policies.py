"""The policy verbs of `velamq admin namespaces` and `velamq admin topics`, and the shared verb helpers.

For each policy, set-X / get-X / remove-X at namespace level (argument tenant/namespace) and at topic
level (argument a topic name; get-X takes --applied for the value in force, inherited or not):

    policy               namespaces verbs suffix        topics verbs suffix       set flags
    retention            retention                      retention                 --time 10m --size 1G
    message TTL          message-ttl                    message-ttl               --ttl 1h (-ttl, --messageTTL)
    backlog quota        set-backlog-quota, get-backlog-quotas, remove-backlog-quota
                                                                                  --limit 10G --limitTime 1h
                                                                                  --policy P [--type T]
    deduplication        deduplication                  deduplication             --enable | --disable
    delayed delivery     delayed-delivery               delayed-delivery          --enable | --disable
                                                                                  [--time 1s] [--maxDelay 0]
    max producers        max-producers-per-topic        max-producers             -p N
    max consumers        max-consumers-per-topic        max-consumers             -c N
    max consumers / sub  max-consumers-per-subscription max-consumers-per-subscription  -c N
    max message size     -                              max-message-size          -m 1M
    ack-hole redelivery  ack-hole-redelivery            ack-hole-redelivery       --time 30s (500ms; 0 = off)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from velamq.cli._admin_output import parse_size_bytes, parse_time_s
from velamq.client import AdminClient

Handler = Callable[[AdminClient, argparse.Namespace], Any]
Args = Callable[[argparse.ArgumentParser], Any]
Group = Any  # argparse's _SubParsersAction, which is private

MIB = 1 << 20


def verb(group: Group, name: str, help_text: str, handler: Handler, add_args: Args | None = None,
         aliases: list[str] | None = None) -> argparse.ArgumentParser:
    """One leaf command. --json and --admin-url are accepted here too (after the verb)."""
    parser: argparse.ArgumentParser = group.add_parser(
        name, help=help_text, description=help_text, aliases=aliases or []
    )
    if add_args is not None:
        add_args(parser)
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print raw JSON")
    parser.add_argument("--admin-url", default=argparse.SUPPRESS, help="admin REST URL")
    # A get-X of something not set prints "null" (as pulsar-admin); a set or delete prints nothing.
    parser.set_defaults(handler=handler, prints_null=name.startswith(("get", "list")) or name == "policies")
    return parser


namespace_path = AdminClient.namespace_path
topic_path = AdminClient.topic_path


def parse_duration_ms(text: str) -> int:
    """"500ms", or a pulsar-admin time ("30s", "1m", a bare number of seconds) in milliseconds."""
    text = text.strip()
    if text.endswith("ms") and text[:-2].isdigit():
        return int(text[:-2])
    seconds = parse_time_s(text)
    return seconds if seconds < 0 else seconds * 1000


# ---------------------------------------------------------------------------- the policies


@dataclass(frozen=True, slots=True)
class PolicyVerbs:
    ns_suffix: str | None  # set-<suffix> etc. under `namespaces`; None: no namespace-level verbs
    topic_suffix: str
    ns_path: str
    topic_path: str
    add_args: Callable[[argparse.ArgumentParser, bool], None]  # (parser, topic_level)
    value: Callable[[argparse.Namespace], Any]
    what: str


def _retention_args(p: argparse.ArgumentParser, topic_level: bool) -> None:
    p.add_argument("--time", "-t", required=True, help="retention time (e.g. 10m, 3h, 2d; -1 infinite; 0 none)")
    p.add_argument("--size", "-s", required=True, help="retention size (e.g. 500M, 1G; -1 infinite; 0 none)")


def _retention_value(a: argparse.Namespace) -> dict[str, int]:
    seconds, size = parse_time_s(a.time), parse_size_bytes(a.size)
    return {"retentionTimeInMinutes": seconds if seconds < 0 else seconds // 60,
            "retentionSizeInMB": size if size < 0 else size // MIB}


def _ttl_args(p: argparse.ArgumentParser, topic_level: bool) -> None:
    flags = ["--ttl", "-t", "--messageTTL"] if topic_level else ["--messageTTL", "-ttl", "--ttl"]
    p.add_argument(*flags, dest="ttl", required=True, help="message TTL (e.g. 30s, 1h; 0 = none)")


def _toggle_args(p: argparse.ArgumentParser) -> None:
    toggle = p.add_mutually_exclusive_group(required=True)
    toggle.add_argument("--enable", "-e", action="store_true", help="enable")
    toggle.add_argument("--disable", "-d", action="store_true", help="disable")


def _delayed_args(p: argparse.ArgumentParser, topic_level: bool) -> None:
    _toggle_args(p)
    p.add_argument("--time", "-t", default="1s", help="tick time of the delayed-message tracker (default 1s)")
    p.add_argument("--maxDelay", "-md", dest="max_delay", default="0", help="longest allowed delay (0 = any)")


def _int_args(flag: str, short: str, what: str) -> Callable[[argparse.ArgumentParser, bool], None]:
    def add(p: argparse.ArgumentParser, topic_level: bool) -> None:
        p.add_argument(flag, short, dest="number", type=int, required=True, help=what)

    return add


def _max_message_args(p: argparse.ArgumentParser, topic_level: bool) -> None:
    p.add_argument("--max-message-size", "-m", dest="size", required=True, help="bytes (e.g. 1M; 0 = broker's)")


def _ack_hole_args(p: argparse.ArgumentParser, topic_level: bool) -> None:
    p.add_argument("--time", "-t", required=True,
                   help="redeliver messages stuck behind the mark-delete position this long (e.g. 30s, 500ms; 0 = off)")


POLICIES: tuple[PolicyVerbs, ...] = (
    PolicyVerbs("retention", "retention", "retention", "retention", _retention_args, _retention_value, "retention"),
    PolicyVerbs("message-ttl", "message-ttl", "messageTTL", "messageTTL", _ttl_args,
                lambda a: parse_time_s(a.ttl), "message TTL"),
    PolicyVerbs("deduplication", "deduplication", "deduplication", "deduplicationEnabled",
                lambda p, t: _toggle_args(p), lambda a: bool(a.enable), "deduplication"),
    PolicyVerbs("delayed-delivery", "delayed-delivery", "delayedDelivery", "delayedDelivery", _delayed_args,
                lambda a: {"active": bool(a.enable), "tickTime": parse_duration_ms(a.time),
                           "maxDeliveryDelayInMillis": parse_duration_ms(a.max_delay)}, "delayed delivery"),
    PolicyVerbs("max-producers-per-topic", "max-producers", "maxProducersPerTopic", "maxProducers",
                _int_args("--max-producers", "-p", "0 = unlimited"), lambda a: a.number, "max producers per topic"),
    PolicyVerbs("max-consumers-per-topic", "max-consumers", "maxConsumersPerTopic", "maxConsumers",
                _int_args("--max-consumers", "-c", "0 = unlimited"), lambda a: a.number, "max consumers per topic"),
    PolicyVerbs("max-consumers-per-subscription", "max-consumers-per-subscription", "maxConsumersPerSubscription",
                "maxConsumersPerSubscription", _int_args("--max-consumers-per-subscription", "-c", "0 = unlimited"),
                lambda a: a.number, "max consumers per subscription"),
    PolicyVerbs(None, "max-message-size", "", "maxMessageSize", _max_message_args,
                lambda a: parse_size_bytes(a.size), "max message size"),
    PolicyVerbs("ack-hole-redelivery", "ack-hole-redelivery", "ackHoleRedelivery", "ackHoleRedelivery",
                _ack_hole_args, lambda a: parse_duration_ms(a.time), "active redelivery of ack holes (velamq)"),
)


def _handlers(spec: PolicyVerbs, topic_level: bool) -> tuple[Handler, Handler, Handler]:
    def path(a: argparse.Namespace) -> str:
        return topic_path(a.topic, spec.topic_path) if topic_level else namespace_path(a.namespace, spec.ns_path)

    def set_(c: AdminClient, a: argparse.Namespace) -> Any:
        value = spec.value(a)
        if topic_level and spec.topic_path == "messageTTL":
            return c.request("POST", path(a), query={"messageTTL": value})  # as Pulsar's client sends it
        return c.request("POST", path(a), value)

    def get(c: AdminClient, a: argparse.Namespace) -> Any:
        return c.request("GET", path(a), query={"applied": True} if getattr(a, "applied", False) else None)

    def remove(c: AdminClient, a: argparse.Namespace) -> Any:
        return c.request("DELETE", path(a))

    return set_, get, remove


def _target(topic_level: bool) -> Callable[[argparse.ArgumentParser], None]:
    def add(p: argparse.ArgumentParser) -> None:
        if topic_level:
            p.add_argument("topic")
        else:
            p.add_argument("namespace", help="tenant/namespace")

    return add


def _getter_args(topic_level: bool) -> Args:
    def add(p: argparse.ArgumentParser) -> None:
        _target(topic_level)(p)
        if topic_level:
            p.add_argument("--applied", "-ap", action="store_true", help="the value in force, inherited or not")

    return add


def _quota_path(a: argparse.Namespace, topic_level: bool, leaf: str) -> str:
    return topic_path(a.topic, leaf) if topic_level else namespace_path(a.namespace, leaf)


def _add_backlog_quota_verbs(group: Group, topic_level: bool) -> None:
    def set_args(p: argparse.ArgumentParser) -> None:
        _target(topic_level)(p)
        p.add_argument("--limit", "-l", help="backlog size limit (e.g. 10G; -1 none)")
        p.add_argument("--limitTime", "-lt", dest="limit_time", help="oldest backlog age allowed (e.g. 1h; -1 none)")
        p.add_argument("--policy", "-p", required=True,
                       choices=["producer_request_hold", "producer_exception", "consumer_backlog_eviction"])
        p.add_argument("--type", "-t", dest="quota_type", default="destination_storage",
                       choices=["destination_storage", "message_age"])

    def set_quota(c: AdminClient, a: argparse.Namespace) -> Any:
        if a.limit is None and a.limit_time is None:
            raise ValueError("give --limit, --limitTime or both")
        body = {"limitSize": -1 if a.limit is None else parse_size_bytes(a.limit),
                "limitTime": -1 if a.limit_time is None else parse_time_s(a.limit_time), "policy": a.policy}
        return c.request("POST", _quota_path(a, topic_level, "backlogQuota"), body,
                      query={"backlogQuotaType": a.quota_type})

    def remove_args(p: argparse.ArgumentParser) -> None:
        _target(topic_level)(p)
        p.add_argument("--type", "-t", dest="quota_type", default="destination_storage",
                       choices=["destination_storage", "message_age"])

    where = "topic" if topic_level else "namespace"
    verb(group, "set-backlog-quota", f"set the {where}'s backlog quota", set_quota, set_args)
    verb(group, "get-backlog-quotas", f"show the {where}'s backlog quotas",
         lambda c, a: c.request("GET", _quota_path(a, topic_level, "backlogQuotaMap"),
                             query={"applied": True} if getattr(a, "applied", False) else None),
         _getter_args(topic_level))
    verb(group, "remove-backlog-quota", f"remove the {where}'s backlog quota",
         lambda c, a: c.request("DELETE", _quota_path(a, topic_level, "backlogQuota"),
                             query={"backlogQuotaType": a.quota_type}), remove_args)


def add_policy_verbs(group: Group, topic_level: bool) -> None:
    """set-/get-/remove- verbs of every policy, for `namespaces` or for `topics`."""
    where = "topic" if topic_level else "namespace"
    for spec in POLICIES:
        suffix = spec.topic_suffix if topic_level else spec.ns_suffix
        if suffix is None:
            continue
        set_, get, remove = _handlers(spec, topic_level)

        def set_args(p: argparse.ArgumentParser, spec: PolicyVerbs = spec) -> None:
            _target(topic_level)(p)
            spec.add_args(p, topic_level)

        verb(group, f"set-{suffix}", f"set the {where}'s {spec.what}", set_, set_args)
        verb(group, f"get-{suffix}", f"show the {where}'s {spec.what}", get, _getter_args(topic_level))
        verb(group, f"remove-{suffix}", f"remove the {where}'s {spec.what} (inherit it again)", remove,
             _target(topic_level))
    _add_backlog_quota_verbs(group, topic_level)
