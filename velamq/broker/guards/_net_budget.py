"""The network's part of the memory budget: unsent outbound bytes and partial inbound frames.

Two bounds, both broker-wide, both a share of `memoryBudgetBytes` (velamq/server.py splits it):

    outbound   bytes written to client connections and not yet taken by the kernel: the
               connection's coalescing list plus the transport's write buffer. Each connection
               reports its figure when it writes, flushes, or is resumed; the kernel drains
               buffers without telling anyone, so the sum is an upper bound, and while it is over
               the bound a ticker on the clock asks every connection for its real figure again.
               Over the bound, every connection reports itself not writable, so dispatch stops
               (the per-connection water marks stop a single slow consumer long before that);
               once it is back under 3/4 of the bound every connection is told, so dispatch
               resumes everywhere.
    inbound    bytes of frames received in part (the decoder's buffer). Over the bound, a
               connection that holds more than `partial_frame_allowance_bytes` of a frame while
               the other connections hold more than half the bound is not read until that is no
               longer so (its bytes wait in the kernel's socket buffer). Small frames keep
               flowing, and a lone large frame always completes, even one larger than the bound.
               A paused connection's socket is not watched for reading, so its client leaving
               would go unseen (its FIN waits behind the bytes not read): while any are paused,
               they are checked every `paused_peer_check_s`, and closed if their peer hung up or
               if they have been paused longer than `paused_partial_frame_s` (a client that holds
               half a frame while the broker is short of room for them must not keep its
               connection and its descriptor for ever).

So memory held for the network stays within its share however many consumers stop reading or
however many clients send half a frame and wait. Lives on the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from velamq import _limits
from velamq._clock import Clock

# While outbound is over its bound, connections are asked for their real figures this often.
outbound_recount_s = 0.05
# While connections are paused for partial frames, they are checked for a peer gone this often,
# and closed once paused this long.
paused_peer_check_s = 1.0
paused_partial_frame_s = 10.0


class InboundHolder(Protocol):
    @property
    def partial_bytes(self) -> int:
        """Bytes of a partial frame this connection holds now."""
        ...

    def inbound_room(self) -> None:
        """Reading may go on."""
        ...

    def peer_gone(self) -> bool:
        """Whether the client has hung up (its socket is not read while paused)."""
        ...

    def abort(self) -> None:
        """Close the connection at once."""
        ...


class OutboundSource(Protocol):
    def outbound_bytes_now(self) -> int:
        """Unsent bytes right now (what the connection holds plus the transport's buffer)."""
        ...

    def outbound_room(self) -> None:
        """The broker-wide bound has room again: wake what waited for it."""
        ...


class NetworkBudget:
    """Broker-wide accounting of outbound and partial inbound bytes against their bounds."""

    def __init__(self, outbound_bytes_max: int, inbound_partial_bytes_max: int, clock: Clock) -> None:
        self.outbound_bytes_max = outbound_bytes_max
        self.inbound_partial_bytes_max = inbound_partial_bytes_max
        self.clock = clock
        self.outbound_bytes = 0
        self.outbound_bytes_peak = 0
        self.outbound_full_total = 0  # times the outbound bound was reached
        self.inbound_partial_bytes = 0
        self.inbound_partial_bytes_peak = 0
        self.inbound_pauses_total = 0
        self.paused_peers_closed_total = 0
        self._sources: dict[OutboundSource, int] = {}  # connections with unsent bytes
        self._connections: set[OutboundSource] = set()  # every open connection
        self._outbound_full = False
        self._recount: asyncio.Task[None] | None = None
        self._inbound_waiters: dict[InboundHolder, float] = {}  # holder -> paused since (clock)
        self._peer_check: asyncio.Task[None] | None = None

    @classmethod
    def share_of(cls, memory_bytes: int, clock: Clock) -> NetworkBudget:
        num, den = _limits.network_budget_share
        network = memory_bytes * num // den
        out_num, out_den = _limits.network_outbound_share
        outbound = network * out_num // out_den
        return cls(outbound, network - outbound, clock)

    # ---- outbound ----------------------------------------------------------------------------

    @property
    def outbound_full(self) -> bool:
        return self._outbound_full

    def register(self, source: OutboundSource) -> None:
        self._connections.add(source)

    def unregister(self, source: OutboundSource) -> None:
        self.outbound_set(source, 0)
        self._connections.discard(source)

    def outbound_set(self, source: OutboundSource, size: int) -> None:
        """A connection's unsent bytes are now `size` (0 when it closes)."""
        before = self._sources.pop(source, 0)
        if size > 0:
            self._sources[source] = size
        self.outbound_bytes += size - before
        if self.outbound_bytes > self.outbound_bytes_peak:
            self.outbound_bytes_peak = self.outbound_bytes
        if not self._outbound_full and self.outbound_bytes >= self.outbound_bytes_max > 0:
            self._outbound_full = True
            self.outbound_full_total += 1
            if self._recount is None or self._recount.done():
                self._recount = asyncio.get_running_loop().create_task(self._recount_until_room())
        elif self._outbound_full and self.outbound_bytes < self.outbound_bytes_max * 3 // 4:
            self._room()

    async def _recount_until_room(self) -> None:
        while self._outbound_full:
            await self.clock.sleep(outbound_recount_s)
            for source in list(self._sources):
                self.outbound_set(source, source.outbound_bytes_now())
            if self._outbound_full and not self._sources:
                self._room()

    def _room(self) -> None:
        self._outbound_full = False
        for source in list(self._connections):
            source.outbound_room()

    # ---- inbound -----------------------------------------------------------------------------

    def inbound_changed(self, delta: int) -> None:
        """Partial-frame bytes held by one connection changed by `delta`. Waiters are looked at
        when a large frame completes or a holder goes, not for every small frame."""
        self.inbound_partial_bytes += delta
        if self.inbound_partial_bytes > self.inbound_partial_bytes_peak:
            self.inbound_partial_bytes_peak = self.inbound_partial_bytes
        if self._inbound_waiters and delta < 0 and (
            -delta >= _limits.partial_frame_allowance_bytes
            or self.inbound_partial_bytes <= self.inbound_partial_bytes_max
        ):
            for holder in [h for h in self._inbound_waiters if not self.inbound_must_wait(h.partial_bytes)]:
                del self._inbound_waiters[holder]
                holder.inbound_room()

    def inbound_must_wait(self, held_bytes: int) -> bool:
        """Whether a connection holding `held_bytes` of a partial frame must stop being read."""
        return (
            self.inbound_partial_bytes > self.inbound_partial_bytes_max
            and held_bytes > _limits.partial_frame_allowance_bytes
            and self.inbound_partial_bytes - held_bytes > self.inbound_partial_bytes_max // 2
        )

    def wait_for_inbound_room(self, holder: InboundHolder) -> None:
        if holder not in self._inbound_waiters:
            self.inbound_pauses_total += 1
            self._inbound_waiters[holder] = self.clock.monotonic_s()
        if self._peer_check is None or self._peer_check.done():
            self._peer_check = asyncio.get_running_loop().create_task(self._check_paused_peers())

    async def _check_paused_peers(self) -> None:
        while self._inbound_waiters:
            await self.clock.sleep(paused_peer_check_s)
            too_old = self.clock.monotonic_s() - paused_partial_frame_s
            for holder, since in list(self._inbound_waiters.items()):
                if since <= too_old or holder.peer_gone():
                    self._inbound_waiters.pop(holder, None)
                    self.paused_peers_closed_total += 1
                    holder.abort()

    def cancel(self, holder: InboundHolder) -> None:
        self._inbound_waiters.pop(holder, None)

    def close(self) -> None:
        for task in (self._recount, self._peer_check):
            if task is not None:
                task.cancel()

    def metrics(self) -> dict[str, float]:
        p = "velamq_broker_network_"
        return {
            p + "outbound_bytes": self.outbound_bytes,
            p + "outbound_bytes_max": self.outbound_bytes_max,
            p + "outbound_bytes_peak": self.outbound_bytes_peak,
            p + "outbound_full_total": self.outbound_full_total,
            p + "inbound_partial_bytes": self.inbound_partial_bytes,
            p + "inbound_partial_bytes_max": self.inbound_partial_bytes_max,
            p + "inbound_partial_bytes_peak": self.inbound_partial_bytes_peak,
            p + "inbound_paused": len(self._inbound_waiters),
            p + "inbound_pauses_total": self.inbound_pauses_total,
            p + "inbound_paused_peers_closed_total": self.paused_peers_closed_total,
        }
