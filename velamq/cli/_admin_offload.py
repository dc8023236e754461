"""The `velamq admin topics` verbs of tiered storage (docs/offload.md), as pulsar-admin has them.

    offload         -s SIZE         offload every sealed ledger but the newest ones that together
                                    hold at most SIZE (10M, 1G; 0: every sealed ledger)
    offload-status  [-w]            NOT_RUN, RUNNING, SUCCESS or ERROR (with the error), and the
                                    first message not offloaded; -w waits while it runs

As in pulsar-admin, `offload` reads the topic's internal stats and asks the broker to offload
everything before the first ledger of the newest ones within SIZE.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from velamq.cli._admin_output import parse_size_bytes
from velamq.cli._admin_policies import Group, topic_path, verb
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
