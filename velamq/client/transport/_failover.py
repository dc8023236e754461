"""Cluster failover (Pulsar's PIP-121 service-info providers, RP-11): which cluster a client talks to,
and when it moves to another.

    AsyncClient(AutoClusterFailover(ServiceInfo("pulsar://east:6650"),
                                    [ServiceInfo("pulsar://west:6650", authentication=...)],
                                    check_interval_ms=1000, failover_threshold=3, switch_back_delay_ms=60_000))

A ServiceInfo is one cluster: its service URL and the credentials and CA file used there (the
official Python client's ServiceInfo). A ServiceInfoProvider names the first cluster and later calls
the client's switch function with another; the client then closes every connection, looks every
topic up again on the new cluster and lets its producers and consumers reconnect there (the same
reconnect path as after a lost connection).

AutoClusterFailover decides as the C++ client does (AutoClusterFailover.cc), with the Java client's
delays as a second condition:

    on the primary      a check probes it; after failover_threshold failed probes in a row, spread
                        over at least failover_delay_ms, switch to the first secondary that answers
    on a secondary      if it answers: count the primary's good probes in a row and switch back
                        after switch_back_threshold of them over at least switch_back_delay_ms;
                        if it fails as often (and as long) as above: go to the primary if it
                        answers, else to another secondary that does

A probe is a TCP connect to each host of the service URL in turn (no handshake), so a broker that
can no longer serve must stop listening: a velamq node that dies or stops closes its port. The
checks run on the clock given (ManualClock in tests), one every check_interval_ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from velamq._clock import Clock, system_clock
from velamq.client._config import ClientConfig
from velamq.client._errors import InvalidConfigurationError
from velamq.client.transport._pool import parse_service_url

log = logging.getLogger("velamq.client")

probe_timeout_s_default = 30.0  # the C++ client's probe timeout


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    """One cluster as a client sees it: its service URL (pulsar[+ssl]:// or http[s]://) and what
    the client authenticates and verifies TLS with there."""

    service_url: str
    authentication: Any = None
    tls_trust_certs_file_path: str | None = None

    def __post_init__(self) -> None:
        service_hosts(self.service_url)  # a bad URL fails here, not at the switch


class ServiceInfoProvider(Protocol):
    """Where a client connects, and when that changes (the official client's ServiceInfoProvider).
    A custom one (an operator's switch, a URL polled) calls `on_switch` with the new cluster, on
    the client's event loop."""

    def initial_service_info(self) -> ServiceInfo: ...

    def initialize(self, on_switch: Callable[[ServiceInfo], None]) -> None:
        """Called once by the client, on its event loop, before any connection is made."""
        ...

    async def close(self) -> None: ...


def service_hosts(url: str) -> list[tuple[str, int]]:
    """The (host, port) pairs a service URL names; an http[s]:// URL has one."""
    if url.startswith(("http://", "https://")):
        parts = urlsplit(url)
        if not parts.hostname:
            raise InvalidConfigurationError(f"no host in service URL {url!r}")
        return [(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))]
    return parse_service_url(url)


async def probe(url: str, timeout_s: float) -> bool:
    """True if a TCP connection to one of the URL's hosts opens within timeout_s (tried in order)."""
    for host, port in service_hosts(url):
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        except (OSError, TimeoutError):
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
    return False


class _Streak:
    """Consecutive probe results of one kind: how many, and since when."""

    def __init__(self) -> None:
        self.count = 0
        self.since_s: float | None = None

    def add(self, now_s: float) -> None:
        self.count += 1
        if self.since_s is None:
            self.since_s = now_s

    def reset(self) -> None:
        self.count = 0
        self.since_s = None

    def reached(self, threshold: int, delay_s: float, now_s: float) -> bool:
        return self.count >= threshold and self.since_s is not None and now_s - self.since_s >= delay_s


class PeriodicChecks:
    """What both providers share: `check()` every check_interval_s on the client's loop, from
    `initialize` (the client hands its switch callback) until `close`."""

    check_interval_s: float
    clock: Clock
    checks: int  # checks completed: tests wait on it
    _on_switch: Callable[[ServiceInfo], None] | None
    _task: asyncio.Task[None] | None

    async def check(self) -> None:
        raise NotImplementedError

    def initialize(self, on_switch: Callable[[ServiceInfo], None]) -> None:
        if self._task is not None:
            raise InvalidConfigurationError(f"this {type(self).__name__} already serves a client")
        self._on_switch = on_switch
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"velamq-{type(self).__name__}")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await self.clock.sleep(self.check_interval_s)
            try:
                await self.check()
            except Exception:  # a bug in a callback must not end the checks
                log.exception("%s check failed", type(self).__name__)
            self.checks += 1


class AutoClusterFailover(PeriodicChecks):
    """Moves a client from the primary cluster to a secondary when the primary stops answering
    probes, and back when it answers again (see the module docstring for the exact rule).

    The Python client's parameters (check_interval_ms, failover_threshold, switch_back_threshold:
    consecutive probes) and the Java client's (failover_delay_ms, switch_back_delay_ms: how long the
    streak must last) may be combined; both conditions must hold. `clock` paces the checks."""

    def __init__(self, primary: ServiceInfo, secondary: Sequence[ServiceInfo], *, check_interval_ms: int = 5000,
                 failover_threshold: int = 1, switch_back_threshold: int = 1, failover_delay_ms: int = 0,
                 switch_back_delay_ms: int = 0, probe_timeout_ms: int | None = None,
                 clock: Clock = system_clock) -> None:
        if not secondary:
            raise InvalidConfigurationError("AutoClusterFailover needs at least one secondary cluster")
        if min(check_interval_ms, failover_threshold, switch_back_threshold) <= 0:
            raise InvalidConfigurationError("check_interval_ms and both thresholds must be > 0")
        if min(failover_delay_ms, switch_back_delay_ms) < 0:
            raise InvalidConfigurationError("failover_delay_ms and switch_back_delay_ms must be >= 0")
        self.primary = primary
        self.secondary = list(secondary)
        self.check_interval_s = check_interval_ms / 1000
        self.failover_threshold = failover_threshold
        self.switch_back_threshold = switch_back_threshold
        self.failover_delay_s = failover_delay_ms / 1000
        self.switch_back_delay_s = switch_back_delay_ms / 1000
        self.probe_timeout_s = probe_timeout_s_default if probe_timeout_ms is None else probe_timeout_ms / 1000
        self.clock = clock
        self.current = primary
        self.checks = 0  # checks completed: tests wait on it
        self._failed = _Streak()  # the current cluster's failed probes in a row
        self._primary_back = _Streak()  # on a secondary: the primary's good probes in a row
        self._on_switch: Callable[[ServiceInfo], None] | None = None
        self._task: asyncio.Task[None] | None = None

    def initial_service_info(self) -> ServiceInfo:
        return self.primary

    async def _up(self, info: ServiceInfo) -> bool:
        return await probe(info.service_url, self.probe_timeout_s)

    async def check(self) -> None:
        """One round of probes, and the switch it calls for."""
        if self.current is self.primary:
            await self._check_primary()
        else:
            await self._check_secondary()

    async def _check_primary(self) -> None:
        if await self._up(self.primary):
            self._failed.reset()
            return
        self._failed.add(self.clock.monotonic_s())
        if not self._failed.reached(self.failover_threshold, self.failover_delay_s, self.clock.monotonic_s()):
            return
        for candidate in self.secondary:
            if await self._up(candidate):
                self._switch(candidate)
                return
        log.warning("primary cluster %s is down and no secondary answers", self.primary.service_url)

    async def _check_secondary(self) -> None:
        now_s = self.clock.monotonic_s
        if await self._up(self.current):
            self._failed.reset()
            if await self._up(self.primary):
                self._primary_back.add(now_s())
                if self._primary_back.reached(self.switch_back_threshold, self.switch_back_delay_s, now_s()):
                    self._switch(self.primary)
            else:
                self._primary_back.reset()
            return
        self._primary_back.reset()
        self._failed.add(now_s())
        if not self._failed.reached(self.failover_threshold, self.failover_delay_s, now_s()):
            return
        for candidate in [self.primary] + [s for s in self.secondary if s is not self.current]:
            if await self._up(candidate):
                self._switch(candidate)
                return

    def _switch(self, target: ServiceInfo) -> None:
        log.warning("switching from cluster %s to %s", self.current.service_url, target.service_url)
        self.current = target
        self._failed.reset()
        self._primary_back.reset()
        if self._on_switch is not None:
            self._on_switch(target)


def config_for(base: ClientConfig, info: ServiceInfo) -> ClientConfig:
    """The client's settings on one cluster: its own credentials and CA file."""
    return dataclasses.replace(base, authentication=info.authentication,
                               tls_trust_certs_file_path=info.tls_trust_certs_file_path)


def check_failover_config(config: ClientConfig) -> None:
    """With a provider, credentials and the CA file belong to each ServiceInfo (as the official
    client requires): a client-wide one would silently apply to clusters it was not meant for."""
    if config.authentication is not None or config.tls_trust_certs_file_path is not None:
        raise InvalidConfigurationError(
            "with a service-info provider, give authentication and tls_trust_certs_file_path per cluster "
            "in each ServiceInfo, not to the client")
