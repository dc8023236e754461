"""The listener on real sockets: connection caps (total and per IP) close a new connection at once
and count it; accept() failing for want of descriptors pauses accepting (one log line, not one
per attempt) until the clock says to try again. The kernel's EMFILE is played by a listening
socket whose accept() refuses a given number of times (the outside world, faked)."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable

import pytest
from wait_helpers import until

from velamq import _limits
from velamq._clock import ManualClock
from velamq._log_limit import RateLimitedLog
from velamq.broker.session._listener import ConnectionLimits, Listener


class Recorder(asyncio.Protocol):
    def __init__(self, release: Callable[[], None], made: list[Recorder]) -> None:
        self.release = release
        self.lost = False
        made.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.release()


class RefusingSocket:
    """A listening socket whose accept() fails with EMFILE `refusals` times first."""

    def __init__(self, sock: socket.socket, refusals: int) -> None:
        self._sock = sock
        self.refusals = refusals
        self.attempts = 0

    def accept(self) -> tuple[socket.socket, object]:
        self.attempts += 1
        if self.refusals > 0:
            self.refusals -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return self._sock.accept()

    def __getattr__(self, name: str) -> object:
        return getattr(self._sock, name)


def listening_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


def test_caps_close_new_connections_at_once_and_count_them(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        clock = ManualClock()
        made: list[Recorder] = []
        limits = ConnectionLimits(max_total=3, max_per_ip=2)
        listener = Listener(lambda release: Recorder(release, made), limits, clock,
                            RateLimitedLog(logging.getLogger("test.listener"), clock))
        port = listener.start("127.0.0.1", 0)
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        await until(lambda: limits.refused_per_ip_total == 3)
        assert len(made) == 2 and limits.open == 2  # all from 127.0.0.1: two at most
        limits.max_per_ip = 0
        more = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        await until(lambda: limits.refused_max_total == 2)
        assert len(made) == 3 and limits.open_peak == 3
        for c in clients + more:
            c.close()
        await until(lambda: all(r.lost for r in made))
        assert limits.open == 0 and limits.per_ip == {}
        listener.close()

    with caplog.at_level(logging.WARNING, logger="test.listener"):
        asyncio.run(main())
    refusals = [r.getMessage() for r in caplog.records]
    assert len(refusals) == 2  # one line per cap per minute, not one per connection
    assert "brokerMaxConnectionsPerIp" in refusals[0] and "brokerMaxConnections " in refusals[1]


def test_emfile_pauses_accepting_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        clock = ManualClock()
        made: list[Recorder] = []
        listener = Listener(lambda release: Recorder(release, made), ConnectionLimits(0, 0), clock,
                            RateLimitedLog(logging.getLogger("test.listener"), clock))
        refusing = RefusingSocket(listening_socket(), refusals=5)
        port = listener.start_on(refusing)  # type: ignore[arg-type]
        client = socket.create_connection(("127.0.0.1", port))
        loop = asyncio.get_running_loop()
        for attempt in range(1, 6):
            await until(lambda: clock.sleepers == 1)  # accept is paused, waiting on the clock
            assert refusing.attempts == attempt
            # Not spinning on a socket that stays readable: nothing watches it while paused.
            assert not loop.remove_reader(refusing.fileno())
            clock.advance(_limits.accept_retry_s)
            await until(lambda a=attempt: refusing.attempts > a)  # type: ignore[misc]
        await until(lambda: len(made) == 1)
        assert listener.accept_errors_total == 5
        client.close()
        listener.close()

    with caplog.at_level(logging.WARNING, logger="test.listener"):
        asyncio.run(main())
    assert len(caplog.records) == 1 and "Too many open files" in caplog.records[0].getMessage()
