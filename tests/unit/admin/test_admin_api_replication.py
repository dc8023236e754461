"""Clusters and replication lists over REST, as Pulsar's admin API has them (RP-1, WC-4)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from admin_harness import Admin, Reply

from velamq._topic_name import TopicName
from velamq.cli._main import main

NS = "/admin/v2/namespaces/public/default"
TOPIC = "/admin/v2/persistent/public/default/t"
WEST = {"serviceUrl": "http://west:8080", "brokerServiceUrl": "pulsar://west:6650"}


def call(admin: Admin, method: str, path: str, value: Any = None) -> Reply:
    return admin.request(method, path, None if value is None else json.dumps(value))


def test_the_local_cluster_comes_from_the_config(admin: Admin) -> None:
    local = call(admin, "GET", "/admin/v2/clusters/standalone").json()
    assert local["brokerServiceUrl"] == admin.broker.service_url
    assert call(admin, "GET", NS).json()["replication_clusters"] == ["standalone"]
    assert call(admin, "GET", NS + "/replication").json() == ["standalone"]


def test_a_remote_cluster_is_created_updated_and_deleted(admin: Admin) -> None:
    assert call(admin, "PUT", "/admin/v2/clusters/west", WEST).status == 204
    assert call(admin, "PUT", "/admin/v2/clusters/west", WEST).status == 409
    assert call(admin, "GET", "/admin/v2/clusters/west").json()["brokerServiceUrl"] == "pulsar://west:6650"
    changed = {**WEST, "brokerServiceUrl": "pulsar://west:7650", "authenticationPlugin": "token"}
    assert call(admin, "POST", "/admin/v2/clusters/west", changed).status == 204
    data = call(admin, "GET", "/admin/v2/clusters/west").json()
    assert (data["brokerServiceUrl"], data["authenticationPlugin"]) == ("pulsar://west:7650", "token")
    assert call(admin, "POST", "/admin/v2/clusters/nowhere", WEST).status == 404
    assert sorted(call(admin, "GET", "/admin/v2/clusters").json()) == ["standalone", "west"]
    assert call(admin, "DELETE", "/admin/v2/clusters/west").status == 204
    assert call(admin, "GET", "/admin/v2/clusters/west").status == 404
    assert call(admin, "DELETE", "/admin/v2/clusters/west").status == 404


def test_a_cluster_in_use_or_the_local_one_is_not_deleted(admin: Admin) -> None:
    call(admin, "PUT", "/admin/v2/clusters/west", WEST)
    call(admin, "POST", "/admin/v2/tenants/public", {"adminRoles": [], "allowedClusters": ["standalone", "west"]})
    reply = call(admin, "DELETE", "/admin/v2/clusters/west")
    assert reply.status == 412 and "public" in reply.json()["reason"]
    assert call(admin, "DELETE", "/admin/v2/clusters/standalone").status == 412


def test_namespace_replication_is_checked_stored_and_applied(admin: Admin) -> None:
    call(admin, "PUT", "/admin/v2/clusters/west", WEST)
    assert call(admin, "POST", NS + "/replication", ["standalone", "west"]).status == 403  # not allowed yet
    call(admin, "POST", "/admin/v2/tenants/public", {"adminRoles": [], "allowedClusters": ["standalone", "west"]})
    assert call(admin, "POST", NS + "/replication", []).status == 412
    assert call(admin, "POST", NS + "/replication", ["global"]).status == 412
    assert call(admin, "POST", NS + "/replication", ["standalone", "mars"]).status == 412
    assert call(admin, "POST", NS + "/replication", {"a": 1}).status == 400
    assert call(admin, "POST", NS + "/replication", ["standalone", "west"]).status == 204
    assert call(admin, "GET", NS + "/replication").json() == ["standalone", "west"]
    assert call(admin, "GET", NS).json()["replication_clusters"] == ["standalone", "west"]
    assert admin.policy("replication_clusters") == ["standalone", "west"]


def test_topic_replication_overrides_the_namespace(admin: Admin) -> None:
    call(admin, "PUT", "/admin/v2/clusters/west", WEST)
    call(admin, "POST", "/admin/v2/tenants/public", {"adminRoles": [], "allowedClusters": ["standalone", "west"]})
    admin.client().create_producer("persistent://public/default/t").close()
    assert call(admin, "GET", TOPIC + "/replication").status == 204
    assert call(admin, "GET", TOPIC + "/replication?applied=true").json() == ["standalone"]
    assert call(admin, "POST", TOPIC + "/replication", ["standalone", "west"]).status == 204
    assert call(admin, "GET", TOPIC + "/replication").json() == ["standalone", "west"]
    broker = admin.broker.server.broker

    async def policies() -> tuple[str, ...]:
        topic = await broker.get_topic(TopicName.parse("persistent://public/default/t"), create=False)
        return topic.policies.replication_clusters

    assert admin.run(policies()) == ("standalone", "west")
    assert call(admin, "DELETE", TOPIC + "/replication").status == 204
    assert call(admin, "GET", TOPIC + "/replication").status == 204
    assert admin.run(policies()) == ()


def test_the_cli_verbs_of_pulsar_admin(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    def cli(*argv: str) -> str:
        code = main(["admin", "--admin-url", f"http://127.0.0.1:{admin.port}", *argv])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    cli("clusters", "create", "west", "--url", "http://west:8080", "--broker-url", "pulsar://west:6650",
        "--tls-enable", "--auth-plugin", "token", "--auth-parameters", "token:abc")
    data = call(admin, "GET", "/admin/v2/clusters/west").json()
    assert (data["brokerServiceUrl"], data["brokerClientTlsEnabled"], data["authenticationParameters"]) == (
        "pulsar://west:6650", True, "token:abc")
    cli("clusters", "update", "west", "--broker-url-secure", "pulsar+ssl://west:6651")
    data = call(admin, "GET", "/admin/v2/clusters/west").json()
    assert (data["brokerServiceUrl"], data["brokerServiceUrlTls"]) == ("pulsar://west:6650", "pulsar+ssl://west:6651")
    cli("tenants", "update", "public", "--allowed-clusters", "standalone,west")
    cli("namespaces", "set-clusters", "public/default", "--clusters", "standalone,west")
    assert json.loads(cli("namespaces", "get-clusters", "public/default", "--json")) == ["standalone", "west"]
    admin.client().create_producer("persistent://public/default/t").close()
    cli("topics", "set-replication-clusters", "persistent://public/default/t", "--clusters", "standalone")
    assert json.loads(cli("topics", "get-replication-clusters", "t", "--json")) == ["standalone"]
    cli("topics", "remove-replication-clusters", "t")
    assert json.loads(cli("topics", "get-replication-clusters", "t", "--applied", "--json")) == [
        "standalone", "west"]
    cli("namespaces", "set-clusters", "public/default", "--clusters", "standalone")
    cli("tenants", "update", "public", "--allowed-clusters", "standalone")
    cli("clusters", "delete", "west")
    assert "west" not in call(admin, "GET", "/admin/v2/clusters").json()
