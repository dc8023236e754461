"""Flow control of one client connection's transport: what it writes, when it is read.

Writing. Frames queued during one loop iteration go out in one transport write (coalescing). The
connection is *writable* while its unsent bytes (queued here plus the transport's buffer) are
below the high-water mark and the broker-wide outbound bound has room; dispatch sends nothing to
a consumer whose connection is not writable (Netty's WriteBufferWaterMark and
Channel.isWritable, as Pulsar's dispatchers use them). The transport tells us when its buffer
passes the high mark (pause_writing) and when it drains below the low one (resume_writing);
`on_writable` is called whenever the connection becomes writable again, so dispatch resumes.

Reading stops for any of several reasons at once and resumes when the last one is gone:

    publish-buffer   the broker-wide publish buffer is full (ME-2): resumes when it has drained
    partial-frame    partial frames broker-wide are over their bound and this connection holds
                     more than the allowance of one (NetworkBudget): resumes at half the bound
    write-backlog    the transport's buffer is above the high-water mark: a client that does not
                     read its replies is not read either (replies to its requests would otherwise
                     pile up without bound); resumes with writing

`close()` gives everything back (outbound and inbound figures, waiters) and drops every callback,
so that nothing keeps the connection alive once it is closed.
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Callable

from velamq.broker.guards._net_budget import NetworkBudget
from velamq.storage import PublishBuffer

PUBLISH_BUFFER = "publish-buffer"
PARTIAL_FRAME = "partial-frame"
WRITE_BACKLOG = "write-backlog"
# A peer that closed (or reset) shows as one of these even with unread bytes in our buffer.
_HANGUP_EVENTS = getattr(select, "POLLRDHUP", 0) | select.POLLHUP | select.POLLERR


class TransportFlow:
    """Coalesced writes with water marks, and reading paused for named reasons (module docstring)."""

    def __init__(self, network: NetworkBudget, high_bytes: int, low_bytes: int) -> None:
        self._network = network
        self._high = high_bytes
        self._low = low_bytes
        self.transport: asyncio.Transport | None = None
        self.on_writable: Callable[[], None] | None = None
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._transport_paused = False  # pause_writing() was called and resume_writing() not yet
        self._was_writable = True
        self._read_pauses: set[str] = set()
        self._publish_buffer: PublishBuffer | None = None
        self._partial_bytes = 0
        self._closed = False

    def attach(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=self._high, low=self._low)
        self._network.register(self)

    # ---- writing -----------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        return (
            not self._transport_paused
            and self._out_bytes < self._high
            and not self._network.outbound_full
            and not self._closed
        )

    def write(self, data: bytes) -> None:
        if self._closed:
            return
        self._out.append(data)
        self._out_bytes += len(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)
        # `writable` spelled out (once per receipt or message): not closed is known here.
        if self._was_writable and (
            self._out_bytes >= self._high or self._transport_paused or self._network.outbound_full
        ):
            self._was_writable = False

    def flush(self) -> None:
        self._flush_scheduled = False
        transport = self.transport
        if self._out and transport is not None and not transport.is_closing():
            transport.write(b"".join(self._out))  # may call pause_writing() at once
        self._out.clear()
        self._out_bytes = 0
        if not self._closed:
            self._network.outbound_set(self, self.outbound_bytes_now())
            self._check_writable()

    def outbound_bytes_now(self) -> int:
        transport = self.transport
        buffered = transport.get_write_buffer_size() if transport is not None and not transport.is_closing() else 0
        return self._out_bytes + buffered

    def pause_writing(self) -> None:
        self._transport_paused = True
        self._was_writable = False
        self.pause_reading(WRITE_BACKLOG)

    def resume_writing(self) -> None:
        self._transport_paused = False
        self.resume_reading(WRITE_BACKLOG)
        if not self._closed:
            self._network.outbound_set(self, self.outbound_bytes_now())
            self._check_writable()

    def outbound_room(self) -> None:
        """The broker-wide bound has room again: whatever dispatch skipped this connection for
        it may go on (a wake-up too many costs a dispatch round that finds nothing to do)."""
        if self.writable:
            self._was_writable = True
            if self.on_writable is not None:
                self.on_writable()

    def _check_writable(self) -> None:
        if not self._was_writable and self.writable:
            self._was_writable = True
            if self.on_writable is not None:
                self.on_writable()

    # ---- reading -----------------------------------------------------------------------------

    def pause_reading(self, reason: str) -> None:
        if not self._read_pauses and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self._read_pauses.add(reason)

    def resume_reading(self, reason: str) -> None:
        if reason not in self._read_pauses:
            return
        self._read_pauses.discard(reason)
        if not self._read_pauses and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def pause_until_room(self, buffer: PublishBuffer) -> None:
        """ME-2: stop reading until the publish buffer has drained."""
        if PUBLISH_BUFFER not in self._read_pauses and not self._closed:
            self._publish_buffer = buffer
            self.pause_reading(PUBLISH_BUFFER)
            buffer.on_room(self._publish_buffer_room)

    def _publish_buffer_room(self) -> None:
        self._publish_buffer = None
        self.resume_reading(PUBLISH_BUFFER)

    def partial_frame(self, held_bytes: int) -> None:
        """After each read: this connection now holds `held_bytes` of a frame not yet complete."""
        delta = held_bytes - self._partial_bytes
        self._partial_bytes = held_bytes
        if delta:
            self._network.inbound_changed(delta)
        if self._network.inbound_must_wait(held_bytes) and PARTIAL_FRAME not in self._read_pauses:
            self.pause_reading(PARTIAL_FRAME)
            self._network.wait_for_inbound_room(self)

    @property
    def partial_bytes(self) -> int:
        return self._partial_bytes

    def inbound_room(self) -> None:
        self.resume_reading(PARTIAL_FRAME)

    def peer_gone(self) -> bool:
        transport = self.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None:
            return False
        try:
            poller = select.poll()
            poller.register(sock.fileno(), _HANGUP_EVENTS)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    @property
    def reading_paused_for(self) -> frozenset[str]:
        return frozenset(self._read_pauses)

    # ---- end ---------------------------------------------------------------------------------

    def close(self) -> None:
        """The connection is gone: give back its figures, forget waiters and callbacks."""
        if self._closed:
            return
        self._closed = True
        self._out.clear()
        self._out_bytes = 0
        self._network.unregister(self)
        self._network.cancel(self)
        if self._partial_bytes:
            self._network.inbound_changed(-self._partial_bytes)
            self._partial_bytes = 0
        if self._publish_buffer is not None:
            self._publish_buffer.cancel(self._publish_buffer_room)
            self._publish_buffer = None
        self.on_writable = None
        self.transport = None
