"""The composition root: one velamq server built from its parts (tier 3, above broker and admin).

    storage    journal, ledgers, cursors under config.data_dir      (velamq.storage)
    metadata   tenants, namespaces, topics, policies: metadata.db   (velamq.metadata)
    broker     the Pulsar protocol listener over both               (velamq.broker.BrokerService)
    admin      REST API, lookup, metrics and console, talking to the broker's admin facade
               (velamq.broker.BrokerAdmin) through velamq.admin's BrokerBackend protocol
    replication  geo-replication to other clusters: a Pulsar client over the broker's topics
               (velamq.replication), its figures and cluster changes shared with the admin server

Start order is storage and metadata, then the broker, replication, then the admin server; close
goes the other way, so that nothing is served by a part whose dependencies are gone. The broker never
imports the admin tier: this module is the only place that knows both.

It also splits the one memory budget (`memoryBudgetBytes`, ME-1): the network's share (unsent
outbound bytes and partial inbound frames, velamq.broker's NetworkBudget) comes off the top and
storage splits the rest among its buffers and caches. And it hands the broker the storage as its
StorageHealth (`Storage.writable`, for the disk guard), and keeps asyncio's own error reports (e.g.
an accept storm on the admin port) to one line per kind per minute.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from velamq import _limits
from velamq._clock import Clock, system_clock
from velamq._log_limit import RateLimitedLog
from velamq.admin import AdminServer, AdminSockets, WorkerRouting
from velamq.broker import BrokerAdmin, BrokerConfig, BrokerService, DiskUsage, ListenSockets, Ownership
from velamq.broker.log._offload_rows import PulsarEntryRows
from velamq.metadata import MetadataStore
from velamq.replication import ReplicationService
from velamq.security import AuthenticationService, AuthorizationModel, build_authentication_service
from velamq.storage import LedgerStore, ShardedStorage, Storage, StorageConfig

log = logging.getLogger("velamq.server")


def raise_fd_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to the hard one (as Pulsar's start scripts and most
    servers do): returns (soft, hard) as they are afterwards. `velamq standalone` calls it first."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the file descriptor limit from %d to %d: %s", soft, hard, exc)
    return soft, hard


# The cyclic collector's young-generation threshold in a serving process (CPython's default: 700).
# A broker allocates a few short-lived objects per message, nearly all freed by reference counting;
# at 700 the collector ran every few hundred net allocations, promoted the entries in flight to the
# older generations and then traversed every loaded topic's objects in full collections: 11 % of
# the broker's CPU while publishing, 28 % while creating topics (docs/benchmarks.md, issue 22).
serving_gc_young_threshold = 10_000


def tune_collector_for_serving() -> None:
    """Once a serving process has started: what start-up built (modules, protobuf descriptors,
    configuration, recovered state) is collected once and then frozen, out of every later
    collection's scan (gc.freeze: it is still freed by reference counting); the young generation
    is collected every `serving_gc_young_threshold` net allocations, the older ones every 10 of the
    one below, as by default. At most that many young objects wait for a collection: a few MiB."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(serving_gc_young_threshold, 10, 10)


def network_budget_bytes(memory_bytes: int) -> int:
    """The network's share of the memory budget; storage gets the rest."""
    num, den = _limits.network_budget_share
    return memory_bytes * num // den


def storage_config(config: BrokerConfig) -> StorageConfig:
    return StorageConfig(
        data_dir=config.data_dir,
        sync_policy=config.sync_policy,  # type: ignore[arg-type]
        sync_interval_ms=config.sync_interval_ms,
        memory_bytes=config.memory_bytes - network_budget_bytes(config.memory_bytes),
        ledger_entries_max=config.ledger_entries_max,
        ledger_bytes_max=config.ledger_megabytes_max * _limits.MIB,
        flush_interval_ms=config.flush_interval_ms,
        entry_log_bytes_max=config.entry_log_bytes_max,
        journal_segment_bytes=round(config.journal_max_size_mb * (1 << 20)),
        gc_interval_s=config.gc_wait_ms / 1000,
        gc_minor_threshold=config.gc_minor_threshold,
        gc_minor_interval_s=config.gc_minor_interval_s,
        gc_major_threshold=config.gc_major_threshold,
        gc_major_interval_s=config.gc_major_interval_s,
        gc_bytes_per_s=config.gc_bytes_per_s,
        offload=config.offload,
        ballast_bytes=None,  # the derived emergency ballast: a restart on a full disk can recover
    )


def _statvfs_usage(path: Path) -> DiskUsage:
    st = os.statvfs(path)
    return DiskUsage(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


def _usage_with_ballast(stat: Callable[[Path], DiskUsage], storage: LedgerStore, path: Path) -> DiskUsage:
    """Disk usage as the disk guard should see it: storage's emergency ballast is space held back
    for a start on a full disk (velamq/storage/startup/_ballast.py), counted as free."""
    usage = stat(path)
    return DiskUsage(usage.total_bytes, usage.available_bytes + storage.ballast_bytes)


class BundleOwnership(Ownership, WorkerRouting, Protocol):
    """What a worker's ownership also does for the server: start, and follow other workers'
    changes of the shared metadata."""

    async def start(self) -> None: ...


@dataclass(frozen=True)
class WorkerRole:
    """What makes a server one worker of several (velamq/workers builds it): the sockets its
    supervisor made, and the ownership of bundles over the shared metadata."""

    worker_id: int
    broker_sockets: ListenSockets
    admin_sockets: AdminSockets
    ownership: Callable[[MetadataStore], BundleOwnership]


class VelamqServer:
    """A whole velamq broker process in one object: storage, metadata, the Pulsar listener and the
    admin listener, started and closed together (`velamq standalone`, velamq.testing)."""

    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock = system_clock,
        *,
        admin_timeout_s: float = _limits.admin_timeout_s,
        admin_connections_max: int | None = None,
        disk_stat: Callable[[Path], DiskUsage] | None = None,
        role: WorkerRole | None = None,
    ) -> None:
        """admin_timeout_s bounds one admin request; admin_connections_max the admin connections
        served at once (the AdminServer's default if None); disk_stat replaces statvfs for the
        disk guard (tests: a filesystem that fills up on demand); role makes it one worker of
        several (velamq/workers): metadata shared with the others, a storage shard per bundle,
        the supervisor's sockets."""
        self.config = config
        self.clock = clock
        self.role = role
        self.metadata = MetadataStore(
            config.data_dir / "metadata.db",
            cluster_name=config.cluster_name,
            shared=role is not None,
            default_bundles_count=config.default_namespace_bundles,
        )
        self.ownership = None if role is None else role.ownership(self.metadata)
        self.storage: LedgerStore
        if self.ownership is None:
            self.storage = Storage(storage_config(config), clock, PulsarEntryRows())
        else:
            self.storage = ShardedStorage(
                storage_config(config), clock, PulsarEntryRows(), shard_of=self.ownership.shard_of
            )
        # One of each for the whole process, shared by the binary port and the admin API. A bad
        # key or password file fails here, at start.
        security = config.security
        self.authentication: AuthenticationService | None = build_authentication_service(security, clock=clock)
        self.authorization: AuthorizationModel | None = None
        if security.authorization_enabled:
            self.authorization = AuthorizationModel(
                security.super_user_roles, allow_wildcards=security.authorization_allow_wildcards_matching
            )
        self.broker = BrokerService(
            config,
            self.storage,
            self.metadata,
            clock,
            storage_health=self.storage,
            disk_stat=partial(_usage_with_ballast, disk_stat or _statvfs_usage, self.storage),
            authentication=self.authentication,
            authorization=self.authorization,
            ownership=self.ownership,
            listen_sockets=None if role is None else role.broker_sockets,
            worker_id=0 if role is None else role.worker_id,
        )
        self._asyncio_log = RateLimitedLog(logging.getLogger("asyncio"), clock)
        # Geo-replication: a client of the other clusters, over the broker's topics (RP-*).
        self.replication = ReplicationService(self.broker, self.metadata, config.cluster_name)
        self.admin = AdminServer(
            BrokerAdmin(self.broker),
            config.bind_address,
            config.http_port,
            advertised_address=config.advertised_address,
            timeout_s=admin_timeout_s,
            max_connections=admin_connections_max,
            authentication=self.authentication,
            authorization=self.authorization,
            security=security,
            replication=self.replication,
            sockets=None if role is None else role.admin_sockets,
            routing=self.ownership,
        )

    @property
    def service_url(self) -> str:
        return self.broker.service_url

    @property
    def web_service_url(self) -> str:
        return self.admin.web_service_url

    @property
    def service_url_tls(self) -> str | None:
        return self.broker.service_url_tls

    @property
    def broker_port(self) -> int:
        """The plain binary port (a LookupError on a TLS-only broker)."""
        if self.broker.broker_port is None:
            raise LookupError("this broker has no plain binary port (brokerServicePort is empty)")
        return self.broker.broker_port

    @property
    def broker_port_tls(self) -> int | None:
        return self.broker.broker_port_tls

    @property
    def http_port(self) -> int:
        return self.admin.port

    async def start(self) -> None:
        asyncio.get_running_loop().set_exception_handler(self._asyncio_error)
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        if self.role is None and (self.config.data_dir / "bundles").is_dir():
            # Its topics live in bundles' storages (docs/workers.md): alone, it would look empty.
            raise ValueError(
                f"{self.config.data_dir} holds the storage of a broker of several workers: "
                "start it with --workers N"
            )
        await self.metadata.start()
        if self.authorization is not None:
            await load_authorization(self.authorization, self.metadata)
        if self.ownership is not None:
            await self.ownership.start()
            self.metadata.on_external_change(self._metadata_changed)
        await self.storage.start()
        await self.broker.start()
        await self.replication.start()
        await self.admin.start()

    async def close(self) -> None:
        """Clean shutdown: stop serving admin requests, close the broker (persists cursors), flush
        storage, close metadata."""
        await self.admin.close()
        await self.replication.close()
        await self.broker.close()
        await self.storage.close()
        await self.metadata.close()

    async def _metadata_changed(self) -> None:
        """Another worker changed the shared metadata (its caches here are dropped already):
        policies apply to this worker's topics as they do to the topics of the worker that took the
        change, and the authorization model follows tenants' and namespaces' roles."""
        if self.authorization is not None:
            await load_authorization(self.authorization, self.metadata)
        await self.broker.metadata_changed_elsewhere()
        await self.replication.metadata_changed_elsewhere()

    def _asyncio_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio's own reports (a failed callback, "socket.accept() out of system resource" on a
        listener we do not own): the same report, once per kind per minute."""
        message = str(context.get("message", "asyncio error"))
        exc = context.get("exception")
        self._asyncio_log.error(f"{message}:{type(exc).__name__}", "%s: %r", message, exc)


async def load_authorization(model: AuthorizationModel, metadata: MetadataStore) -> None:
    """Every tenant's adminRoles and every namespace's auth_policies, read once at start; from then
    on whoever changes them (the admin API) updates the model as well."""
    for tenant in await metadata.list_tenants():
        model.load_tenant(tenant, await metadata.get_tenant(tenant))
        for namespace in await metadata.list_namespaces(tenant):
            model.load_namespace(namespace, await metadata.get_policies(namespace))

