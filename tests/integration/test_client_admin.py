"""velamq.client.AdminClient, the one admin REST client (used by `velamq admin` and the Spark
connector), against a real broker: JSON answers, typed errors with Pulsar's reason, raw replies."""

from __future__ import annotations

import pickle

import pytest

from velamq import ClientError, VelamqError
from velamq.client import AdminClient, AdminError
from velamq.testing import BrokerProcess, free_port


def test_json_answers_and_paths(broker: BrokerProcess, topic: str) -> None:
    admin = AdminClient(broker.admin_url + "/")  # a trailing slash is tolerated
    assert "public" in admin.request("GET", "/admin/v2/tenants")
    assert admin.request("PUT", AdminClient.topic_path(topic, "partitions"), 3) is None  # 204
    assert admin.request("GET", AdminClient.topic_path(topic, "partitions")) == {"partitions": 3}
    assert AdminClient.topic_path(f"acme/ns/{topic}", "stats") == f"/admin/v2/persistent/acme/ns/{topic}/stats"
    assert AdminClient.path("tenants", "a b/c") == "/admin/v2/tenants/a%20b%2Fc"
    assert AdminClient.namespace_path("public/default", "retention") == "/admin/v2/namespaces/public/default/retention"
    with pytest.raises(ValueError):
        AdminClient.namespace_path("public")


def test_error_status_and_reason(broker: BrokerProcess) -> None:
    admin = AdminClient(broker.admin_url)
    with pytest.raises(AdminError) as info:
        admin.request("GET", AdminClient.path("tenants", "no-such-tenant"))
    error = info.value
    assert isinstance(error, ClientError) and isinstance(error, VelamqError)
    assert error.status == 404 and error.reason == "Tenant does not exist"
    assert error.method == "GET" and error.url.endswith("/admin/v2/tenants/no-such-tenant")
    assert "Tenant does not exist (HTTP 404)" in str(error)


def test_unreachable_server_is_status_0() -> None:
    admin = AdminClient(f"http://127.0.0.1:{free_port()}", timeout_s=5)
    with pytest.raises(AdminError) as info:
        admin.request("GET", "/admin/v2/tenants")
    assert info.value.status == 0 and "cannot reach" in info.value.reason


def test_raw_reply_and_query(broker: BrokerProcess, topic: str) -> None:
    admin = AdminClient(broker.admin_url, headers={"X-Test": "1"})
    admin.request("PUT", AdminClient.topic_path(topic), {})
    reply = admin.request_raw("GET", AdminClient.topic_path(topic, "partitions"))
    assert reply.status == 200 and reply.body.strip().startswith(b"{")
    admin.request("DELETE", AdminClient.topic_path(topic), query={"force": True})
    with pytest.raises(AdminError) as info:
        admin.request("GET", AdminClient.topic_path(topic, "stats"))
    assert info.value.status == 404


def test_picklable_for_spark_executors(broker: BrokerProcess) -> None:
    copy = pickle.loads(pickle.dumps(AdminClient(broker.admin_url, headers={"X-Test": "1"})))
    assert copy.admin_url == broker.admin_url and copy.headers == {"X-Test": "1"}
    assert "public" in copy.request("GET", "/admin/v2/tenants")
