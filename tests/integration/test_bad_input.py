"""OP-6: bad input on the binary port gets an error reply or a closed connection, affects only the
offending connection, and loses nothing stored.

Raw TCP sockets send random bytes, truncated frames, a frame declaring 1 GiB, well-framed garbage
protobuf, an unknown command type and commands before CONNECT. Meanwhile the official client keeps
producing and consuming on the same broker, and a topic written before the attacks is checked at the end.

Frame layout (big-endian): [u32 totalSize][u32 cmdSize][BaseCommand], totalSize = 4 + cmdSize.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from wait_helpers import wait_until

from velamq.protocol import _pulsar_api_pb2 as pb
from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(180)

# How long the broker gets to answer or close an offending connection: only an upper bound (no test
# expects silence), so generous for a broker under attack on two loaded cores.
verdict_timeout_s = 30.0
seeded_count = 100

hypothesis_settings = settings(
    max_examples=50, deadline=None, derandomize=True, database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: each example may cost a timeout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# --- frames ---------------------------------------------------------------------------------------------

def raw_frame(body: bytes) -> bytes:
    return struct.pack(">II", len(body) + 4, len(body)) + body


def frame(cmd: Any) -> bytes:
    return raw_frame(cmd.SerializeToString())


def connect_frame() -> bytes:
    cmd = pb.BaseCommand(type=pb.BaseCommand.CONNECT)
    cmd.connect.client_version = "velamq-bad-input-test"
    cmd.connect.protocol_version = 20
    cmd.connect.auth_method_name = "none"
    return frame(cmd)


def lookup_frame() -> bytes:
    cmd = pb.BaseCommand(type=pb.BaseCommand.LOOKUP)
    cmd.lookupTopic.topic = "persistent://public/default/bad-input-lookup"
    cmd.lookupTopic.request_id = 1
    return frame(cmd)


def producer_frame() -> bytes:
    cmd = pb.BaseCommand(type=pb.BaseCommand.PRODUCER)
    cmd.producer.topic = "persistent://public/default/bad-input-producer"
    cmd.producer.producer_id = 1
    cmd.producer.request_id = 2
    return frame(cmd)


def subscribe_frame() -> bytes:
    cmd = pb.BaseCommand(type=pb.BaseCommand.SUBSCRIBE)
    cmd.subscribe.topic = "persistent://public/default/bad-input-sub"
    cmd.subscribe.subscription = "s"
    cmd.subscribe.subType = pb.CommandSubscribe.Exclusive
    cmd.subscribe.consumer_id = 1
    cmd.subscribe.request_id = 3
    return frame(cmd)


def typeless_frame() -> bytes:
    """A BaseCommand with no type at all (its enum default would read as CONNECT)."""
    return raw_frame(b"")


def send_frame() -> bytes:
    """A SEND with a (zero-checksum) payload, as a producer would send it."""
    cmd = pb.BaseCommand(type=pb.BaseCommand.SEND)
    cmd.send.producer_id = 1
    cmd.send.sequence_id = 0
    body = cmd.SerializeToString()
    meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=int(time.time() * 1000))
    meta_b = meta.SerializeToString()
    tail = struct.pack(">HII", 0x0E01, 0, len(meta_b)) + meta_b + b"payload"
    return struct.pack(">II", 4 + len(body) + len(tail), len(body)) + body + tail


def is_meaningful_command(body: bytes) -> bool:
    """True if body decodes to a complete BaseCommand whose sub-message for its type is present."""
    try:
        cmd = pb.BaseCommand.FromString(body)
    except Exception:
        return False
    if not cmd.HasField("type") or not cmd.IsInitialized():
        return False
    field = cmd.DESCRIPTOR.fields_by_number.get(int(cmd.type))
    return field is not None and cmd.HasField(field.name)


# --- sockets --------------------------------------------------------------------------------------------

def open_socket(b: BrokerProcess) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", b.broker_port), timeout=verdict_timeout_s)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exact(s: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def read_command(s: socket.socket) -> Any | None:
    """The next command from the broker, or None when the connection closed."""
    head = recv_exact(s, 4)
    if head is None:
        return None
    (total,) = struct.unpack(">I", head)
    assert total < 64 * 1024 * 1024, f"broker sent a frame of {total} bytes"
    rest = recv_exact(s, total)
    if rest is None:
        return None
    (cmd_size,) = struct.unpack(">I", rest[:4])
    return pb.BaseCommand.FromString(rest[4:4 + cmd_size])


def handshake(s: socket.socket) -> None:
    s.sendall(connect_frame())
    reply = read_command(s)
    assert reply is not None, "broker closed the connection on a valid CONNECT"
    assert reply.type == pb.BaseCommand.CONNECTED, reply


def verdict(s: socket.socket, timeout_s: float = verdict_timeout_s) -> str:
    """'closed', the name of the first command the broker replied with, or 'silent'."""
    s.settimeout(timeout_s)
    try:
        cmd = read_command(s)
    except TimeoutError:
        return "silent"
    except (ConnectionResetError, BrokenPipeError):
        return "closed"
    if cmd is None:
        return "closed"
    return str(pb.BaseCommand.Type.Name(cmd.type))


def closes(s: socket.socket, timeout_s: float = verdict_timeout_s) -> bool:
    """True if the broker closes the connection within timeout_s (anything it sends first is ignored)."""
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            s.settimeout(left)
            if not s.recv(65536):
                return True
    except TimeoutError:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True


def send_quietly(s: socket.socket, data: bytes) -> None:
    """Send, tolerating a broker that already closed the connection (a fine reaction to bad input)."""
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


def assert_error_or_closed(s: socket.socket, what: str) -> None:
    v = verdict(s)
    assert v in ("closed", "ERROR"), f"{what}: broker replied {v!r} instead of an ERROR or a close"


def assert_broker_alive(b: BrokerProcess) -> None:
    with open_socket(b) as s:
        handshake(s)


# --- background traffic and data written before the attacks --------------------------------------------

class Traffic:
    """The official client producing and consuming in a loop on the broker under attack."""

    def __init__(self, service_url: str, topic: str) -> None:
        self.client = pulsar.Client(service_url, operation_timeout_seconds=10,
                                    logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
        self.consumer = self.client.subscribe(topic, "live", consumer_type=pulsar.ConsumerType.Shared)
        self.producer = self.client.create_producer(topic, batching_enabled=False)
        self.sent = 0
        self.received = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="live-traffic")
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self.producer.send(b"live-%d" % i)
                self.sent += 1
                m = self.consumer.receive(10_000)
                if m.data() != b"live-%d" % i:
                    self.errors.append(f"expected live-{i}, got {m.data()[:40]!r}")
                self.consumer.acknowledge(m)
                self.received += 1
            except Exception as e:
                self.errors.append(f"message {i}: {type(e).__name__}: {e}")
                return
            i += 1
            time.sleep(0.01)

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(15)
        self.client.close()


@pytest.fixture(scope="module")
def seeded(broker: BrokerProcess) -> list[Any]:
    """A topic written before any attack; its ids, for the integrity check at the end."""
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producer = client.create_producer("bad-input-seeded", batching_enabled=False)
        return [producer.send(b"seed-%d" % i) for i in range(seeded_count)]
    finally:
        client.close()


@pytest.fixture(scope="module")
def traffic(broker: BrokerProcess, seeded: list[Any]) -> Iterator[Traffic]:
    t = Traffic(broker.service_url, "bad-input-live")
    yield t
    t.stop()
    # After every test of the module, whatever their (random) order: every round trip went through.
    assert not t.errors, t.errors
    assert t.received == t.sent, (t.sent, t.received)


@pytest.fixture(autouse=True)
def _broker_survives(broker: BrokerProcess, traffic: Traffic) -> Iterator[None]:
    yield
    assert_broker_alive(broker)
    assert not traffic.errors, traffic.errors


# --- attacks --------------------------------------------------------------------------------------------

@hypothesis_settings
@given(data=st.binary(min_size=1, max_size=600))
def test_random_bytes_then_eof(broker: BrokerProcess, data: bytes) -> None:
    with open_socket(broker) as s:
        send_quietly(s, data)
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        assert closes(s), f"broker kept the connection open after random bytes {data[:32]!r}… and EOF"


@hypothesis_settings
@given(body=st.binary(min_size=0, max_size=300))
def test_framed_garbage_before_connect(broker: BrokerProcess, body: bytes) -> None:
    assume(not (is_meaningful_command(body) and pb.BaseCommand.FromString(body).type == pb.BaseCommand.CONNECT))
    with open_socket(broker) as s:
        send_quietly(s, raw_frame(body))
        assert_error_or_closed(s, f"framed body {body[:32]!r} before CONNECT")


@hypothesis_settings
@given(body=st.binary(min_size=0, max_size=300))
def test_framed_garbage_after_connect(broker: BrokerProcess, body: bytes) -> None:
    assume(not is_meaningful_command(body))
    with open_socket(broker) as s:
        handshake(s)
        send_quietly(s, raw_frame(body))
        assert_error_or_closed(s, f"framed garbage {body[:32]!r} after CONNECT")


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 8, 9, -1])
def test_truncated_connect_then_eof(broker: BrokerProcess, cut: int) -> None:
    data = connect_frame()
    with open_socket(broker) as s:
        s.sendall(data[:cut])
        s.shutdown(socket.SHUT_WR)
        assert closes(s), f"broker kept the connection open after {len(data[:cut])} of {len(data)} bytes + EOF"


def test_truncated_command_after_connect_then_eof(broker: BrokerProcess) -> None:
    data = producer_frame()
    with open_socket(broker) as s:
        handshake(s)
        s.sendall(data[: len(data) // 2])
        s.shutdown(socket.SHUT_WR)
        assert closes(s)


@pytest.mark.parametrize("after_connect", [False, True], ids=["before-connect", "after-connect"])
def test_frame_declaring_one_gib(broker: BrokerProcess, after_connect: bool) -> None:
    with open_socket(broker) as s:
        if after_connect:
            handshake(s)
        send_quietly(s, struct.pack(">II", 1 << 30, 16) + b"\x08\x12" + b"\x00" * 100)
        assert_error_or_closed(s, "frame declaring 1 GiB")


def test_frame_larger_than_max_message_size(broker: BrokerProcess) -> None:
    """64 MiB declared, far above maxMessageSize + 10 KiB: refused before it is read."""
    with open_socket(broker) as s:
        handshake(s)
        send_quietly(s, struct.pack(">II", 64 * 1024 * 1024, 16) + b"\x00" * 1000)
        assert_error_or_closed(s, "64 MiB frame")


@pytest.mark.parametrize("header", [
    struct.pack(">I", 0),                       # empty frame
    struct.pack(">II", 4, 0),                   # frame with an empty command
    struct.pack(">II", 8, 100) + b"\x00" * 4,   # command size larger than the frame
    struct.pack(">II", 3, 0) + b"\x00" * 3,     # frame too short to hold a command size
], ids=["zero-total", "empty-command", "cmd-larger-than-frame", "total-below-4"])
def test_inconsistent_sizes(broker: BrokerProcess, header: bytes) -> None:
    with open_socket(broker) as s:
        handshake(s)
        send_quietly(s, header)
        assert_error_or_closed(s, f"inconsistent frame header {header!r}")


def test_garbage_protobuf(broker: BrokerProcess) -> None:
    with open_socket(broker) as s:
        handshake(s)
        s.sendall(raw_frame(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
        assert_error_or_closed(s, "undecodable BaseCommand")


@pytest.mark.parametrize("body", [
    b"\x08\xe7\x07",                       # type = 999, not in the enum
    b"\x08\x44\xa2\x04\x02\x08\x01",       # TOPIC_MIGRATED (68): broker-to-client only
    b"\x08\x05",                           # PRODUCER without its sub-message
    b"\x08\x09",                           # MESSAGE: broker-to-client only
    b"\x08\x22",                           # GET_SCHEMA without its sub-message
    b"\x08\x0f",                           # CLOSE_PRODUCER without its sub-message
], ids=["unknown-type-999", "topic-migrated", "producer-without-body", "message-from-client",
        "get-schema-without-body", "close-producer-without-body"])
def test_unknown_or_unexpected_command(broker: BrokerProcess, body: bytes) -> None:
    with open_socket(broker) as s:
        handshake(s)
        s.sendall(raw_frame(body))
        assert_error_or_closed(s, f"command body {body!r}")


@pytest.mark.parametrize("make", [lookup_frame, producer_frame, subscribe_frame, send_frame, typeless_frame],
                         ids=["lookup", "producer", "subscribe", "send", "typeless"])
def test_command_before_connect(broker: BrokerProcess, make: Any) -> None:
    with open_socket(broker) as s:
        s.sendall(make())
        assert_error_or_closed(s, f"{make.__name__} before CONNECT")


def test_second_connect(broker: BrokerProcess) -> None:
    with open_socket(broker) as s:
        handshake(s)
        s.sendall(connect_frame())
        assert_error_or_closed(s, "second CONNECT")


def test_many_bad_connections_at_once(broker: BrokerProcess) -> None:
    socks = [open_socket(broker) for _ in range(50)]
    try:
        for i, s in enumerate(socks):
            send_quietly(s, struct.pack(">II", 1 << 30, 16) if i % 2 else b"\xde\xad\xbe\xef" * 3)
        for s in socks:
            assert_error_or_closed(s, "frame declaring gigabytes (50 connections at once)")
    finally:
        for s in socks:
            s.close()


def test_half_open_connection_does_not_block_others(broker: BrokerProcess) -> None:
    """A client that sends half a frame and then stalls holds only its own connection."""
    stalled = open_socket(broker)
    try:
        stalled.sendall(connect_frame()[:6])
        assert_broker_alive(broker)
    finally:
        stalled.close()


# The tests run in random order: this one checks after whatever attacks came before it, and the
# traffic fixture checks the whole module's round trips at its end (it does not stop them here).
def test_traffic_and_stored_data_unaffected(broker: BrokerProcess, traffic: Traffic, seeded: list[Any]) -> None:
    # Traffic still flows: a few more round trips (at least 11 in all, however early this runs).
    more = max(traffic.received + 5, 11)
    wait_until(lambda: traffic.received >= more or traffic.errors, "a few more round trips of the live traffic")
    assert not traffic.errors, traffic.errors

    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        reader = client.create_reader("bad-input-seeded", pulsar.MessageId.earliest)
        msgs = [reader.read_next(10_000) for _ in range(seeded_count)]
        assert [m.data() for m in msgs] == [b"seed-%d" % i for i in range(seeded_count)]
        assert [m.message_id() for m in msgs] == seeded
        assert not reader.has_message_available()
    finally:
        client.close()
