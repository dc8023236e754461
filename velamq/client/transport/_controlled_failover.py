"""ControlledClusterFailover (RP-11): the cluster a client uses is whatever an operator's HTTP
endpoint says, as the Java client's ControlledClusterFailover has it.

    AsyncClient(ControlledClusterFailover("pulsar://east:6650", "http://ops:8080/pulsar-cluster",
                                          check_interval_ms=30_000, url_provider_headers={"X-Key": "..."}))

Every check_interval_ms (30 s by default, as in Java) it GETs `url_provider` (Accept:
application/json, plus the headers given) and expects, with status 200, the Java client's JSON:

    {"serviceUrl": "pulsar+ssl://west:6651", "tlsTrustCertsFilePath": "/etc/ca.pem",
     "authPluginClassName": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
     "authParamsString": "token:..."}

An answer that differs from the last one applied, with a serviceUrl, moves the client there. As in
Java, authentication changes only when both auth fields are given, and the CA file only when it is
given: otherwise the current cluster's are kept. Any other answer (an error status, bad JSON, no
answer within 30 s) is logged and changes nothing; the next check asks again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from velamq._clock import Clock, system_clock
from velamq.client._errors import InvalidConfigurationError
from velamq.client.security._auth import Authentication
from velamq.client.transport._failover import PeriodicChecks, ServiceInfo

log = logging.getLogger("velamq.client")

check_interval_ms_default = 30_000  # the Java builder's default
request_timeout_s = 30.0  # the Java client's read timeout


class ControlledClusterFailover(PeriodicChecks):
    """A service-info provider that follows an operator's HTTP endpoint (see the module docstring)."""

    def __init__(self, default_service_url: str | ServiceInfo, url_provider: str, *,
                 check_interval_ms: int = check_interval_ms_default,
                 url_provider_headers: Mapping[str, str] | None = None, clock: Clock = system_clock) -> None:
        if check_interval_ms <= 0:
            raise InvalidConfigurationError("check_interval_ms must be > 0")
        if not url_provider.startswith(("http://", "https://")):
            raise InvalidConfigurationError(f"url_provider must be an http(s):// URL, not {url_provider!r}")
        self.default = (default_service_url if isinstance(default_service_url, ServiceInfo)
                        else ServiceInfo(default_service_url))
        self.url_provider = url_provider
        self.headers = {"Accept": "application/json", **(url_provider_headers or {})}
        self.check_interval_s = check_interval_ms / 1000
        self.clock = clock
        self.current = self.default
        self.checks = 0  # checks completed: tests wait on it
        self._applied: dict[str, Any] | None = None  # the last answer that moved the client
        self._on_switch: Callable[[ServiceInfo], None] | None = None
        self._task: asyncio.Task[None] | None = None

    def initial_service_info(self) -> ServiceInfo:
        return self.default

    async def check(self) -> None:
        """Ask the endpoint once, and switch if it names another configuration."""
        answer = await asyncio.to_thread(self._fetch)
        if answer is None or not answer.get("serviceUrl") or answer == self._applied:
            return
        try:
            target = self._service_info(answer)
        except InvalidConfigurationError as exc:
            log.warning("%s named a cluster that cannot be used: %s", self.url_provider, exc)
            return
        self._applied = answer
        if target == self.current:
            return
        log.warning("switching from cluster %s to %s, as %s says", self.current.service_url, target.service_url,
                    self.url_provider)
        self.current = target
        if self._on_switch is not None:
            self._on_switch(target)

    def _service_info(self, answer: dict[str, Any]) -> ServiceInfo:
        authentication = self.current.authentication
        plugin, params = answer.get("authPluginClassName"), answer.get("authParamsString")
        if plugin and params:
            authentication = Authentication(str(plugin), str(params))
        trust = answer.get("tlsTrustCertsFilePath") or self.current.tls_trust_certs_file_path
        return ServiceInfo(str(answer["serviceUrl"]), authentication, trust)

    def _fetch(self) -> dict[str, Any] | None:
        request = urllib.request.Request(self.url_provider, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=request_timeout_s) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            log.warning("%s answered %d: keeping cluster %s", self.url_provider, exc.code, self.current.service_url)
            return None
        except (OSError, ValueError) as exc:
            log.warning("%s: %s: keeping cluster %s", self.url_provider, exc, self.current.service_url)
            return None
        if not isinstance(answer, dict):
            log.warning("%s answered %r, not a JSON object", self.url_provider, answer)
            return None
        return answer
