"""Discovery over the admin REST API, for an http:// or https:// service URL (the official
clients' HTTPLookupService), with the client's credentials and TLS settings:

    partitions            GET /admin/v2/{domain}/{tenant}/{ns}/{topic}/partitions   {"partitions": N}
    lookup                GET /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}       {"brokerUrl", "brokerUrlTls"}
    topics_of_namespace   GET /admin/v2/namespaces/{tenant}/{ns}/topics?mode=PERSISTENT|NON_PERSISTENT|ALL
    get_schema            GET_SCHEMA on the binary connection to the topic's broker

An https:// client connects to the broker's TLS URL (brokerUrlTls), an http:// one to brokerUrl.
The HTTP calls are blocking (urllib, through AdminClient) and run in a worker thread. Their
refusals become the binary protocol's errors: 401 ConnectAuthenticationError (not retried), 403
AuthorizationError, 404 TopicNotFoundError; an unreachable server is a ConnectError (retried).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from velamq._topic_name import TopicName
from velamq.client._admin_client import AdminClient
from velamq.client._config import ClientConfig
from velamq.client._errors import (
    AdminError,
    AuthorizationError,
    BrokerError,
    ConnectAuthenticationError,
    ConnectError,
    TopicNotFoundError,
)
from velamq.client.transport._connection import Connection
from velamq.client.transport._lookup import BrokerAddress, DiscoveryStats, LookupService, broker_url_for
from velamq.client.transport._pool import ConnectionPool
from velamq.protocol import pb

_MODES = {"persistent_only": "PERSISTENT", "non_persistent_only": "NON_PERSISTENT", "all_topics": "ALL"}


def is_http_url(url: str) -> bool:
    return url.startswith(("http://", "https://"))


class HttpLookupService(LookupService):
    def __init__(self, pool: ConnectionPool, service_url: str, config: ClientConfig,
                 request_ids: itertools.count[int], stats: DiscoveryStats | None = None) -> None:
        super().__init__(pool, service_url, config, request_ids, stats)
        self._tls = service_url.startswith("https://")
        self._admin = AdminClient(service_url, timeout_s=config.operation_timeout_s,
                                  authentication=config.authentication,
                                  ssl_context=pool.ssl_context() if self._tls else None)

    async def _get(self, path: str, query: dict[str, Any] | None = None) -> Any:
        try:
            return await asyncio.to_thread(self._admin.request, "GET", path, query=query)
        except AdminError as exc:
            raise _binary_error(exc) from None

    async def partitions(self, topic: str) -> int:
        self.stats.partitioned_metadata += 1
        answer = await self._get(AdminClient.topic_path(topic, "partitions"))
        return int(answer.get("partitions", 0)) if isinstance(answer, dict) else 0

    async def lookup(self, topic: str) -> BrokerAddress:
        path = "/lookup/v2/topic/" + AdminClient.topic_path(topic).removeprefix("/admin/v2/")
        self.stats.lookups += 1
        answer = await self._get(path)
        if not isinstance(answer, dict):
            raise ConnectError(f"lookup of {topic}: the HTTP lookup answered {answer!r}")
        target = broker_url_for(topic, self._tls, str(answer.get("brokerUrl") or ""),
                                str(answer.get("brokerUrlTls") or ""))
        if not target:
            raise ConnectError(f"lookup of {topic}: the HTTP lookup named no broker")
        return BrokerAddress(target, target)

    async def _schema_connection(self, topic: str) -> Connection:
        address = await self.lookup(topic)
        return await self.pool.get(address.logical_url, address.physical_url)

    async def topics_of_namespace(self, namespace: str, mode: str = "persistent_only") -> list[str]:
        answer = await self._get(AdminClient.namespace_path(namespace, "topics"), {"mode": _MODES[mode]})
        names = [str(TopicName.parse(name)) for name in answer or []]
        return names


def _binary_error(exc: AdminError) -> Exception:
    if exc.status == 401:
        return ConnectAuthenticationError(pb.AuthenticationError, f"HTTP lookup refused the credentials: {exc}")
    if exc.status == 403:
        return AuthorizationError(pb.AuthorizationError, str(exc))
    if exc.status == 404:
        return TopicNotFoundError(pb.TopicNotFound, str(exc))
    if exc.status == 0:
        return ConnectError(str(exc))
    return BrokerError(pb.UnknownError, str(exc))  # 5xx, 503 while loading: retried
