"""The composition root: one velamq server built from its parts (tier 3, above broker and admin).

    storage    journal, ledgers, cursors under config.data_dir      (velamq.storage)
    metadata   tenants, namespaces, topics, policies: metadata.db   (velamq.metadata)
    broker     the Pulsar protocol listener over both               (velamq.broker.BrokerService)
    admin      REST API, lookup, metrics and console, talking to the broker's admin facade
               (velamq.broker.BrokerAdmin) through velamq.admin's BrokerBackend protocol

Start order is storage and metadata, then the broker, then the admin server; close goes the
other way, so that nothing is served by a part whose dependencies are gone. The broker never
imports the admin tier: this module is the only place that knows both.
"""

from __future__ import annotations

from velamq import _limits
from velamq._clock import Clock, system_clock
from velamq.admin import AdminServer
from velamq.broker import BrokerAdmin, BrokerConfig, BrokerService
from velamq.metadata import MetadataStore
from velamq.storage import Storage, StorageConfig


def storage_config(config: BrokerConfig) -> StorageConfig:
    return StorageConfig(
        data_dir=config.data_dir,
        sync_policy=config.sync_policy,  # type: ignore[arg-type]
        sync_interval_ms=config.sync_interval_ms,
        memory_bytes=config.memory_bytes,
        ledger_entries_max=config.ledger_entries_max,
        ledger_bytes_max=config.ledger_megabytes_max * _limits.MIB,
        flush_interval_ms=config.flush_interval_ms,
        entry_log_bytes_max=config.entry_log_bytes_max,
        gc_interval_s=config.gc_wait_ms / 1000,
        gc_minor_threshold=config.gc_minor_threshold,
        gc_minor_interval_s=config.gc_minor_interval_s,
        gc_major_threshold=config.gc_major_threshold,
        gc_major_interval_s=config.gc_major_interval_s,
        gc_bytes_per_s=config.gc_bytes_per_s,
    )


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
    ) -> None:
        """admin_timeout_s bounds one admin request; admin_connections_max the admin connections
        served at once (the AdminServer's default if None)."""
        self.config = config
        self.clock = clock
        self.storage = Storage(storage_config(config), clock)
        self.metadata = MetadataStore(config.data_dir / "metadata.db")
        self.broker = BrokerService(config, self.storage, self.metadata, clock)
        limits = {} if admin_connections_max is None else {"max_connections": admin_connections_max}
        self.admin = AdminServer(
            BrokerAdmin(self.broker),
            config.bind_address,
            config.http_port,
            advertised_address=config.advertised_address,
            timeout_s=admin_timeout_s,
            **limits,
        )

    @property
    def service_url(self) -> str:
        return self.broker.service_url

    @property
    def web_service_url(self) -> str:
        return self.admin.web_service_url

    @property
    def broker_port(self) -> int:
        return self.broker.broker_port

    @property
    def http_port(self) -> int:
        return self.admin.port

    async def start(self) -> None:
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        await self.metadata.start()
        await self.storage.start()
        await self.broker.start()
        await self.admin.start()

    async def close(self) -> None:
        """Clean shutdown: stop serving admin requests, close the broker (persists cursors), flush
        storage, close metadata."""
        await self.admin.close()
        await self.broker.close()
        await self.storage.close()
        await self.metadata.close()
