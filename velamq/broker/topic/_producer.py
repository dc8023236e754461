"""A producer attached to a topic over one connection, and who may publish to a topic.

Producer access modes (ProducerAccess):

    mode                  another producer is connected          the topic has no other producer
    Shared                admitted, unless one is Exclusive       admitted
    Exclusive             refused (ProducerFenced)                admitted, takes the topic
    WaitForExclusive      queued (told once), waits its turn      admitted, takes the topic
    ExclusiveWithFencing  the others are closed by the broker     admitted, takes the topic

A producer that takes the topic moves the topic epoch on (unless it is the exclusive producer
already, reconnecting with the current epoch); a non-fencing producer reconnecting with an older
epoch than the topic's has been fenced (ProducerFenced). A topic whose producers are all Shared
never makes a ProducerAccess (Topic makes one for the first exclusive producer): a loaded topic
stays small.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from velamq._clock import Clock
from velamq.broker._channel import NO_REQUEST_ID, Channel
from velamq.broker._errors import BrokerRequestError
from velamq.broker._ownership import BrokerUrls, tell_new_owner
from velamq.broker._rates import RateCounter
from velamq.protocol import pb


class ProducerTopic(Protocol):
    """What a producer needs of its topic (Topic is one): its name, and to leave it."""

    @property
    def full_name(self) -> str: ...

    def remove_producer(self, producer: ServerProducer) -> None: ...


@dataclass(eq=False, slots=True)
class ServerProducer:
    """The broker's side of one client producer: its name (the deduplication key), its epoch and
    access mode (who may publish, see ProducerAccess) and its publish counters."""

    channel: Channel
    producer_id: int
    name: str
    topic: ProducerTopic
    epoch: int
    access_mode: int  # pb.ProducerAccessMode
    connected_since_ms: int = 0
    schema_version: bytes | None = None  # its schema's version (8 bytes), None without a schema
    metadata: Mapping[str, str] = field(default_factory=dict)  # PRODUCER's metadata (stats show it)
    rate_in: RateCounter = field(default_factory=RateCounter)
    chunks_in: RateCounter = field(default_factory=RateCounter)
    # A geo-replicator (pulsar.repl.<from>--><to>): deduplicated by each message's origin (RP-5).
    is_replicator: bool = False

    def close_by_broker(self, new_owner: BrokerUrls | None = None) -> None:
        """Detach from topic and connection and tell the client; it reconnects (or learns it is
        fenced): straight to `new_owner` when its bundle moved to another worker (PIP-307)."""
        self.topic.remove_producer(self)
        self.channel.forget_producer(self)
        command = pb.BaseCommand(type=pb.BaseCommand.CLOSE_PRODUCER)
        close = command.close_producer
        close.producer_id = self.producer_id
        close.request_id = NO_REQUEST_ID
        tell_new_owner(close, new_owner)
        self.channel.send_command(command)


def check_shared(exclusive: str | None, producer: ServerProducer) -> None:
    """A Shared producer is refused (ProducerBusy) while another producer holds the topic."""
    if exclusive not in (None, producer.name):
        raise BrokerRequestError(pb.ProducerBusy, f"Topic has an existing exclusive producer: {exclusive}")


class ProducerAccess:
    """The exclusive-access state of one topic: the name of the producer holding it, the topic
    epoch, and the WaitForExclusive producers waiting for the topic's other producers to leave.
    Lives on the broker loop with its topic."""

    __slots__ = ("_changed", "_waiting", "epoch", "exclusive")

    def __init__(self) -> None:
        self.epoch = 0
        self.exclusive: str | None = None
        self._changed: asyncio.Event | None = None  # made when a producer waits
        self._waiting = 0

    @property
    def waiting(self) -> bool:
        """A WaitForExclusive producer waits for its turn (the topic is not idle)."""
        return self._waiting > 0

    async def admit(
        self,
        producers: Mapping[str, ServerProducer],
        producer: ServerProducer,
        request_epoch: int | None,
        on_queued: Callable[[], None],
    ) -> None:
        """Admit a producer of an exclusive mode given the topic's connected `producers`; raises
        BrokerRequestError with ProducerFenced. WaitForExclusive calls `on_queued` once and waits
        until the topic has no other producer."""
        mode = producer.access_mode
        if request_epoch is not None and request_epoch < self.epoch and mode != pb.ExclusiveWithFencing:
            raise BrokerRequestError(pb.ProducerFenced, f"producer {producer.name} was fenced (topic epoch moved)")
        queued = False
        while True:
            others = [p for p in producers.values() if p.name != producer.name]
            if not others:
                break
            if mode == pb.Exclusive:
                kind = "exclusive" if self.exclusive else "shared"
                raise BrokerRequestError(pb.ProducerFenced, f"Topic has existing {kind} producers")
            if mode == pb.ExclusiveWithFencing:
                for other in others:
                    other.close_by_broker()
                continue
            if not queued:
                queued = True
                on_queued()
            await self._wait_for_change()
        if self.exclusive != producer.name or request_epoch is None or request_epoch < self.epoch:
            self.epoch += 1
        self.exclusive = producer.name

    async def _wait_for_change(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        self._changed.clear()
        self._waiting += 1
        try:
            await self._changed.wait()
        finally:
            self._waiting -= 1

    def left(self, name: str) -> None:
        """A producer left the topic: it no longer holds it, and waiting producers look again."""
        if self.exclusive == name:
            self.exclusive = None
        if self._changed is not None:
            self._changed.set()


class ProducerHost:
    """What a topic of either kind (the persistent Topic, velamq/broker/nonpersistent's) does with
    its producers: the table by name, the access modes (a ProducerAccess made by the first
    exclusive producer) and the topic epoch. The topic class declares the slots."""

    __slots__ = ()

    producers: dict[str, ServerProducer]
    _access: ProducerAccess | None
    full_name: str
    clock: Clock
    last_used_s: float

    def add_producer(self, producer: ServerProducer) -> str | None:
        """Register a producer; returns an error text (ProducerBusy) instead of raising."""
        existing = self.producers.get(producer.name)
        if existing is not None and existing is not producer:
            if existing.channel is producer.channel or producer.epoch <= existing.epoch:
                return f"producer with name '{producer.name}' is already connected to topic {self.full_name}"
            # A reconnecting producer (higher epoch) replaces its stale registration.
            existing.channel.forget_producer(existing)
        self.producers[producer.name] = producer
        return None

    def remove_producer(self, producer: ServerProducer) -> None:
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
            if self._access is not None:
                self._access.left(producer.name)
            self.last_used_s = self.clock.monotonic_s()  # type: ignore[misc]  # a slot of the topic class

    async def admit_producer(
        self, producer: ServerProducer, request_epoch: int | None, on_queued: Callable[[], None]
    ) -> None:
        """Apply the producer access mode (ProducerAccess): raises BrokerRequestError with
        ProducerBusy or ProducerFenced; WaitForExclusive calls `on_queued` once and waits its turn."""
        if producer.access_mode == pb.Shared:
            check_shared(self.exclusive_producer, producer)
            return
        if self._access is None:
            self._access = ProducerAccess()  # type: ignore[misc]  # a slot of the topic class
        await self._access.admit(self.producers, producer, request_epoch, on_queued)

    def not_registered(self, name: str) -> None:
        """An admitted producer was not registered after all (its connection closed, or its name
        is taken): it does not hold the topic."""
        if self._access is not None and self._access.exclusive == name and name not in self.producers:
            self._access.exclusive = None

    @property
    def exclusive_producer(self) -> str | None:
        """The name of the producer holding the topic (an exclusive access mode), if any."""
        return None if self._access is None else self._access.exclusive

    @property
    def topic_epoch(self) -> int:
        """Moves each time an exclusive producer takes the topic (a producer reconnecting with an
        older epoch has been fenced)."""
        return 0 if self._access is None else self._access.epoch
