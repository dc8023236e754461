"""The broker's binary ports: pulsar:// and pulsar+ssl://, their listeners and the URLs they advertise.

BrokerPorts owns the plain listener (brokerServicePort), the TLS listener (brokerServicePortTls)
with its ReloadingServerContext (certificate files re-read when they change), the connection caps
both count against (brokerMaxConnections, brokerMaxConnectionsPerIp) and the service URLs LOOKUP
answers with. The accept loop itself is _listener.py's.
"""

from __future__ import annotations

from velamq import _limits
from velamq._clock import Clock
from velamq._log_limit import RateLimitedLog
from velamq.broker._config import BrokerConfig
from velamq.broker._listener import ConnectionLimits, Listener, ProtocolFactory, fd_soft_limit
from velamq.security import ReloadingServerContext


class BrokerPorts:
    """The plain and TLS ports of one broker: opened by `start`, closed by `close`. A port given as
    0 is chosen by the system; `port` and `port_tls` say which one it became (None: not served)."""

    def __init__(self, config: BrokerConfig, clock: Clock, log_limit: RateLimitedLog) -> None:
        self._config = config
        self._clock = clock
        self._log_limit = log_limit
        security = config.security
        self.tls: ReloadingServerContext | None = None
        if security.broker_port_tls is not None and security.tls is not None:
            self.tls = ReloadingServerContext(security.tls, clock)
        self.connection_limits = ConnectionLimits(
            config.max_connections or _limits.connections_max_for(fd_soft_limit()), config.max_connections_per_ip
        )
        self.port = config.broker_port
        self.port_tls = security.broker_port_tls
        self._listener: Listener | None = None
        self._listener_tls: Listener | None = None

    @property
    def service_url(self) -> str:
        """pulsar:// of the plain port; pulsar+ssl:// when there is only the TLS port."""
        if self.port is None:
            return self.service_url_tls or ""
        return f"pulsar://{self._config.advertised_address}:{self.port}"

    @property
    def service_url_plain(self) -> str | None:
        return None if self.port is None else self.service_url

    @property
    def service_url_tls(self) -> str | None:
        if self.tls is None or self.port_tls is None:
            return None
        return f"pulsar+ssl://{self._config.advertised_address}:{self.port_tls}"

    def start(self, new_connection: ProtocolFactory, new_tls_connection: ProtocolFactory) -> None:
        """Listen on the configured ports; both count against the same connection caps."""
        config = self._config
        if config.broker_port is not None:
            self._listener = Listener(new_connection, self.connection_limits, self._clock, self._log_limit)
            self.port = self._listener.start(config.bind_address, config.broker_port)
        if self.tls is not None and self.port_tls is not None:
            self._listener_tls = Listener(
                new_tls_connection, self.connection_limits, self._clock, self._log_limit,
                tls=self.tls, handshake_timeout_s=config.handshake_timeout_s,
            )
            self.port_tls = self._listener_tls.start(config.bind_address, self.port_tls)

    def close(self) -> None:
        """Stop accepting (the open connections are the broker's to close)."""
        for listener in (self._listener, self._listener_tls):
            if listener is not None:
                listener.close()

    def metrics(self) -> dict[str, float]:
        """The listeners' figures: the shared caps once, their own counters added up."""
        listeners = [x for x in (self._listener, self._listener_tls) if x is not None]
        if not listeners:
            return {}
        limits = listeners[0].metrics()
        limits["velamq_broker_accept_errors_total"] = sum(x.accept_errors_total for x in listeners)
        limits["velamq_broker_tls_handshake_failures_total"] = sum(x.tls_handshake_failures_total for x in listeners)
        return limits
