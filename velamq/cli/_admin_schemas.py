"""`velamq admin schemas …` and the schema settings of `namespaces` and `topics`, with pulsar-admin's flags.

    schemas get TOPIC [--version N | --all-version]       the latest version, one, or all of them
    schemas upload TOPIC -f FILE                          FILE: {"type", "schema", "properties"}
    schemas delete TOPIC [-f]                             -f (--force): every version, for good
    schemas extract TOPIC -c MODULE.CLASS -t avro|json [-j PATH] [-n]
                                                          the schema of a Record class (velamq's or
                                                          pulsar's); -j: a directory or .py file to
                                                          import it from (pulsar-admin's jar); -n: print
                                                          the payload instead of uploading it
    schemas compatibility TOPIC -f FILE                   would the topic's strategy accept it?

    namespaces set-schema-compatibility-strategy NS -c FULL    (get-)
    namespaces set-is-allow-auto-update-schema NS --enable|--disable   (get-)
    namespaces set-schema-validation-enforce NS --enable|--disable     (get-)
    namespaces set-schema-autoupdate-strategy NS -c Full       Pulsar's older field (get-)
    topics set-schema-compatibility-strategy TOPIC -s FULL     (get-, remove-)
    topics set-schema-validation-enforce TOPIC --enable|--disable      (get-, remove-)

A topic's schemas live under its name without the domain (and a partition's are its partitioned
topic's), as in Pulsar; see docs/schemas.md.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from velamq._topic_name import TopicName
from velamq.cli._admin_policies import Args, Group, Handler, namespace_path, topic_path, verb
from velamq.client import AdminClient

STRATEGIES = ("ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE",
              "FORWARD_TRANSITIVE", "FULL_TRANSITIVE", "UNDEFINED")
AUTO_UPDATE = ("AutoUpdateDisabled", "Backward", "Forward", "Full", "AlwaysCompatible", "BackwardTransitive",
               "ForwardTransitive", "FullTransitive")


def schema_path(topic: str, *parts: str) -> str:
    """/admin/v2/schemas/{tenant}/{namespace}/{topic}/... of a topic name (short names resolve)."""
    name = TopicName.parse(topic)
    return AdminClient.path("schemas", name.tenant, *name.namespace_part.split("/"), name.local_name, *parts)


def _read_payload(filename: str) -> Any:
    with open(filename, encoding="utf-8") as f:
        try:
            return json.load(f)
        except ValueError as exc:
            raise ValueError(f"{filename} is not JSON: {exc}") from None


def _get(c: AdminClient, a: argparse.Namespace) -> Any:
    if a.all_version:
        return c.request("GET", schema_path(a.topic, "schemas"))
    if a.version is not None:
        return c.request("GET", schema_path(a.topic, "schema", str(a.version)))
    return c.request("GET", schema_path(a.topic, "schema"))


def record_class(classname: str, search_path: str | None) -> Any:
    """The class `module.Class` (or `module:Class`), imported from `search_path` if given: a
    directory put first on sys.path, or a .py file loaded as its module."""
    module_name, sep, class_name = classname.partition(":")
    if not sep:
        module_name, _, class_name = classname.rpartition(".")
    if not module_name or not class_name:
        raise ValueError(f"bad class name {classname!r}: use module.Class")
    where = Path(search_path) if search_path else None
    if where is not None and where.is_file():
        spec = importlib.util.spec_from_file_location(module_name, where)
        if spec is None or spec.loader is None:
            raise ValueError(f"cannot load {where}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    else:
        if where is not None:
            sys.path.insert(0, str(where))
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(f"cannot import {module_name}: {exc}") from None
    cls = getattr(module, class_name, None)
    if cls is None or not callable(getattr(cls, "schema", None)):
        raise ValueError(f"{classname} is not a Record class (velamq.client.schema or pulsar.schema)")
    return cls


def extract_payload(classname: str, schema_type: str, search_path: str | None) -> dict[str, Any]:
    """The PostSchemaPayload of a Record class; the definition is dumped as both clients dump it, so
    the version it registers is the one their producers get."""
    definition = record_class(classname, search_path).schema()
    return {"type": schema_type.upper(), "schema": json.dumps(definition, indent=True), "properties": {}}


def _extract(c: AdminClient, a: argparse.Namespace) -> Any:
    payload = extract_payload(a.classname, a.type, a.jar)
    if a.dry_run:
        return payload
    return c.request("POST", schema_path(a.topic, "schema"), payload)


def add_schemas_group(groups: Any) -> None:
    group = groups.add_parser("schemas", help="topic schemas (versions, upload, compatibility)").add_subparsers(
        dest="verb", required=True, metavar="VERB"
    )

    def get_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")
        which = p.add_mutually_exclusive_group()
        which.add_argument("--version", type=int, help="that version (default: the latest)")
        which.add_argument("--all-version", "-a", dest="all_version", action="store_true", help="every version")

    def file_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")
        p.add_argument("--filename", "-f", required=True, help='JSON file {"type", "schema", "properties"}')

    def delete_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")
        p.add_argument("--force", "-f", action="store_true", help="remove every version (no new history after)")

    def extract_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")
        p.add_argument("--classname", "-c", required=True, help="the Record class, module.Class")
        p.add_argument("--jar", "-j", help="a directory or .py file to import the class from")
        p.add_argument("--type", "-t", required=True, choices=["avro", "json", "AVRO", "JSON"], help="avro or json")
        p.add_argument("--dry-run", "-n", dest="dry_run", action="store_true", help="print, do not upload")

    verb(group, "get", "show a topic's schema", _get, get_args)
    verb(group, "upload", "register a schema for a topic",
         lambda c, a: c.request("POST", schema_path(a.topic, "schema"), _read_payload(a.filename)), file_args)
    verb(group, "delete", "delete a topic's schema",
         lambda c, a: c.request("DELETE", schema_path(a.topic, "schema"), query={"force": a.force}), delete_args)
    verb(group, "extract", "register the schema of a Record class", _extract, extract_args)
    verb(group, "compatibility", "test a schema against the topic's strategy (nothing is stored)",
         lambda c, a: c.request("POST", schema_path(a.topic, "compatibility"), _read_payload(a.filename)), file_args)


def _toggle(p: argparse.ArgumentParser) -> None:
    toggle = p.add_mutually_exclusive_group(required=True)
    toggle.add_argument("--enable", "-e", action="store_true", help="enable")
    toggle.add_argument("--disable", "-d", action="store_true", help="disable")


Path_ = Callable[[argparse.Namespace], str]
Value = Callable[[argparse.Namespace], Any]


def _request(method: str, path: Path_, value: Value | None = None, applied: bool = False) -> Handler:
    def handle(c: AdminClient, a: argparse.Namespace) -> Any:
        query = {"applied": True} if applied and getattr(a, "applied", False) else None
        if value is None:
            return c.request(method, path(a), query=query)
        return c.request(method, path(a), value(a), query=query)

    return handle


def _strategy(a: argparse.Namespace) -> Any:
    return a.compatibility


def _enabled(a: argparse.Namespace) -> Any:
    return bool(a.enable)


def add_namespace_schema_verbs(group: Group) -> None:
    def ns(p: argparse.ArgumentParser) -> None:
        p.add_argument("namespace", help="tenant/namespace")

    def strategy_args(choices: tuple[str, ...]) -> Args:
        def add(p: argparse.ArgumentParser) -> None:
            ns(p)
            p.add_argument("--compatibility", "-c", required=True, choices=choices)
        return add

    def toggle_args(p: argparse.ArgumentParser) -> None:
        ns(p)
        _toggle(p)

    settings: tuple[tuple[str, str, str, Args, Value], ...] = (
        ("schema-compatibility-strategy", "schemaCompatibilityStrategy", "PUT", strategy_args(STRATEGIES), _strategy),
        ("schema-autoupdate-strategy", "schemaAutoUpdateCompatibilityStrategy", "PUT", strategy_args(AUTO_UPDATE),
         _strategy),
        ("is-allow-auto-update-schema", "isAllowAutoUpdateSchema", "POST", toggle_args, _enabled),
        ("schema-validation-enforce", "schemaValidationEnforced", "POST", toggle_args, _enabled),
    )
    for suffix, leaf, method, add_args, value in settings:
        path = functools.partial(_namespace_leaf, leaf=leaf)
        verb(group, f"set-{suffix}", f"set the namespace's {leaf}", _request(method, path, value), add_args)
        verb(group, f"get-{suffix}", f"show the namespace's {leaf}", _request("GET", path), ns)


def _namespace_leaf(a: argparse.Namespace, leaf: str) -> str:
    return namespace_path(a.namespace, leaf)


def _topic_leaf(a: argparse.Namespace, leaf: str) -> str:
    return topic_path(a.topic, leaf)


def add_topic_schema_verbs(group: Group) -> None:
    def topic(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")

    def strategy_args(p: argparse.ArgumentParser) -> None:
        topic(p)
        p.add_argument("--strategy", "-s", dest="compatibility", required=True, choices=STRATEGIES)

    def toggle_args(p: argparse.ArgumentParser) -> None:
        topic(p)
        _toggle(p)

    def getter(p: argparse.ArgumentParser) -> None:
        topic(p)
        p.add_argument("--applied", "-ap", action="store_true", help="the value in force, inherited or not")

    settings: tuple[tuple[str, str, str, Args, Value], ...] = (
        ("schema-compatibility-strategy", "schemaCompatibilityStrategy", "PUT", strategy_args, _strategy),
        ("schema-validation-enforce", "schemaValidationEnforced", "POST", toggle_args, _enabled),
    )
    for suffix, leaf, method, add_args, value in settings:
        path = functools.partial(_topic_leaf, leaf=leaf)
        verb(group, f"set-{suffix}", f"set the topic's {leaf}", _request(method, path, value), add_args)
        verb(group, f"get-{suffix}", f"show the topic's {leaf}", _request("GET", path, applied=True), getter)
        verb(group, f"remove-{suffix}", f"remove the topic's {leaf} (inherit the namespace's)",
             _request("DELETE", path), topic)
