"""The listening sockets of a broker of several workers, made once by the supervisor.

Every port is bound by the supervisor before any worker starts, and kept open by it for its whole
life: the shared service and admin ports (`--broker-port`, `--http-port` and their TLS twins), on
which every worker accepts (one accept queue, the kernel hands each connection to one of them),
and each worker's own ports, whose URLs lookups and admin redirects hand out. A worker that dies is
started again on the same sockets, so its URLs never change and a client reconnecting to it finds
the port listening (connections wait in the backlog until the new worker accepts them).

The worker learns its sockets and the URLs of all workers from one JSON value in its environment
(`VELAMQ_WORKER`): file descriptors it inherited, and plain data.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, field
from typing import Final

from velamq.broker import BrokerConfig, listening_socket

ENV_VAR: Final = "VELAMQ_WORKER"
# Connections that may wait for a worker to accept them (a restarting worker's port included).
listen_backlog: Final = 1024


def listen(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket (port 0: the system picks one), inheritable by children."""
    sock = listening_socket(host, port, listen_backlog)
    sock.set_inheritable(True)
    return sock


@dataclass(frozen=True)
class PortSet:
    """File descriptors of one set of ports (None: that port is not served)."""

    plain: int | None = None
    tls: int | None = None
    web: int | None = None
    web_tls: int | None = None

    def fds(self) -> list[int]:
        return [fd for fd in (self.plain, self.tls, self.web, self.web_tls) if fd is not None]


@dataclass(frozen=True)
class WorkerAddress:
    """Where one worker is reached: its own URLs."""

    worker_id: int
    broker_url: str | None
    broker_url_tls: str | None
    web_url: str | None
    web_url_tls: str | None


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process is told by its supervisor (ENV_VAR)."""

    worker_id: int
    workers: int
    shared: PortSet
    own: PortSet
    addresses: tuple[WorkerAddress, ...] = field(default_factory=tuple)

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, text: str) -> WorkerSpec:
        data = json.loads(text)
        return cls(
            worker_id=int(data["worker_id"]),
            workers=int(data["workers"]),
            shared=PortSet(**data["shared"]),
            own=PortSet(**data["own"]),
            addresses=tuple(WorkerAddress(**a) for a in data["addresses"]),
        )


def _port(sock: socket.socket | None) -> int | None:
    return None if sock is None else int(sock.getsockname()[1])


class SupervisorSockets:
    """Every socket of the broker: the shared ones and each worker's own, open until `close`."""

    def __init__(self, config: BrokerConfig, workers: int) -> None:
        host = config.bind_address
        security = config.security
        tls_binary = security.tls is not None and security.broker_port_tls is not None
        tls_web = security.tls is not None and security.web_port_tls is not None
        self._open: list[socket.socket] = []
        self._sockets: dict[int, socket.socket] = {}
        self.shared = self._set(
            host,
            config.broker_port,
            security.broker_port_tls if tls_binary else None,
            config.http_port,
            security.web_port_tls if tls_web else None,
        )
        own_plain = 0 if config.broker_port is not None else None
        own_web = 0 if config.http_port is not None else None
        self.own = [
            self._set(host, own_plain, 0 if tls_binary else None, own_web, 0 if tls_web else None)
            for _ in range(workers)
        ]
        advertised = config.advertised_address
        self.addresses = tuple(
            WorkerAddress(
                worker_id=i,
                broker_url=_url("pulsar", advertised, own[0]),
                broker_url_tls=_url("pulsar+ssl", advertised, own[1]),
                web_url=_url("http", advertised, own[2]),
                web_url_tls=_url("https", advertised, own[3]),
            )
            for i, own in enumerate(self._ports(o) for o in self.own)
        )

    def _set(self, host: str, plain: int | None, tls: int | None, web: int | None, web_tls: int | None) -> PortSet:
        made = [None if port is None else listen(host, port) for port in (plain, tls, web, web_tls)]
        for s in made:
            if s is not None:
                self._open.append(s)
                self._sockets[s.fileno()] = s
        plain_fd, tls_fd, web_fd, web_tls_fd = (None if s is None else s.fileno() for s in made)
        return PortSet(plain_fd, tls_fd, web_fd, web_tls_fd)

    def _ports(self, ports: PortSet) -> tuple[int | None, ...]:
        return tuple(self.port_of(fd) for fd in (ports.plain, ports.tls, ports.web, ports.web_tls))

    def port_of(self, fd: int | None) -> int | None:
        return None if fd is None else _port(self._sockets[fd])

    def spec(self, worker_id: int) -> WorkerSpec:
        return WorkerSpec(worker_id, len(self.own), self.shared, self.own[worker_id], self.addresses)

    def fds_for(self, worker_id: int) -> list[int]:
        """The descriptors worker `worker_id` inherits: the shared ports and its own."""
        return self.shared.fds() + self.own[worker_id].fds()

    def close(self) -> None:
        for sock in self._open:
            sock.close()
        self._open = []


def _url(scheme: str, host: str, port: int | None) -> str | None:
    return None if port is None else f"{scheme}://{host}:{port}"


def adopt(fd: int | None) -> socket.socket | None:
    """A worker's side: the inherited listening socket of that descriptor."""
    if fd is None:
        return None
    sock = socket.socket(fileno=fd)
    sock.set_inheritable(False)
    return sock


def worker_spec_from_environment() -> WorkerSpec | None:
    text = os.environ.get(ENV_VAR)
    return None if not text else WorkerSpec.from_env(text)
