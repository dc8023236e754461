"""Memory under clients that stop reading or stop sending, for a broker with `--memory 256M`:

- a consumer that grants 1 000 000 permits and never reads its socket while a producer writes
  VELAMQ_SLOW_CONSUMER_BYTES (512 MiB here; benchmarks/soak.py runs 1 GiB and more): the broker's
  RSS stays within the budget + 150 MB (dispatch stops at the connection's high-water mark;
  before, everything went into the transport's buffer: 1.2 GB for 1 GB produced);
- 100 connections that each send all but 16 bytes of a 5 MB frame and wait: within the budget +
  150 MB (partial frames have a broker-wide bound; before, +500 MB), and once they are gone their
  memory is given back (before, a reference cycle kept it until a garbage collection).
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from limits_helpers import (
    PeakRss,
    frame_header,
    handshake,
    metrics,
    rss_bytes,
    stalled_consumer,
)
from wait_helpers import wait_until

from velamq.testing import run_broker

pytestmark = pytest.mark.timeout(240)

MIB = 1 << 20
budget_bytes = 256 * MIB
slack_bytes = 150 * MIB
slow_consumer_bytes = int(os.environ.get("VELAMQ_SLOW_CONSUMER_BYTES", 512 * MIB))
message_bytes = 64 * 1024


def test_a_consumer_that_never_reads_does_not_grow_the_broker(tmp_path: Path, make_client: Any) -> None:
    with run_broker(tmp_path / "data", ["--memory", "256M", "--sync-policy", "none"]) as broker:
        topic = "persistent://public/default/never-read"
        slow = stalled_consumer(broker.broker_port, topic)
        client = make_client(broker.service_url)
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True,
                                          max_pending_messages=200)
        rss = PeakRss(broker.pid or 0)
        payload = b"x" * message_bytes
        for _ in range(slow_consumer_bytes // message_bytes):
            producer.send_async(payload, None)
        producer.flush()
        peak = rss.stop()
        figures = metrics(broker.admin_url)
        assert figures["velamq_broker_network_outbound_bytes"] < 8 * MIB  # one connection's marks, about
        assert peak < budget_bytes + slack_bytes, f"peak RSS {peak / MIB:.0f} MiB"
        slow.close()


def test_half_sent_frames_are_bounded_and_given_back(tmp_path: Path) -> None:
    connections = 100
    frame_bytes = 5_000_000
    with run_broker(tmp_path / "data", ["--memory", "256M"]) as broker:
        base = rss_bytes(broker.pid or 0)
        socks = [handshake(broker.broker_port) for _ in range(connections)]
        rss = PeakRss(broker.pid or 0)
        body = memoryview(frame_header(frame_bytes) + b"\0" * (frame_bytes - 8 - 16))
        left = {s: body for s in socks}
        for s in socks:
            s.setblocking(False)

        def sent_or_paused() -> bool:
            """Every connection sent all it will (all but 16 bytes), or the broker stopped reading
            it (a paused one may still have taken all of it into the kernel's buffers)."""
            for s in list(left):
                try:
                    while left[s]:
                        left[s] = left[s][s.send(left[s][: 1 << 20]):]
                    del left[s]
                except BlockingIOError:
                    pass
            return len(left) <= metrics(broker.admin_url)["velamq_broker_network_inbound_paused"]

        wait_until(sent_or_paused, timeout_s=60, what="partial frames sent or paused")
        held: list[tuple[float, float]] = []  # (the partial bytes, since when they have not changed)

        def steady() -> bool:
            """The same figure for 0.3 s."""
            now, figure = time.monotonic(), metrics(broker.admin_url)["velamq_broker_network_inbound_partial_bytes"]
            if not held or held[0][0] != figure:
                held[:] = [(figure, now)]
            return now - held[0][1] >= 0.3

        wait_until(steady, what="partial frames held steady")
        peak = rss.stop()
        figures = metrics(broker.admin_url)
        assert figures["velamq_broker_network_inbound_paused"] > 0
        assert peak < budget_bytes + slack_bytes, f"peak RSS {peak / MIB:.0f} MiB"
        for s in socks:
            # A reset: a graceful close's FIN would wait behind the bytes the broker does not read
            # (that client is seen by the keep-alive instead, after two silent intervals).
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        wait_until(lambda: metrics(broker.admin_url)["velamq_broker_network_inbound_partial_bytes"] == 0,
                 what="partial frames given back")
        wait_until(lambda: metrics(broker.admin_url)["velamq_broker_connections_open"] == 0)
        wait_until(lambda: rss_bytes(broker.pid or 0) <= base + 50 * MIB,
                   lambda: f"RSS back within 50 MiB of the base (peak {peak / MIB:.0f} MiB, base {base / MIB:.0f} MiB, "
                           f"now {rss_bytes(broker.pid or 0) / MIB:.0f} MiB)")
