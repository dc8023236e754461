"""Automatic topic creation verbs of `velamq admin namespaces`, with pulsar-admin's flags:

    set-auto-topic-creation NS (--enable | -e) [--type | -t partitioned|non-partitioned]
                               [--num-partitions | -n N]
    set-auto-topic-creation NS (--disable | -d)
    get-auto-topic-creation NS        the namespace's override, or null when it has none
    remove-auto-topic-creation NS     back to the broker's allowAutoTopicCreation* keys

They call /admin/v2/namespaces/{t}/{ns}/autoTopicCreation (docs/admin.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from velamq.cli._admin_policies import Group, namespace_path, verb

_LEAF = "autoTopicCreation"


def _set_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("namespace", help="tenant/namespace")
    toggle = p.add_mutually_exclusive_group(required=True)
    toggle.add_argument("--enable", "-e", action="store_true", help="topics are created on first use")
    toggle.add_argument("--disable", "-d", action="store_true", help="topics must be created first")
    p.add_argument("--type", "-t", dest="topic_type", default="non-partitioned",
                   choices=["partitioned", "non-partitioned"], help="what a topic is created as")
    p.add_argument("--num-partitions", "-n", dest="partitions", type=int,
                   help="partitions of a topic created as partitioned")


def _body(a: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"allowAutoTopicCreation": bool(a.enable), "topicType": a.topic_type}
    if a.partitions is not None:
        body["defaultNumPartitions"] = a.partitions
    return body


def _ns(p: argparse.ArgumentParser) -> None:
    p.add_argument("namespace", help="tenant/namespace")


def add_auto_topic_creation_verbs(group: Group) -> None:
    verb(group, "set-auto-topic-creation", "override the broker's automatic topic creation for a namespace",
         lambda c, a: c.request("POST", namespace_path(a.namespace, _LEAF), _body(a)), _set_args)
    verb(group, "get-auto-topic-creation", "show a namespace's automatic topic creation override",
         lambda c, a: c.request("GET", namespace_path(a.namespace, _LEAF)), _ns)
    verb(group, "remove-auto-topic-creation", "remove the override (the broker's settings apply again)",
         lambda c, a: c.request("DELETE", namespace_path(a.namespace, _LEAF)), _ns)
