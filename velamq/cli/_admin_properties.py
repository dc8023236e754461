"""Properties verbs of `velamq admin namespaces` and `velamq admin topics` (free key/value strings).

    namespaces  set-property NS -k K -v V | get-property NS -k K | remove-property NS -k K |
                set-properties NS -p K=V [-p K=V ...] | get-properties NS | clear-properties NS
    topics      get-properties TOPIC | update-properties TOPIC -p K=V [-p K=V ...] |
                remove-properties TOPIC -k K

-p takes pulsar-admin's forms: repeated (-p a=1 -p b=2) or comma-separated (-p a=1,b=2).
"""

from __future__ import annotations

import argparse
from typing import Any

from velamq.cli._admin_policies import Group, namespace_path, topic_path, verb
from velamq.client import AdminClient


def parse_properties(items: list[str]) -> dict[str, str]:
    """["a=1,b=2", "c=3"] -> {"a": "1", "b": "2", "c": "3"}; ValueError for an item without "="."""
    properties: dict[str, str] = {}
    for item in items:
        for pair in item.split(","):
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"bad property {pair!r}: use key=value")
            properties[key.strip()] = value
    return properties


def _ns(p: argparse.ArgumentParser) -> None:
    p.add_argument("namespace", help="tenant/namespace")


def _key(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", "-k", required=True, help="property name")


def _pairs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--properties", "--property", "-p", dest="properties", action="append", required=True,
                   help="key=value (repeat, or separate with commas)")


def add_namespace_property_verbs(group: Group) -> None:
    def key_args(p: argparse.ArgumentParser) -> None:
        _ns(p)
        _key(p)

    def set_one_args(p: argparse.ArgumentParser) -> None:
        key_args(p)
        p.add_argument("--value", "-v", required=True, help="property value")

    def set_many_args(p: argparse.ArgumentParser) -> None:
        _ns(p)
        _pairs(p)

    def prop(a: argparse.Namespace, *parts: str) -> str:
        return namespace_path(a.namespace, "property", *parts)

    verb(group, "set-property", "set one property of a namespace",
         lambda c, a: c.request("PUT", prop(a, a.key, a.value)), set_one_args)
    verb(group, "get-property", "show one property of a namespace",
         lambda c, a: c.request("GET", prop(a, a.key)), key_args)
    verb(group, "remove-property", "remove one property of a namespace",
         lambda c, a: c.request("DELETE", prop(a, a.key)), key_args)
    verb(group, "set-properties", "set properties of a namespace (merged with the others)",
         lambda c, a: c.request("PUT", namespace_path(a.namespace, "properties"), parse_properties(a.properties)),
         set_many_args)
    verb(group, "get-properties", "show the properties of a namespace",
         lambda c, a: c.request("GET", namespace_path(a.namespace, "properties")), _ns)
    verb(group, "clear-properties", "remove every property of a namespace",
         lambda c, a: c.request("DELETE", namespace_path(a.namespace, "properties")), _ns)


def add_topic_property_verbs(group: Group) -> None:
    def topic(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")

    def update_args(p: argparse.ArgumentParser) -> None:
        topic(p)
        _pairs(p)

    def remove_args(p: argparse.ArgumentParser) -> None:
        topic(p)
        _key(p)

    def update(c: AdminClient, a: argparse.Namespace) -> Any:
        return c.request("PUT", topic_path(a.topic, "properties"), parse_properties(a.properties))

    verb(group, "get-properties", "show the properties of a topic",
         lambda c, a: c.request("GET", topic_path(a.topic, "properties")), topic)
    verb(group, "update-properties", "set properties of a topic (merged with the others)", update, update_args)
    verb(group, "remove-properties", "remove one property of a topic",
         lambda c, a: c.request("DELETE", topic_path(a.topic, "properties"), query={"key": a.key}), remove_args)
