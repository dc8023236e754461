"""Policies across the workers of one broker (issue 23): a policy change another worker made
reaches this worker's loaded topics through the shared metadata's change watch, with no new
command from their clients (a PRODUCER re-reads the policies anyway, so the producers here are
created before the change and only SEND afterwards).

The policy is a partitioned topic's topic-level maxMessageSize, set and removed through the admin
port: the worker that serves the call applies it to its partitions at once, the other one only by
the change watch (while the policy is set, its partitions carry topic policies; once removed,
they are back to their namespace's).
"""

from __future__ import annotations

import socket
import struct
import time
import urllib.parse

import pytest
from wait_helpers import wait_until

from velamq._bundles import NamespaceBundles, default_owner
from velamq.client import AdminClient
from velamq.protocol import build_entry, encode_command, encode_payload_command, pb
from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(300)

T = pb.BaseCommand
NAMESPACE = "public/default"
PARTITIONS = 8
LIMIT = 1024



def spread_over_both_workers(base: str) -> tuple[str, list[str]]:
    """A partitioned topic name (from `base`) whose partitions live on both workers."""
    bundles = NamespaceBundles.even(4)
    for k in range(100):
        topic = f"{base}x{k}"
        partitions = [f"persistent://{NAMESPACE}/{topic}-partition-{i}" for i in range(PARTITIONS)]
        if {default_owner(NAMESPACE, bundles.index_of(p), 2) for p in partitions} == {0, 1}:
            return topic, partitions
    raise AssertionError(f"no name from {base} spreads {PARTITIONS} partitions over two workers")


class RawProducer:
    """One producer on a plain binary-protocol connection to the topic's owner: each send waits
    for its reply (SEND_RECEIPT or SEND_ERROR), so nothing but the broker's policies decides it."""

    def __init__(self, admin: AdminClient, topic: str) -> None:
        found = admin.request("GET", f"/lookup/v2/topic/{topic.replace('://', '/')}")
        assert isinstance(found, dict)
        url = urllib.parse.urlsplit(found["brokerUrl"])
        assert url.hostname is not None and url.port is not None
        self.sock = socket.create_connection((url.hostname, url.port), timeout=30)
        connect = pb.BaseCommand(type=T.CONNECT)
        connect.connect.client_version = "policies-test"
        connect.connect.protocol_version = 21
        assert self._ask(encode_command(connect)).type == T.CONNECTED
        producer = pb.BaseCommand(type=T.PRODUCER)
        producer.producer.topic, producer.producer.producer_id, producer.producer.request_id = topic, 1, 1
        reply = self._ask(encode_command(producer))
        assert reply.type == T.PRODUCER_SUCCESS, reply
        self.name = reply.producer_success.producer_name
        self.sequence_id = 0

    def send(self, size: int) -> bool:
        """True if the broker stored a message of `size` bytes, False if it refused it."""
        self.sequence_id += 1
        meta = pb.MessageMetadata(producer_name=self.name, sequence_id=self.sequence_id,
                                  publish_time=int(time.time() * 1000))
        command = pb.BaseCommand(type=T.SEND)
        command.send.producer_id, command.send.sequence_id = 1, self.sequence_id
        reply = self._ask(encode_payload_command(command, build_entry(meta, b"x" * size)))
        assert reply.type in (T.SEND_RECEIPT, T.SEND_ERROR), reply
        return reply.type == T.SEND_RECEIPT

    def _ask(self, frame: bytes) -> pb.BaseCommand:
        self.sock.sendall(frame)
        while True:
            (total,) = struct.unpack(">I", self._exactly(4))
            body = self._exactly(total)
            (size,) = struct.unpack_from(">I", body)
            reply = pb.BaseCommand.FromString(body[4:4 + size])
            if reply.type != T.PING:
                return reply
            self.sock.sendall(encode_command(pb.BaseCommand(type=T.PONG, pong=pb.CommandPong())))

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "the broker closed the connection"
            data += chunk
        return data


def test_a_topic_policy_reaches_loaded_partitions_on_both_workers_and_goes_again(
    workers2: BrokerProcess, topic: str
) -> None:
    admin = AdminClient(workers2.admin_url)
    topic, partitions = spread_over_both_workers(topic)
    admin.request("PUT", f"/admin/v2/persistent/{NAMESPACE}/{topic}/partitions", PARTITIONS)
    producers = [RawProducer(admin, p) for p in partitions]
    try:
        assert all(p.send(2 * LIMIT) for p in producers)

        admin.request("POST", f"/admin/v2/persistent/{NAMESPACE}/{topic}/maxMessageSize", LIMIT)
        wait_until(lambda: not any(p.send(2 * LIMIT) for p in producers),
                   f"maxMessageSize={LIMIT} refuses larger messages on every partition")
        assert all(p.send(LIMIT // 2) for p in producers)

        admin.request("DELETE", f"/admin/v2/persistent/{NAMESPACE}/{topic}/maxMessageSize")
        wait_until(lambda: all(p.send(2 * LIMIT) for p in producers),
                   "with the topic policy removed, every partition takes larger messages again")
    finally:
        for p in producers:
            p.sock.close()
