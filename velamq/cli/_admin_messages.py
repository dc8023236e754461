"""The `velamq admin topics` verbs that read stored messages, and how messages are printed.

    peek-messages      -s SUB [-n N]                  the next N of a subscription's backlog
    get-message-by-id  -l LEDGER -e ENTRY             one stored message by its id
    examine-messages   [-i earliest|latest] [-m N]    the N-th message from either end (default:
                                                      the newest)
    get-message-id     -d DATETIME                    the id of the first message published at or
                                                      after an ISO-8601 time (2024-05-01T12:00:00Z)

A message comes back as the REST API answers it (payload in the body, metadata in X-Pulsar-*
headers); a batch is split into its messages as pulsar-admin splits it. The table output prints
each message's id, headers and payload (UTF-8 text, or base64 with payloadEncoding base64).
"""

from __future__ import annotations

import argparse
import base64
import json
from datetime import UTC, datetime
from typing import Any

from velamq.cli._admin_policies import Group, topic_path, verb
from velamq.client import AdminClient, AdminError, AdminReply


def _peeked(reply: AdminReply, position: int | str) -> list[dict[str, Any]]:
    """Messages of one entry; a whole batch is split as pulsar-admin splits it."""
    message_id = reply.headers.get("X-Pulsar-Message-ID", str(position))
    headers = {k: v for k, v in reply.headers.items() if k.lower().startswith("x-pulsar-")}
    count = reply.headers.get("X-Pulsar-num-batch-message")
    if count is None:
        return [{"messageId": message_id, "headers": headers, "payload": reply.body}]
    from velamq.protocol import parse_batch  # only here: it loads protobuf

    messages = []
    for index, (single, payload) in enumerate(parse_batch(reply.body, int(count))):
        properties = {kv.key: kv.value for kv in single.properties}
        item = {**headers, "X-Pulsar-Property": json.dumps(properties)} if properties else headers
        if single.HasField("partition_key"):
            item = {**item, "X-Pulsar-partition-key": single.partition_key}
        messages.append({"messageId": f"{message_id}:{index}", "headers": item, "payload": payload})
    return messages


def _printable(message: dict[str, Any]) -> dict[str, Any]:
    payload: bytes = message["payload"]
    try:
        text, encoding = payload.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(payload).decode("ascii"), "base64"
    return {"messageId": message["messageId"], "headers": message["headers"], "payload": text,
            "payloadEncoding": encoding}


def render_messages(messages: list[dict[str, Any]]) -> str:
    blocks = []
    for m in messages:
        lines = [f"Message ID: {m['messageId']}"]
        lines += [f"  {k}: {v}" for k, v in m["headers"].items() if k.lower() != "x-pulsar-message-id"]
        lines.append(f"  payload ({m['payloadEncoding']}): {m['payload']}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _peek(c: AdminClient, a: argparse.Namespace) -> Any:
    messages: list[dict[str, Any]] = []
    position = 1
    while len(messages) < a.count:
        try:
            reply = c.request_raw("GET", topic_path(a.topic, "subscription", a.subscription, "position", str(position)))
        except AdminError as exc:
            if exc.status == 404 and messages:
                break  # past the end of the backlog
            raise
        messages += _peeked(reply, position)
        position += 1
    return [_printable(m) for m in messages[: a.count]]


def _by_id(c: AdminClient, a: argparse.Namespace) -> Any:
    reply = c.request_raw("GET", topic_path(a.topic, "ledger", str(a.ledger_id), "entry", str(a.entry_id)))
    return [_printable(m) for m in _peeked(reply, f"{a.ledger_id}:{a.entry_id}")]


def _examine(c: AdminClient, a: argparse.Namespace) -> Any:
    reply = c.request_raw("GET", topic_path(a.topic, "examinemessage"),
                          query={"initialPosition": a.initial_position, "messagePosition": a.message_position})
    return [_printable(m) for m in _peeked(reply, a.message_position)]


def parse_datetime_ms(text: str) -> int:
    """ISO 8601 ("2024-05-01T12:00:00Z", "...+02:00", "2024-05-01 12:00:00.250") in epoch ms; a
    time without a zone is UTC."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"bad datetime {text!r}: use ISO 8601, e.g. 2024-05-01T12:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def add_message_verbs(group: Group) -> None:
    def sub_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")
        p.add_argument("--subscription", "-s", required=True, help="subscription name")
        p.add_argument("--count", "-n", type=int, default=1, help="messages to show (default 1)")

    def id_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")
        p.add_argument("--ledgerId", "-l", dest="ledger_id", type=int, required=True, help="ledger id")
        p.add_argument("--entryId", "-e", dest="entry_id", type=int, required=True, help="entry id")

    def examine_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")
        p.add_argument("--initialPosition", "-i", dest="initial_position", default="latest",
                       choices=["earliest", "latest"], help="count from the oldest or the newest (default)")
        p.add_argument("--messagePosition", "-m", dest="message_position", type=int, default=1,
                       help="which message, 1 = the first from that end (default 1)")

    def time_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")
        p.add_argument("--datetime", "-d", required=True, help="ISO 8601, e.g. 2024-05-01T12:00:00Z")

    for name, help_text, handler, args in (
        ("peek-messages", "show the next messages of a subscription without consuming them", _peek, sub_args),
        ("get-message-by-id", "show a stored message by its id", _by_id, id_args),
        ("examine-messages", "show the n-th stored message from the oldest or the newest", _examine, examine_args),
    ):
        verb(group, name, help_text, handler, args).set_defaults(renderer=render_messages)
    verb(group, "get-message-id", "id of the first message published at or after a time",
         lambda c, a: c.request("GET", topic_path(a.topic, "messageid", str(parse_datetime_ms(a.datetime)))),
         time_args)
