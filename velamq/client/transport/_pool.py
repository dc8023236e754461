"""The connection pool: one connection per (logical broker URL, physical address), shared by all
producers, consumers and lookups of a client, reopened on demand after it dies.

The logical URL is what a lookup answered (brokerServiceUrl, or brokerServiceUrlTls for a TLS
client); the physical address is where we actually connect (the same, unless the lookup says
proxy_through_service_url). A pulsar+ssl:// address is connected with the client's TLS context,
built once from its settings (and the TLS authentication plugin's certificate) on first use.
"""

from __future__ import annotations

import asyncio
import random
import ssl
from urllib.parse import urlsplit

from velamq.client._config import ClientConfig
from velamq.client._errors import AlreadyClosedError, ConnectError, InvalidConfigurationError
from velamq.client.security._settings import ssl_context_for
from velamq.client.transport._connection import Connection

default_broker_port = 6650
default_broker_port_tls = 6651
TLS_SCHEME = "pulsar+ssl"


def uses_tls(url: str) -> bool:
    return urlsplit(url).scheme == TLS_SCHEME


def parse_service_url(url: str) -> list[tuple[str, int]]:
    """pulsar[+ssl]://host[:port][,host2[:port2]...] -> [(host, port), ...]"""
    parts = urlsplit(url)
    if parts.scheme not in ("pulsar", TLS_SCHEME):
        raise InvalidConfigurationError(
            f"service URL must start with pulsar://, pulsar+ssl://, http:// or https://, got {url!r}")
    default_port = default_broker_port_tls if parts.scheme == TLS_SCHEME else default_broker_port
    hosts: list[tuple[str, int]] = []
    for item in parts.netloc.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            host, port = item, str(default_port)
        hosts.append((host.strip("[]"), int(port)))
    if not hosts:
        raise InvalidConfigurationError(f"no host in service URL {url!r}")
    return hosts


class ConnectionPool:
    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self._connections: dict[tuple[str, str], Connection] = {}
        self._opening: dict[tuple[str, str], asyncio.Future[Connection]] = {}
        self._closed = False
        self._ssl_context: ssl.SSLContext | None = None
        self._cluster = 0  # how many times the client moved to another cluster

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of every pulsar+ssl:// connection, built on first use (files checked then)."""
        if self._ssl_context is None:
            self._ssl_context = ssl_context_for(self.config.authentication, self.config)
        return self._ssl_context

    async def get(self, logical_url: str, physical_url: str | None = None) -> Connection:
        if self._closed:
            raise AlreadyClosedError("client is closed")
        physical_url = physical_url or logical_url
        key = (logical_url, physical_url)
        existing = self._connections.get(key)
        if existing is not None and existing.is_ready:
            return existing
        opening = self._opening.get(key)
        if opening is not None:
            return await asyncio.shield(opening)
        future: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._opening[key] = future
        try:
            hosts = parse_service_url(physical_url)
            host, port = random.choice(hosts)
            context = self.ssl_context() if uses_tls(physical_url) else None
            cluster = self._cluster
            connection = Connection(logical_url, host, port, self.config, context)
            await connection.open()
            if self._closed:
                connection.close("client closed")
                raise AlreadyClosedError("client is closed")
            if cluster != self._cluster:  # opened toward the cluster the client just left
                connection.close("the client switched clusters")
                raise ConnectError(f"{logical_url}: the client switched to another cluster")
            self._connections[key] = connection
            future.set_result(connection)
            return connection
        except BaseException as exc:
            error = exc if isinstance(exc, (ConnectError, AlreadyClosedError)) else ConnectError(str(exc))
            future.set_exception(error)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            del self._opening[key]

    def switch_cluster(self, config: ClientConfig) -> None:
        """The client moved to another cluster (a failover): every connection closes, and the next
        ones use that cluster's credentials and TLS settings (`config`)."""
        self._cluster += 1
        self.config = config
        self._ssl_context = None
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            connection.close("the client switched clusters")

    def close(self) -> None:
        self._closed = True
        for connection in list(self._connections.values()):
            connection.close("client closed")
        self._connections.clear()

    @property
    def connections(self) -> list[Connection]:
        return [c for c in self._connections.values() if c.is_ready]
