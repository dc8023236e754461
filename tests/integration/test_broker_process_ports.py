"""velamq.testing's broker process and its free ports when other processes share the machine (the
test suite runs on several workers): a port that free_port() gave but something else bound before
the broker did costs a first start nothing (new free ports are taken), while a restart keeps the
ports clients know and fails with the broker's own words."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from velamq.testing import BrokerProcess


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port that something listens on for the duration of the test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_a_first_start_whose_port_was_taken_takes_other_free_ports(tmp_path: Path, taken_port: int) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.broker_port = taken_port  # as if another process had bound it since free_port()
    broker.start()
    try:
        assert broker.broker_port != taken_port
        assert "[Errno 98]" in broker.output  # the first attempt did meet the taken port
        with socket.create_connection(("127.0.0.1", broker.broker_port), timeout=10):
            pass
    finally:
        broker.stop()


def test_a_restart_keeps_its_ports_and_says_why_it_cannot_start(tmp_path: Path, taken_port: int) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    broker.stop()
    ports = broker.broker_port, broker.http_port
    broker.http_port = taken_port  # taken while the broker was down (clients know the old one)
    with pytest.raises(RuntimeError, match=r"did not start(.|\n)*Errno 98"):
        broker.start()
    assert (broker.broker_port, broker.http_port) == (ports[0], taken_port)
