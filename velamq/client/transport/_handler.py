"""What producers and consumers share: finding their broker, (re)connecting with backoff.

    start()                first connection; retried with backoff while errors are retriable, until
                           operation_timeout_s; a fatal error (TopicNotFound, ProducerFenced, ...)
                           or the timeout is raised to the caller. The first attempt goes to the
                           connection of a live handle of the same topic when there is one
                           (_live_topics.py: no LOOKUP); every retry looks the topic up
    connection lost /      reconnect in the background: lookup again, get a pooled connection,
    CLOSE_* from broker    register again (PRODUCER / SUBSCRIBE), with exponential backoff
                           (initial_backoff_s doubling up to max_backoff_s, with jitter);
                           a CLOSE_* naming the broker that took the topic over (PIP-307's
                           assignedBrokerServiceUrl) goes there at once, without a lookup;
                           a fatal error ends the handler (_on_fatal), except where the
                           handler keeps trying (_retry_after_refusal: backlog quotas)
    cluster_switched()     the client failed over to another cluster: the same reconnect, at
                           once, after _on_cluster_switch dropped the old cluster's state

A handle is in the client's LiveTopics from the moment the broker accepted it until it closes,
fails, or loses its connection (closed by the broker included): _attached and _detach.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from typing import Protocol

from velamq._clock import Clock
from velamq.client._config import ClientConfig
from velamq.client._errors import AlreadyClosedError, OperationTimeoutError, is_retriable
from velamq.client.transport._connection import Connection
from velamq.client.transport._live_topics import LiveTopics
from velamq.client.transport._lookup import LookupService
from velamq.client.transport._pool import ConnectionPool
from velamq.protocol import pb

log = logging.getLogger("velamq.client")


class ClientContext(Protocol):
    config: ClientConfig
    pool: ConnectionPool
    lookup: LookupService
    live_topics: LiveTopics
    clock: Clock
    request_ids: itertools.count[int]

    @property
    def is_closed(self) -> bool: ...


class ClientOwner(ClientContext, Protocol):
    """What a producer, consumer or reader needs of the client that made it, beyond what its
    connection handlers need: partition counts, and leaving the client's set when it closes.
    AsyncClient is one; the children never see more of it than this."""

    async def partitions_of(self, topic: str) -> int: ...

    def forget(self, child: object) -> None:
        """The child closed: the client no longer closes it at its own close."""
        ...


# One generator for every handle's jitter: a random.Random of its own per handle was seeded from
# the system's entropy (a tenth of the client's CPU when topics are created one after the other)
# and kept 2.5 KB of state per producer and consumer.
_JITTER = random.Random()


class Backoff:
    """Exponential backoff with jitter: initial, 2x each time, capped at max."""

    def __init__(self, initial_s: float, max_s: float, rng: random.Random | None = None) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self._next_s = initial_s
        self._rng = rng or _JITTER

    def next(self) -> float:
        current = self._next_s
        self._next_s = min(self.max_s, self._next_s * 2)
        return current * (0.9 + 0.2 * self._rng.random())

    def reset(self) -> None:
        self._next_s = self.initial_s


class ConnectionHandler:
    """Base of PartitionProducer and TopicConsumer."""

    def __init__(self, client: ClientContext, topic: str) -> None:
        self.client = client
        self.topic = topic
        self.connection: Connection | None = None
        self._backoff = Backoff(client.config.initial_backoff_s, client.config.max_backoff_s)
        self._reconnect_task: asyncio.Task[None] | None = None
        self._closing = False
        self._failed: BaseException | None = None
        self._assigned_url: str | None = None  # where the next reconnect goes first (PIP-307)

    # ---- to be provided by subclasses ------------------------------------------------------------

    async def _register(self, connection: Connection) -> None:
        """Send PRODUCER / SUBSCRIBE on this connection; raise on refusal."""
        raise NotImplementedError

    def _on_fatal(self, error: BaseException) -> None:
        """Reconnecting failed for good."""

    def _on_disconnected(self) -> None:
        """The connection went away (before reconnecting)."""

    def _on_cluster_switch(self) -> None:
        """The client moved to another cluster: forget what only made sense on the old one."""

    def _retry_after_refusal(self, error: BaseException) -> bool:
        """A reconnect was refused with a non-retriable error: True to keep trying anyway (a
        producer blocked by a backlog quota waits for the backlog to drain)."""
        return False

    # ---- connecting ------------------------------------------------------------------------------

    def new_request_id(self) -> int:
        return next(self.client.request_ids)

    async def _request_close(self, connection: Connection, command: pb.BaseCommand, request_id: int) -> None:
        """CLOSE_PRODUCER / CLOSE_CONSUMER: closing goes on whatever the broker answers."""
        try:
            await connection.request(command, request_id)
        except Exception as exc:
            log.debug("%s: %s failed: %s", self.topic, pb.BaseCommand.Type.Name(command.type), exc)

    async def _connect_once(self, remembered: bool = False) -> None:
        """Find the topic's broker and register there. `remembered`: a live handle's connection to
        the topic's owner may stand for the LOOKUP (a first attempt only, never after an error)."""
        connection = self.client.live_topics.owner_connection(self.topic) if remembered else None
        if connection is None:
            address = await self.client.lookup.lookup(self.topic)
            connection = await self.client.pool.get(address.logical_url, address.physical_url)
        await self._register(connection)
        self._attached(connection)

    def _attached(self, connection: Connection) -> None:
        """The broker accepted this handle on `connection`: a live handle of its topic, unless it
        was closed or failed while registering (_register then leaves self.connection alone)."""
        if self.connection is connection and connection.is_ready and not self._closing and self._failed is None:
            self.client.live_topics.attach(self.topic, self, connection)

    def _detach(self) -> None:
        self.client.live_topics.detach(self.topic, self)

    async def start(self) -> None:
        """First connection: retry retriable errors until the operation timeout."""
        deadline = self.client.clock.monotonic_s() + self.client.config.operation_timeout_s
        first_attempt = True
        while True:
            try:
                await self._connect_once(remembered=first_attempt)
                self._backoff.reset()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                first_attempt = False
                if self._closing or self.client.is_closed:
                    raise AlreadyClosedError(f"{self.topic}: closed while connecting") from None
                if not is_retriable(exc):
                    raise
                delay = self._backoff.next()
                if self.client.clock.monotonic_s() + delay > deadline:
                    raise OperationTimeoutError(f"{self.topic}: could not connect in time: {exc}") from exc
                log.debug("%s: connect failed (%s), retrying in %.2f s", self.topic, exc, delay)
                await asyncio.sleep(delay)

    def _connection_gone(self, connection: Connection, assigned_url: str | None = None) -> None:
        if connection is not self.connection:
            return
        self._detach()
        self.connection = None
        self._assigned_url = assigned_url
        self._on_disconnected()
        self.schedule_reconnect()

    def schedule_reconnect(self) -> None:
        if self._closing or self._failed is not None or self.client.is_closed:
            return
        if self._reconnect_task is not None and not self._reconnect_task.done():
            return
        self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect_loop())

    async def _reconnect_loop(self) -> None:
        while not self._closing and not self.client.is_closed:
            assigned, self._assigned_url = self._assigned_url, None
            if assigned is None:
                await asyncio.sleep(self._backoff.next())
            if self._closing or self.client.is_closed:
                return
            try:
                if assigned is not None:
                    connection = await self.client.pool.get(assigned, assigned)
                    await self._register(connection)
                    self._attached(connection)
                else:
                    await self._connect_once()
                self._backoff.reset()
                return
            except asyncio.CancelledError:
                return
            except Exception as exc:
                if self._closing or self.client.is_closed:
                    return
                if not is_retriable(exc) and not self._retry_after_refusal(exc):
                    log.warning("%s: reconnect failed for good: %s", self.topic, exc)
                    self._failed = exc
                    self._on_fatal(exc)
                    return
                log.debug("%s: reconnect failed (%s), retrying", self.topic, exc)

    def cluster_switched(self) -> None:
        """The client moved to another cluster (its connections are closed, its lookups go to the
        new one): reconnect there through the usual path, without the backoff the old cluster's
        failures built up."""
        self._detach()  # its connection closed with the old cluster's: never an answer for the new one
        if self._closing or self._failed is not None or self.client.is_closed:
            return
        self._on_cluster_switch()
        self._backoff.reset()
        task = self._reconnect_task
        if task is not None and not task.done():
            task.cancel()  # it may be sleeping out a long backoff, or connecting to the old cluster
            self._reconnect_task = None
            self.schedule_reconnect()

    def _stop_reconnecting(self) -> None:
        """Closing: no more reconnects, and no longer a live handle of the topic."""
        self._closing = True
        self._detach()
        task = self._reconnect_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
