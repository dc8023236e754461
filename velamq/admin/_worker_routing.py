"""WorkerRouting: what the admin tier needs to know about the workers of a multi-process broker.

The worker supervisor's side implements it over the shared metadata (docs/workers.md); AdminServer
takes one as `routing=` (None: one process). _routing.py is where the admin tier uses it.
"""

from __future__ import annotations

from typing import Protocol


class WorkerRouting(Protocol):
    """Who serves what, in a broker of several workers (implemented by the worker supervisor's
    side over the shared metadata). Every URL is "scheme://host:port" without a trailing "/"."""

    @property
    def worker_id(self) -> int:
        """This worker's id (the `worker` label of its metrics)."""
        ...

    async def topic_owner_web_url(self, full_topic: str, tls: bool) -> str | None:
        """The owner worker's own admin URL (https when `tls`) for a topic it does not own; None
        when this worker serves it."""
        ...

    async def bundle_owner_web_url(self, namespace: str, bundle: str, tls: bool) -> str | None:
        """The same for a bundle (`0x00000000_0x40000000`) of a namespace."""
        ...

    async def broker_addresses(self) -> list[str]:
        """Every worker's admin "host:port" (Pulsar's broker ids), this one included."""
        ...

    async def topic_lookup(self, full_topic: str) -> dict[str, str]:
        """The owner's brokerUrl, brokerUrlTls, httpUrl, httpUrlTls and nativeUrl ("" if none)."""
        ...

    async def peer_web_urls(self) -> list[tuple[int, str]]:
        """The OTHER workers: (worker id, own admin URL), for gathering their metrics."""
        ...
