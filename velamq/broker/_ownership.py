"""Who serves a topic when several broker processes (workers) share the machine (issue 23).

A broker started alone owns every topic and has no Ownership. A worker of `velamq standalone
--workers N` is given one (velamq/workers implements it over the shared metadata): topics belong to
namespace bundles (velamq/_bundles.py) and each bundle to one worker. The broker asks it

- on LOOKUP: whose URLs to answer (any worker answers for any topic, as any Pulsar broker does);
- before loading a topic for a client: a topic of another worker's bundle is refused with
  ServiceNotReady, which sends the client back to a lookup;
- on a bundle unload: who takes the bundle over, so that its clients can be sent straight there
  (PIP-307's assignedBrokerServiceUrl in CLOSE_PRODUCER / CLOSE_CONSUMER).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from velamq._bundles import BundleRange
from velamq.protocol import pb


class BrokerUrls(NamedTuple):
    """A broker's (a worker's) own binary URLs: what LOOKUP answers and where moved clients go."""

    url: str | None
    url_tls: str | None


def tell_new_owner(close: pb.CommandCloseProducer | pb.CommandCloseConsumer, new_owner: BrokerUrls | None) -> None:
    """Fill a CLOSE_PRODUCER / CLOSE_CONSUMER's assignedBrokerServiceUrl[Tls] (PIP-307): the client
    goes straight there, without a lookup."""
    if new_owner is None:
        return
    if new_owner.url:
        close.assignedBrokerServiceUrl = new_owner.url
    if new_owner.url_tls:
        close.assignedBrokerServiceUrlTls = new_owner.url_tls


class Ownership(Protocol):
    async def owner_of(self, full_topic: str, fresh: bool = False) -> BrokerUrls | None:
        """The URLs of the worker that serves this topic; None when it is this one. `fresh`: not
        from what this worker remembers of moves (before refusing a client sent here by a move
        that the shared metadata's change watch has not reported yet)."""
        ...

    async def bundle_of(self, full_topic: str) -> tuple[str, BundleRange]:
        """The topic's namespace and bundle."""
        ...

    async def move_bundle(self, namespace: str, bundle: BundleRange, destination: str | None) -> BrokerUrls:
        """Record another worker as the bundle's owner (`destination`: its admin or binary
        "host:port", or None for the next worker) and return its URLs. From now on this worker
        answers lookups of the bundle with them and refuses to load its topics."""
        ...

    def shard_of(self, full_topic: str) -> str:
        """The storage shard (directory key) of a topic's managed ledgers: its bundle's."""
        ...

    def bundle_shard(self, namespace: str, bundle: BundleRange) -> str:
        """The storage shard of a bundle."""
        ...
