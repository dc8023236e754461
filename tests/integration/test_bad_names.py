"""Names and strings against a real broker process (OP-6):

- string fields that are not UTF-8 (producer, subscription and topic names, properties, message
  metadata) are refused with a clear error before anything is registered or stored;
- odd but valid names (quotes, controls, line separators, non-Latin text) go through, and the
  admin JSON about them answers 200;
- `bar-partition-3` without a partitioned `bar` is an ordinary topic for the broker and for
  `velamq admin storage check` alike (which used to call it an orphan, and remove it with --delete).
"""

from __future__ import annotations

import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from limits_helpers import T, command, handshake, http, read_frames

from velamq.protocol import encode_payload_command, pb, with_checksum
from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(120)

NS = "persistent://public/default/"
BAD = b"bad\xff\xfe"


def garbled(data: bytes) -> bytes:
    assert data.count(b"XXXXX") == 1
    return data.replace(b"XXXXX", BAD)


def stats(broker: BrokerProcess, local: str) -> tuple[int, Any]:
    return http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default/{urllib.parse.quote(local)}/stats")


def test_non_utf8_fields_are_refused_and_nothing_is_registered_or_stored(tmp_path: Path) -> None:
    with run_broker(tmp_path / "data") as broker:
        topic = NS + "strict"
        sock = handshake(broker.broker_port)
        sock.sendall(garbled(command(T.PRODUCER, "producer", topic=topic, producer_id=1, request_id=1,
                                     producer_name="XXXXX")))
        (error,) = read_frames(sock, 1)
        assert error.command.error.message == "producer.producer_name is not valid UTF-8"
        sock.sendall(garbled(command(T.SUBSCRIBE, "subscribe", topic=topic, subscription="XXXXX", subType=0,
                                     consumer_id=1, request_id=2)))
        (error,) = read_frames(sock, 1)
        assert error.command.error.message == "subscribe.subscription is not valid UTF-8"
        sock.sendall(garbled(command(T.LOOKUP, "lookupTopic", topic=NS + "XXXXX", request_id=3)))
        (lookup,) = read_frames(sock, 1)
        assert lookup.command.lookupTopicResponse.error == pb.InvalidTopicName
        assert stats(broker, "strict")[0] == 404  # nothing was even created

        sock.sendall(command(T.PRODUCER, "producer", topic=topic, producer_id=2, request_id=4))
        (ok,) = read_frames(sock, 1)
        assert ok.command.type == T.PRODUCER_SUCCESS
        send = pb.BaseCommand(type=T.SEND)
        send.send.producer_id, send.send.sequence_id = 2, 0
        metadata = pb.MessageMetadata(producer_name=ok.command.producer_success.producer_name, sequence_id=0,
                                      publish_time=1, properties=[pb.KeyValue(key="k", value="XXXXX")])
        meta = metadata.SerializeToString()
        entry = with_checksum(garbled(len(meta).to_bytes(4, "big") + meta + b"payload"))
        sock.sendall(encode_payload_command(send, entry))
        sock.settimeout(10)
        assert sock.recv(65536) == b""  # SEND has no request id to refuse: its connection is closed
        sock.close()

        status, body = stats(broker, "strict")
        assert status == 200 and body["msgInCounter"] == 0 and body["publishers"] == []
        assert body["subscriptions"] == {}
        status, internal = http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default/strict/internalStats")
        assert status == 200 and internal["numberOfEntries"] == 0


def test_odd_names_go_through_and_admin_json_answers(tmp_path: Path, make_client: Any) -> None:
    odd = 'p"\\\u2028\u0001é☃'
    config = tmp_path / "broker.conf"
    config.write_text("exposeTopicLevelMetricsInPrometheus=true\n")  # the odd topic name appears on /metrics
    with run_broker(tmp_path / "data", extra_args=["--config", str(config)]) as broker:
        client = make_client(broker.service_url)
        local = "odd-é"
        producer = client.create_producer(NS + local, producer_name=odd, properties={"k\u0000": "v\u2029"})
        consumer = client.subscribe(NS + local, "sub ☃ é", consumer_name=odd)
        producer.send(b"x", properties={"ключ": "значение\u0001"})
        assert consumer.receive(timeout_millis=10_000).properties() == {"ключ": "значение\u0001"}
        status, body = stats(broker, local)
        assert status == 200
        assert body["publishers"][0]["producerName"] == odd
        assert body["subscriptions"]["sub ☃ é"]["consumers"][0]["consumerName"] == odd
        with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=10) as page:
            assert page.status == 200 and "odd-" in page.read().decode()


def test_a_partition_name_without_a_partitioned_parent_is_an_ordinary_topic(tmp_path: Path, make_client: Any) -> None:
    data_dir = tmp_path / "data"
    with run_broker(data_dir) as broker:
        client = make_client(broker.service_url)
        topic = NS + "bar-partition-3"
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"kept")
        assert consumer.receive(timeout_millis=10_000).data() == b"kept"
        status, listed = http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default")
        assert status == 200 and topic in listed
        client.close()
    check = subprocess.run([sys.executable, "-m", "velamq", "admin", "storage", "check", "--data-dir", str(data_dir)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr  # nothing to report, nothing to remove
    with run_broker(data_dir) as broker:
        status, body = stats(broker, "bar-partition-3")
        assert status == 200 and body["subscriptions"]["s"]["msgBacklog"] == 1  # its data and cursor kept
