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

from velamq.broker._channel import NO_REQUEST_ID, Channel
from velamq.broker._errors import BrokerRequestError
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

    def close_by_broker(self) -> None:
        """Detach from topic and connection and tell the client; it reconnects (or learns it is fenced)."""
        self.topic.remove_producer(self)
        self.channel.forget_producer(self)
        command = pb.BaseCommand(type=pb.BaseCommand.CLOSE_PRODUCER)
        command.close_producer.producer_id = self.producer_id
        command.close_producer.request_id = NO_REQUEST_ID
        self.channel.send_command(command)


def register_producer(producers: dict[str, ServerProducer], producer: ServerProducer, topic: str) -> str | None:
    """Register a producer in a topic's table (either kind of topic); an error text (ProducerBusy)
    instead of raising when the name is taken by another live producer."""
    existing = producers.get(producer.name)
    if existing is not None and existing is not producer:
        if existing.channel is producer.channel or producer.epoch <= existing.epoch:
            return f"producer with name '{producer.name}' is already connected to topic {topic}"
        # A reconnecting producer (higher epoch) replaces its stale registration.
        existing.channel.forget_producer(existing)
    producers[producer.name] = producer
    return None


def unregister_producer(
    producers: dict[str, ServerProducer], producer: ServerProducer, access: ProducerAccess | None
) -> bool:
    """Take a producer out of its topic's table (and out of the access modes' bookkeeping); False
    if another producer holds the name now."""
    if producers.get(producer.name) is not producer:
        return False
    del producers[producer.name]
    if access is not None:
        access.left(producer.name)
    return True


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
