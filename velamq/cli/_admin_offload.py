"""The `velamq admin` verbs of tiered storage (docs/offload.md), as pulsar-admin has them.

topics:
    offload         -s SIZE         offload every sealed ledger but the newest ones that together
                                    hold at most SIZE (10M, 1G; 0: every sealed ledger)
    offload-status  [-w]            NOT_RUN, RUNNING, SUCCESS or ERROR (with the error), and the
                                    first message not offloaded; -w waits while it runs
    set-offload-policies / get-offload-policies / remove-offload-policies   the topic's own, with
                                    the namespace verb's flags

namespaces (argument tenant/namespace):
    set-offload-threshold   -s SIZE [-t TIME]   bytes (-1: the broker's; 0: as soon as sealed) and
                                                seconds since sealed (-1: not set)
    get-offload-threshold                       both thresholds
    set-offload-deletion-lag  -l TIME           keep local copies this long (10m, 2h, 500ms)
    get-offload-deletion-lag / clear-offload-deletion-lag
    set-offload-policies    -d DRIVER [-b BUCKET -r REGION -e ENDPOINT -oat SIZE -oats TIME -oae TIME]
    get-offload-policies / remove-offload-policies

As in pulsar-admin, `offload` reads the topic's internal stats and asks the broker to offload
everything before the first ledger of the newest ones within SIZE.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from velamq.cli._admin_output import parse_size_bytes, parse_time_s
from velamq.cli._admin_policies import Group, namespace_path, parse_duration_ms, topic_path, verb
from velamq.client import AdminClient

status_poll_s = 0.5


def first_ledger_within(ledgers: Sequence[dict[str, Any]], threshold: int) -> dict[str, int] | None:
    """The message id before which everything goes: the oldest ledger of the newest ones whose
    sizes add up to at most the threshold. None: nothing to offload."""
    suffix = 0
    previous = None
    for ledger in reversed(ledgers):
        suffix += int(ledger.get("size") or 0)
        if suffix > threshold and previous is not None:
            return {"ledgerId": previous, "entryId": 0, "partitionIndex": -1}
        previous = int(ledger["ledgerId"])
    return None


def _offload(c: AdminClient, a: argparse.Namespace) -> Any:
    stats = c.request("GET", topic_path(a.topic, "internalStats")) or {}
    ledgers = stats.get("ledgers") or []
    threshold = parse_size_bytes(a.size_threshold)
    message_id = first_ledger_within(ledgers, threshold)
    if message_id is None:
        return "Nothing to offload"
    c.request("PUT", topic_path(a.topic, "offload"), message_id)
    return f"Offload triggered for {a.topic} for messages before {message_id['ledgerId']}:{message_id['entryId']}"


def _offload_status(c: AdminClient, a: argparse.Namespace) -> Any:
    while True:
        status = c.request("GET", topic_path(a.topic, "offload"))
        if not a.wait_complete or (status or {}).get("status") != "RUNNING":
            return status
        time.sleep(status_poll_s)


def add_offload_verbs(group: Group) -> None:
    def offload_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")
        p.add_argument("--size-threshold", "-s", required=True,
                       help="keep at most this much locally (e.g. 10M); 0 offloads every sealed ledger")

    def status_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")
        p.add_argument("--wait-complete", "-w", action="store_true", help="wait while the offload runs")

    verb(group, "offload", "offload sealed ledgers to tiered storage", _offload, offload_args)
    verb(group, "offload-status", "state of the last offload", _offload_status, status_args)

    def topic_only(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")

    def policies_args(p: argparse.ArgumentParser) -> None:
        topic_only(p)
        policies_flags(p)

    verb(group, "set-offload-policies", "a topic's own offload policies (over its namespace's)",
         lambda c, a: c.request("POST", topic_path(a.topic, "offloadPolicies"), offload_policies_body(a)),
         policies_args)
    verb(group, "get-offload-policies", "a topic's own offload policies",
         lambda c, a: c.request("GET", topic_path(a.topic, "offloadPolicies")), topic_only)
    verb(group, "remove-offload-policies", "remove a topic's own offload policies",
         lambda c, a: c.request("DELETE", topic_path(a.topic, "offloadPolicies")), topic_only)


# ---------------------------------------------------------------------------- namespaces

DRIVERS = ("S3", "aws-s3", "google-cloud-storage", "filesystem", "azureblob", "aliyun-oss")
MINUTE_MS = 60_000


def _set_threshold(c: AdminClient, a: argparse.Namespace) -> Any:
    c.request("PUT", namespace_path(a.namespace, "offloadThreshold"), parse_size_bytes(a.size))
    c.request("PUT", namespace_path(a.namespace, "offloadThresholdInSeconds"), parse_time_s(a.time))


def _get_threshold(c: AdminClient, a: argparse.Namespace) -> Any:
    return {
        "offloadThresholdInBytes": c.request("GET", namespace_path(a.namespace, "offloadThreshold")),
        "offloadThresholdInSeconds": c.request("GET", namespace_path(a.namespace, "offloadThresholdInSeconds")),
    }


def _get_lag(c: AdminClient, a: argparse.Namespace) -> Any:
    lag = c.request("GET", namespace_path(a.namespace, "offloadDeletionLagMs"))
    if lag is None:
        return "Unset for namespace. Defaulting to broker setting."
    return f"{int(lag) // MINUTE_MS} minute(s)"


def offload_policies_body(a: argparse.Namespace) -> dict[str, Any]:
    """Pulsar's OffloadPoliciesImpl as pulsar-admin's set-offload-policies builds it."""
    if a.driver.lower() not in (d.lower() for d in DRIVERS):
        raise ValueError(f"The driver {a.driver} is not supported, (Possible values: {','.join(DRIVERS)}).")
    s3 = a.driver.lower() in ("s3", "aws-s3")
    if s3 and not a.region and not a.endpoint:
        raise ValueError("Either s3ManagedLedgerOffloadRegion or s3ManagedLedgerOffloadServiceEndpoint must be set"
                         " if s3 offload enabled")
    body: dict[str, Any] = {"managedLedgerOffloadDriver": a.driver}
    where = {"Bucket": a.bucket, "Region": a.region, "ServiceEndpoint": a.endpoint}
    for suffix, value in where.items():
        if value:
            body[f"managedLedgerOffload{suffix}"] = value
            if s3:
                body[f"s3ManagedLedgerOffload{suffix}"] = value
    if a.offload_after_threshold is not None:
        body["managedLedgerOffloadThresholdInBytes"] = parse_size_bytes(a.offload_after_threshold)
    if a.offload_after_threshold_s is not None:
        body["managedLedgerOffloadThresholdInSeconds"] = parse_time_s(a.offload_after_threshold_s)
    if a.offload_after_elapsed is not None:
        body["managedLedgerOffloadDeletionLagInMillis"] = parse_duration_ms(a.offload_after_elapsed)
    return body


def _set_policies(c: AdminClient, a: argparse.Namespace) -> Any:
    c.request("POST", namespace_path(a.namespace, "offloadPolicies"), offload_policies_body(a))


def policies_flags(p: argparse.ArgumentParser) -> None:
    """set-offload-policies' flags, as pulsar-admin's (the store's must be the broker's)."""
    p.add_argument("--driver", "-d", required=True,
                   help=f"one of {', '.join(DRIVERS)} (velamq: filesystem, aws-s3)")
    p.add_argument("--bucket", "-b", help="the bucket (S3)")
    p.add_argument("--region", "-r", help="the bucket's region (S3)")
    p.add_argument("--endpoint", "-e", help="the S3 service endpoint")
    p.add_argument("--offloadAfterThreshold", "-oat", dest="offload_after_threshold",
                   help="offload past this many bytes kept locally (1M, 5G)")
    p.add_argument("--offloadAfterThresholdInSeconds", "-oats", dest="offload_after_threshold_s",
                   help="offload ledgers sealed longer ago than this (100m, 3h)")
    p.add_argument("--offloadAfterElapsed", "-oae", dest="offload_after_elapsed",
                   help="delete local copies this long after offloading (10s, 3h)")


def add_namespace_offload_verbs(group: Group) -> None:
    def ns_only(p: argparse.ArgumentParser) -> None:
        p.add_argument("namespace", help="tenant/namespace")

    def threshold_args(p: argparse.ArgumentParser) -> None:
        ns_only(p)
        p.add_argument("--size", "-s", required=True,
                       help="bytes kept locally before offloading (10M, 16G); -1: the broker's; 0: as soon as sealed")
        p.add_argument("--time", "-t", default="-1",
                       help="offload ledgers sealed longer ago than this (10m, 5h, 3d); -1: not set")

    def lag_args(p: argparse.ArgumentParser) -> None:
        ns_only(p)
        p.add_argument("--lag", "-l", required=True, help="keep local copies this long after offloading (10m, 5h)")

    def policies_args(p: argparse.ArgumentParser) -> None:
        ns_only(p)
        policies_flags(p)

    verb(group, "set-offload-threshold", "offload a namespace's topics past a size or an age", _set_threshold,
         threshold_args)
    verb(group, "get-offload-threshold", "a namespace's offload thresholds", _get_threshold, ns_only)
    verb(group, "set-offload-deletion-lag", "how long local copies of offloaded ledgers are kept",
         lambda c, a: c.request("PUT", namespace_path(a.namespace, "offloadDeletionLagMs"),
                                parse_duration_ms(a.lag)), lag_args)
    verb(group, "get-offload-deletion-lag", "a namespace's offload deletion lag", _get_lag, ns_only)
    verb(group, "clear-offload-deletion-lag", "back to the broker's offload deletion lag",
         lambda c, a: c.request("DELETE", namespace_path(a.namespace, "offloadDeletionLagMs")), ns_only)
    verb(group, "set-offload-policies", "a namespace's offload policies (driver, bucket, thresholds, lag)",
         _set_policies, policies_args)
    verb(group, "get-offload-policies", "a namespace's offload policies",
         lambda c, a: c.request("GET", namespace_path(a.namespace, "offloadPolicies")), ns_only)
    verb(group, "remove-offload-policies", "remove a namespace's offload policies",
         lambda c, a: c.request("DELETE", namespace_path(a.namespace, "removeOffloadPolicies")), ns_only)
