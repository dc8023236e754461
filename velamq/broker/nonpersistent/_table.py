"""The broker's loaded non-persistent topics: loading by name, dropping idle ones, deleting, rates.

A non-persistent topic has a metadata row like any topic (so that it is listed, looked up, refused
when its namespace is missing or auto-creation is off, and deleted as persistent topics are) but
no managed ledger: loading one is its row's lookup, found or created (the same rules as a
persistent topic's, given as `open_row`), and then a NonPersistentTopic in memory.

A loaded non-persistent topic that has had no producer and no consumer for `idle_s` is dropped with
its subscriptions, as Pulsar drops inactive non-persistent topics: nothing is lost, since nothing
is kept. The table's one task does that and samples the rates (msgRateIn, msgDropRate ...) every
`rates_interval_s`. With `enabled` False (Pulsar's enableNonPersistentTopics=false) every use of a
non-persistent topic is refused with NotAllowed, as Pulsar refuses it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from velamq._clock import Clock
from velamq._topic_name import TopicName
from velamq.broker._errors import BrokerRequestError
from velamq.broker.nonpersistent._topic import NonPersistentTopic
from velamq.metadata import Policies
from velamq.protocol import pb

OpenRow = Callable[[TopicName, bool], Awaitable[object]]  # what it found or made is not needed here
PoliciesFor = Callable[[TopicName], Awaitable[Policies]]


class NonPersistentTopics:
    """Loaded non-persistent topics by full name; the one owner of that table, on the broker loop."""

    def __init__(
        self,
        clock: Clock,
        open_row: OpenRow,
        policies_for: PoliciesFor,
        deleting: set[str],
        *,
        enabled: bool = True,
        idle_s: float = 60.0,
        rates_interval_s: float = 5.0,
    ) -> None:
        """`open_row(name, create)` finds or creates the topic's metadata row, raising
        BrokerRequestError where a persistent topic's load would; `deleting` is the broker's set of
        names being deleted (loads of them are refused until the delete is done)."""
        self.clock = clock
        self.enabled = enabled
        self.idle_s = idle_s
        self.rates_interval_s = rates_interval_s
        self.topics: dict[str, NonPersistentTopic] = {}
        self.dropped_idle_total = 0
        self._open_row = open_row
        self._policies_for = policies_for
        self._deleting = deleting
        self._task: asyncio.Task[None] | None = None

    async def get_topic(self, name: TopicName, create: bool) -> NonPersistentTopic:
        """The loaded topic, loading it first; BrokerRequestError says why not."""
        if not self.enabled:
            raise BrokerRequestError(pb.NotAllowedError, "Broker is not enabled to load non-persistent topics")
        full = str(name)
        topic = self.topics.get(full)
        if topic is None:
            if full in self._deleting:
                raise BrokerRequestError(pb.ServiceNotReady, f"topic {full} is being deleted")
            await self._open_row(name, create)
            policies = await self._policies_for(name)
            topic = self.topics.get(full)  # loaded by another request meanwhile
            if topic is None:
                topic = NonPersistentTopic(name, self.clock)
                await topic.apply_policies(policies)
                self.topics[full] = topic
        topic.last_used_s = self.clock.monotonic_s()
        return topic

    def loaded_topic(self, full_name: str) -> NonPersistentTopic | None:
        return self.topics.get(full_name)

    async def policies_changed(self, namespace: str | None, changed_only: bool = False) -> None:
        """Apply the policies of a namespace (every namespace if None) to its loaded topics again
        (changed_only: to those whose policies differ from what they have)."""
        for topic in list(self.topics.values()):
            if namespace is None or topic.name.namespace == namespace:
                policies = await self._policies_for(topic.name)
                if not changed_only or policies != topic.policies:
                    await topic.apply_policies(policies)

    async def unload(self, full_name: str) -> None:
        """Close a loaded topic: its clients are disconnected (they reconnect and it loads again,
        without the subscriptions that had no consumer)."""
        await self.delete(full_name)

    async def delete(self, full_name: str) -> None:
        """Close a topic being deleted: its clients are disconnected; nothing is stored to remove."""
        topic = self.topics.pop(full_name, None)
        if topic is not None:
            topic.disconnect_clients()
            await topic.close()

    # ---- the periodic task: rates and idle topics -----------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self.clock.sleep(self.rates_interval_s)
            self.tick()

    def tick(self) -> None:
        """Sample every loaded topic's rates and drop the topics idle for idle_s or longer."""
        now = self.clock.monotonic_s()
        for full, topic in list(self.topics.items()):
            topic.sample_rates(now)
            if self.idle_s > 0 and topic.idle and now - topic.last_used_s >= self.idle_s:
                del self.topics[full]
                topic.closed = True
                self.dropped_idle_total += 1

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for topic in list(self.topics.values()):
            await topic.close()
        self.topics.clear()
