"""The replicator authenticates to a secured remote with the credentials of the cluster's data (TLS
and a token, RP-2): the remote's authorization decides; a refused role leaves the backlog where it
is, and the grant lets it through without a restart."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from security_helpers import SecureSetup, grant, secure_setup, secured_broker, tls_port
from wait_helpers import wait_until

from velamq.broker import BrokerConfig
from velamq.client import AsyncClient, AuthenticationToken
from velamq.testing import BrokerThread, run_broker_in_thread

NS = "public/geo"


def _replicating(broker: BrokerThread, remotes: dict[str, dict[str, object]]) -> None:
    """Clusters registered, public allowing east and west, public/geo replicating to both."""

    async def setup() -> None:
        metadata = broker.server.metadata
        for name, data in remotes.items():
            await metadata.create_cluster(name, data)
        await metadata.update_tenant("public", {"adminRoles": [], "allowedClusters": ["east", "west"]})
        await metadata.create_namespace(NS, {"replication_clusters": ["east", "west"]})

    broker.run(setup())


@pytest.fixture
def west(tmp_path: Path) -> Iterator[tuple[BrokerThread, SecureSetup]]:
    setup = secure_setup(tmp_path / "west", clusterName="west")
    with secured_broker(setup) as broker:
        _replicating(broker, {"east": {}})
        yield broker, setup


def test_replication_to_a_secured_remote(west: tuple[BrokerThread, SecureSetup], tmp_path: Path) -> None:
    remote, setup = west
    with run_broker_in_thread(tmp_path / "east", config=BrokerConfig(cluster_name="east")) as east:
        _replicating(east, {"west": {
            "brokerServiceUrlTls": f"pulsar+ssl://localhost:{tls_port(remote)}", "brokerClientTlsEnabled": True,
            "brokerClientTrustCertsFilePath": str(setup.pki.ca_cert), "authenticationPlugin": "token",
            "authenticationParameters": f"token:{setup.token('app')}",
        }})
        topic = f"persistent://{NS}/secure-{uuid.uuid4().hex[:8]}"
        east.run(_produce(east.service_url, topic, [b"a", b"b"]))
        service = east.server.replication
        wait_until(lambda: service.topic_stats(topic).get("west") is not None, what="the replicator")
        assert service.topic_stats(topic)["west"].connected is False  # app may not produce on west yet
        grant(remote, NS, "app", ["produce"])
        wait_until(lambda: service.topic_stats(topic)["west"].replication_backlog == 0, timeout_s=60,
                   what="the backlog sent once app may produce")
        reader = AsyncClient(f"pulsar+ssl://localhost:{tls_port(remote)}",
                             authentication=AuthenticationToken(setup.token("superUser")),
                             tls_trust_certs_file_path=str(setup.pki.ca_cert))
        assert remote.run(_read(reader, topic, 2)) == [b"a", b"b"]


async def _produce(service_url: str, topic: str, payloads: list[bytes]) -> None:
    async with AsyncClient(service_url) as client:
        producer = await client.create_producer(topic)
        for payload in payloads:
            await producer.send(payload)
        await producer.close()


async def _read(client: AsyncClient, topic: str, n: int) -> list[bytes]:
    async with client:
        reader = await client.create_reader(topic, "earliest")
        got = []
        while len(got) < n:
            got.append((await asyncio.wait_for(reader.read_next(), 30)).data())
        return got
