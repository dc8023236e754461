"""Every admin endpoint: status codes and JSON shapes as Pulsar gives them (WC-4)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_harness import Admin, Reply, start_admin

from velamq.admin._http import Response
from velamq.admin._router import Call
from velamq.broker import BrokerConfig, _broker_admin

P = "/admin/v2/persistent/public/default"
NP = "/admin/v2/non-persistent/public/default"


def assert_error(reply: Reply, status: int) -> None:
    assert reply.status == status, reply
    body = reply.json()
    assert isinstance(body, dict) and isinstance(body.get("reason"), str) and body["reason"]


# ----------------------------------------------------------------------------- clusters


def test_clusters(admin: Admin) -> None:
    assert admin.request("GET", "/admin/v2/clusters").json() == ["standalone"]
    data = admin.request("GET", "/admin/v2/clusters/standalone").json()
    assert data["serviceUrl"] == f"http://127.0.0.1:{admin.port}"
    assert data["brokerServiceUrl"] == admin.broker.service_url
    assert data["brokerServiceUrlTls"] == ""
    assert_error(admin.request("PUT", "/admin/v2/clusters/standalone", "{}"), 409)
    assert admin.request("PUT", "/admin/v2/clusters/other", '{"serviceUrl":"http://o:8080"}').status == 204
    assert admin.request("GET", "/admin/v2/clusters").json() == ["other", "standalone"]
    assert admin.request("GET", "/admin/v2/clusters/other").json()["serviceUrl"] == "http://o:8080"
    assert_error(admin.request("GET", "/admin/v2/clusters/ghost"), 404)


# ----------------------------------------------------------------------------- tenants


def test_tenant_lifecycle(admin: Admin) -> None:
    assert admin.request("GET", "/admin/v2/tenants").json() == ["public"]
    body = '{"adminRoles":["anonymous"],"allowedClusters":["standalone"]}'
    assert admin.request("PUT", "/admin/v2/tenants/private", body).status == 204
    assert_error(admin.request("PUT", "/admin/v2/tenants/private", body), 409)
    assert admin.request("GET", "/admin/v2/tenants/private").json() == {
        "adminRoles": ["anonymous"],
        "allowedClusters": ["standalone"],
    }
    assert admin.request("POST", "/admin/v2/tenants/private", '{"adminRoles":["x"]}').status == 204
    assert admin.request("GET", "/admin/v2/tenants/private").json()["adminRoles"] == ["x"]
    assert admin.request("GET", "/admin/v2/tenants").json() == ["private", "public"]
    assert admin.request("DELETE", "/admin/v2/tenants/private").status == 204
    assert_error(admin.request("GET", "/admin/v2/tenants/private"), 404)
    assert_error(admin.request("DELETE", "/admin/v2/tenants/private"), 404)
    assert_error(admin.request("POST", "/admin/v2/tenants/private", "{}"), 404)


def test_tenant_without_body_gets_every_cluster(admin: Admin) -> None:
    assert admin.request("PUT", "/admin/v2/tenants/bare").status == 204
    assert admin.request("GET", "/admin/v2/tenants/bare").json() == {
        "adminRoles": [],
        "allowedClusters": ["standalone"],
    }


def test_tenant_errors(admin: Admin) -> None:
    assert_error(admin.request("PUT", "/admin/v2/tenants/t1", '{"allowedClusters":["mars"]}'), 412)
    assert_error(admin.request("PUT", "/admin/v2/tenants/t1", '{"adminRoles":"me"}'), 400)
    assert_error(admin.request("PUT", "/admin/v2/tenants/t1", "[1,2]"), 400)
    assert_error(admin.request("PUT", "/admin/v2/tenants/t1", "{not json"), 400)
    assert_error(admin.request("PUT", "/admin/v2/tenants/bad%20name", "{}"), 412)
    assert_error(admin.request("PUT", "/admin/v2/tenants/a%2Fb", "{}"), 412)
    # public still has public/default: Pulsar answers 409 Conflict.
    assert_error(admin.request("DELETE", "/admin/v2/tenants/public"), 409)
    assert_error(admin.request("DELETE", "/admin/v2/tenants/public?force=true"), 405)


# ----------------------------------------------------------------------------- namespaces


def test_namespace_lifecycle(admin: Admin) -> None:
    assert admin.request("GET", "/admin/v2/namespaces/public").json() == ["public/default"]
    assert admin.request("PUT", "/admin/v2/namespaces/public/default-2").status == 204
    assert_error(admin.request("PUT", "/admin/v2/namespaces/public/default-2"), 409)
    assert admin.request("GET", "/admin/v2/namespaces/public").json() == ["public/default", "public/default-2"]
    policies = admin.request("GET", "/admin/v2/namespaces/public/default-2").json()
    assert policies["replication_clusters"] == ["standalone"]
    assert policies["bundles"]["numBundles"] == 4
    assert policies["schema_compatibility_strategy"] == "UNDEFINED"
    assert "deduplicationEnabled" not in policies
    assert admin.request("DELETE", "/admin/v2/namespaces/public/default-2").status == 204
    assert_error(admin.request("GET", "/admin/v2/namespaces/public/default-2"), 404)
    assert_error(admin.request("DELETE", "/admin/v2/namespaces/public/default-2"), 404)


def test_namespace_with_policies_body(admin: Admin) -> None:
    body = '{"retention_policies":{"retentionTimeInMinutes":60,"retentionSizeInMB":-1}}'
    assert admin.request("PUT", "/admin/v2/namespaces/public/ret", body).status == 204
    policies = admin.request("GET", "/admin/v2/namespaces/public/ret").json()
    assert policies["retention_policies"] == {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}


def test_namespace_errors(admin: Admin) -> None:
    assert_error(admin.request("GET", "/admin/v2/namespaces/ghost"), 404)
    assert_error(admin.request("PUT", "/admin/v2/namespaces/ghost/ns"), 404)
    assert_error(admin.request("PUT", "/admin/v2/namespaces/public/ns", "[]"), 400)
    assert_error(admin.request("PUT", "/admin/v2/namespaces/public/b%21d"), 412)
    assert_error(admin.request("PUT", "/admin/v2/namespaces/public/std%2Fns"), 412)  # not a V1 name
    assert admin.request("PUT", f"{P}/keep").status == 204
    assert_error(admin.request("DELETE", "/admin/v2/namespaces/public/default"), 409)
    assert_error(admin.request("DELETE", "/admin/v2/namespaces/public/default?force=true"), 405)


@pytest.fixture
def force_admin(tmp_path: Path) -> Iterator[Admin]:
    yield from start_admin(tmp_path, config=BrokerConfig(force_delete_namespace_allowed=True))


def test_force_delete_of_a_namespace_deletes_its_topics_in_batches(
    force_admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """forceDeleteNamespaceAllowed: every topic goes (loaded ones with their clients, partitioned
    ones with their partitions, more topics than a batch), then the namespace; nothing is left in
    the metadata store or in storage."""
    admin = force_admin
    monkeypatch.setattr(_broker_admin, "namespace_delete_batch", 7)
    ns_path = "/admin/v2/namespaces/public/doomed"
    assert admin.request("PUT", ns_path).status == 204
    base = "/admin/v2/persistent/public/doomed"
    for i in range(20):
        assert admin.request("PUT", f"{base}/t{i}").status == 204
    assert admin.request("PUT", f"{base}/parted/partitions", "3").status == 204
    assert admin.request("PUT", "/admin/v2/non-persistent/public/doomed/np").status == 204
    client = admin.client()
    producer = client.create_producer("persistent://public/doomed/t3")
    producer.send(b"x")
    client.subscribe("persistent://public/doomed/parted", "s")  # loads the partitions
    assert admin.request("DELETE", ns_path).status == 409  # not empty, not forced
    assert admin.request("DELETE", ns_path + "?force=true").status == 204
    assert admin.request("GET", ns_path).status == 404
    assert admin.run(admin.metadata.list_topics_page("public/doomed", limit=100)) == []
    storage = admin.broker.server.storage
    stored = admin.run(storage.ledger_names("persistent://public/doomed/", 100))
    assert [n for n in stored if "/doomed/" in n] == []
    assert not [t for t in admin.broker.server.broker.topics if "/doomed/" in t]


def test_deduplication(admin: Admin) -> None:
    url = "/admin/v2/namespaces/public/default/deduplication"
    assert admin.request("GET", url).status == 204  # never set: Pulsar's null
    assert admin.request("POST", url, "true").status == 204
    assert admin.request("GET", url).json() is True
    assert admin.policy("deduplicationEnabled") is True
    assert admin.request("POST", url, "false").status == 204
    assert admin.request("GET", url).json() is False
    assert admin.request("POST", url, '"true"').status == 204
    assert admin.request("GET", url).json() is True
    assert admin.request("DELETE", url).status == 204
    assert admin.request("GET", url).status == 204
    assert_error(admin.request("POST", url, "maybe"), 400)
    assert_error(admin.request("POST", url, "1"), 400)
    assert_error(admin.request("POST", "/admin/v2/namespaces/public/ghost/deduplication", "true"), 404)


def test_schema_compatibility_strategy(admin: Admin) -> None:
    url = "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy"
    assert admin.request("GET", url).json() == "UNDEFINED"
    assert admin.request("PUT", url, '"FORWARD"').status == 204  # what the client's tests send
    assert admin.request("GET", url).json() == "FORWARD"
    assert admin.policy("schema_compatibility_strategy") == "FORWARD"
    assert admin.request("PUT", url, "BACKWARD_TRANSITIVE").status == 204
    assert admin.request("GET", url).json() == "BACKWARD_TRANSITIVE"
    assert_error(admin.request("PUT", url, '"SIDEWAYS"'), 400)
    assert_error(admin.request("PUT", url, "42"), 400)
    assert_error(admin.request("PUT", "/admin/v2/namespaces/public/ghost/schemaCompatibilityStrategy", '"FULL"'), 404)


def test_namespace_topics_by_mode(admin: Admin) -> None:
    assert admin.request("PUT", f"{P}/plain").status == 204
    assert admin.request("PUT", f"{P}/parted/partitions", '"2"').status == 204
    assert admin.request("PUT", f"{NP}/np").status == 204
    assert admin.request("PUT", f"{NP}/npp/partitions", "1").status == 204
    url = "/admin/v2/namespaces/public/default/topics"
    persistent = [
        "persistent://public/default/parted-partition-0",
        "persistent://public/default/parted-partition-1",
        "persistent://public/default/plain",
    ]
    non_persistent = ["non-persistent://public/default/np", "non-persistent://public/default/npp-partition-0"]
    assert admin.request("GET", url).json() == persistent
    assert admin.request("GET", url + "?mode=PERSISTENT").json() == persistent
    assert admin.request("GET", url + "?mode=NON_PERSISTENT").json() == non_persistent
    assert admin.request("GET", url + "?mode=ALL").json() == sorted(persistent + non_persistent)
    assert_error(admin.request("GET", url + "?mode=SOME"), 400)
    assert_error(admin.request("GET", "/admin/v2/namespaces/public/ghost/topics"), 404)


# ----------------------------------------------------------------------------- partitioned topics


def test_partitioned_topic_lifecycle(admin: Admin) -> None:
    url = f"{P}/pt/partitions"
    assert admin.request("GET", url).json() == {"partitions": 0}
    assert admin.request("PUT", url, '"3"').status == 204  # the client tests send a JSON string
    assert_error(admin.request("PUT", url, "3"), 409)
    assert admin.request("GET", url).json() == {"partitions": 3}
    assert admin.request("GET", url + "?checkAllowAutoCreation=true").json() == {"partitions": 3}
    assert admin.request("POST", url, "5").status == 204
    assert admin.request("GET", url).json() == {"partitions": 5}
    assert admin.request("POST", url, "5").status == 204  # same count: accepted, nothing changes
    assert_error(admin.request("POST", url, "2"), 422)
    assert admin.request("GET", f"{P}/partitioned").json() == ["persistent://public/default/pt"]
    assert admin.request("GET", f"{NP}/partitioned").json() == []
    assert admin.request("DELETE", url + "?force=true").status == 204
    assert admin.request("GET", url).json() == {"partitions": 0}
    assert_error(admin.request("DELETE", url), 404)


def test_partitioned_topic_errors(admin: Admin) -> None:
    url = f"{P}/pe/partitions"
    for body, status in (("0", 406), ('"-1"', 406), ("100000", 406), ("2.5", 400), ("true", 400),
                         ('"x"', 400), ("", 400), ("{", 400), ('"--5"', 400), ('"-"', 400),
                         ('"' + "9" * 30 + '"', 400), ("9" * 5000, 400), ("9" * 30, 406)):
        assert_error(admin.request("PUT", url, body), status)
    assert_error(admin.request("PUT", "/admin/v2/persistent/public/ghost/pe/partitions", "2"), 404)
    assert_error(admin.request("PUT", f"{P}/pe-partition-0/partitions", "2"), 412)
    assert_error(admin.request("POST", url, "4"), 409)  # not a partitioned topic
    assert_error(admin.request("POST", url, "0"), 406)
    assert_error(admin.request("GET", "/admin/v2/persistent/public/ghost/pe/partitions"), 404)
    assert_error(admin.request("GET", "/admin/v2/persistent/ghost/ns/pe/partitions?checkAllowAutoCreation=true"), 404)
    assert_error(admin.request("GET", url + "?checkAllowAutoCreation=perhaps"), 400)
    assert admin.request("PUT", f"{P}/plainpe").status == 204
    assert_error(admin.request("PUT", f"{P}/plainpe/partitions", "2"), 409)


def test_partitioned_topic_in_use(admin: Admin) -> None:
    url = f"{P}/busy/partitions"
    assert admin.request("PUT", url, "2").status == 204
    admin.client().subscribe("persistent://public/default/busy", "sub")  # a consumer on each partition
    assert_error(admin.request("DELETE", url), 412)
    assert_error(admin.request("DELETE", url + "?force=false"), 412)
    assert admin.request("GET", url).json() == {"partitions": 2}
    assert admin.request("DELETE", url + "?force=true").status == 204
    assert admin.request("GET", url).json() == {"partitions": 0}


# ----------------------------------------------------------------------------- topics


def test_non_partitioned_topic_lifecycle(admin: Admin) -> None:
    assert admin.request("PUT", f"{P}/t1").status == 204
    assert_error(admin.request("PUT", f"{P}/t1"), 409)
    assert admin.request("PUT", f"{NP}/t1").status == 204  # the other domain is another topic
    assert admin.request("GET", P).json() == ["persistent://public/default/t1"]
    assert admin.request("GET", NP).json() == ["non-persistent://public/default/t1"]
    assert admin.request("GET", f"{P}/t1/partitions").json() == {"partitions": 0}
    assert admin.request("DELETE", f"{P}/t1").status == 204
    assert_error(admin.request("DELETE", f"{P}/t1"), 404)
    assert admin.request("GET", P).json() == []


def test_topic_errors(admin: Admin) -> None:
    assert_error(admin.request("PUT", "/admin/v2/persistent/public/ghost/t"), 404)
    assert_error(admin.request("DELETE", "/admin/v2/persistent/public/ghost/t"), 404)
    assert_error(admin.request("GET", "/admin/v2/persistent/public/ghost"), 404)
    assert_error(admin.request("GET", "/admin/v2/persistent/public/ghost/partitioned"), 404)
    assert_error(admin.request("PUT", f"{P}/bad%0Aname"), 412)
    assert_error(admin.request("PUT", f"{P}/%20lead"), 412)
    assert admin.request("PUT", f"{P}/pp/partitions", "2").status == 204
    assert_error(admin.request("PUT", f"{P}/pp"), 409)  # a partitioned topic of that name exists
    assert_error(admin.request("DELETE", f"{P}/pp"), 409)  # use delete-partitioned-topic
    assert admin.request("PUT", f"{P}/pp-partition-1").status == 204  # a missing partition
    assert_error(admin.request("PUT", f"{P}/pp-partition-2"), 412)  # beyond its partitions
    admin.client().create_producer("persistent://public/default/pp-partition-1")
    assert_error(admin.request("DELETE", f"{P}/pp-partition-1"), 412)
    assert admin.request("DELETE", f"{P}/pp-partition-1?force=true").status == 204


def test_encoded_topic_names(admin: Admin) -> None:
    assert admin.request("PUT", f"{P}/a%3Ab%3Dc.d").status == 204
    assert admin.request("GET", P).json() == ["persistent://public/default/a:b=c.d"]
    # An encoded "/" stays inside its segment and makes an invalid local name.
    assert_error(admin.request("PUT", f"{P}/x%2Fy"), 412)
    assert_error(admin.request("GET", "/lookup/v2/topic/persistent/public/default%2Fx/y"), 412)


# ----------------------------------------------------------------------------- lookup, health


def test_http_lookup(admin: Admin) -> None:
    reply = admin.request("GET", "/lookup/v2/topic/persistent/public/default/anything")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("application/json")
    assert reply.json() == {
        "brokerUrl": admin.broker.service_url,
        "brokerUrlTls": "",
        "httpUrl": f"http://127.0.0.1:{admin.port}",
        "httpUrlTls": "",
        "nativeUrl": admin.broker.service_url,
    }
    assert admin.request("GET", "/lookup/v2/topic/non-persistent/public/default/x").status == 200
    assert_error(admin.request("GET", "/lookup/v2/topic/persistent/public/ghost/x"), 404)
    assert_error(admin.request("GET", "/lookup/v2/topic/bogus/public/default/x"), 404)


def test_health(admin: Admin) -> None:
    reply = admin.request("GET", "/admin/v2/brokers/health")
    assert (reply.status, reply.body) == (200, b"ok")
    assert reply.headers["content-type"].startswith("text/plain")
    assert admin.request("GET", "/admin/v2/brokers/ready").body == b"ok"


def test_unknown_path_and_wrong_method(admin: Admin) -> None:
    assert_error(admin.request("GET", "/nope"), 404)
    assert_error(admin.request("GET", "/admin/v2/nope/a/b"), 404)
    reply = admin.request("PATCH", "/admin/v2/tenants/public")
    assert_error(reply, 405)
    assert reply.headers["allow"] == "DELETE, GET, HEAD, POST, PUT"
    assert_error(admin.request("DELETE", "/metrics"), 405)


def test_head_is_get_without_body(admin: Admin) -> None:
    reply = admin.request("HEAD", "/admin/v2/clusters")
    assert reply.status == 200 and reply.body == b""
    assert reply.headers["content-length"] == str(len(b'["standalone"]'))


def test_trailing_slash_and_absolute_form(admin: Admin) -> None:
    assert admin.request("GET", "/admin/v2/tenants/").json() == ["public"]
    reply = admin.raw(b"GET http://example/admin/v2/clusters HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b'["standalone"]')


# ----------------------------------------------------------------------------- timeouts


@pytest.fixture
def slow_admin(tmp_path: Path) -> Iterator[Admin]:
    yield from start_admin(tmp_path, admin_timeout_s=0.3)


def test_handler_timeout_gives_503_and_server_keeps_serving(slow_admin: Admin) -> None:
    async def never_answers(call: Call) -> Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def add_route() -> None:  # on the server's loop, where the router is read
        slow_admin.server.router.add("GET", "/test/never", never_answers)

    slow_admin.run(add_route())
    assert_error(slow_admin.request("GET", "/test/never"), 503)
    assert slow_admin.request("GET", "/admin/v2/clusters").status == 200



def test_random_requests_never_get_a_500(admin: Admin) -> None:
    """Any mix of known path words, odd names and bodies gets a 2xx/4xx answer, never a 5xx."""
    rng = random.Random(7)
    words = ["admin", "v2", "persistent", "non-persistent", "namespaces", "tenants", "clusters", "public",
             "default", "partitions", "partitioned", "topics", "deduplication", "schemaCompatibilityStrategy",
             "lookup", "topic", "x", "x-partition-0", "%2F", "%00", "a%20b", "..", "%FF%FE", "standalone"]
    bodies = [None, "", "3", '"3"', "-1", "true", "{}", "[]", '{"adminRoles":["a"]}', "null", '"FORWARD"', "{"]
    for _ in range(400):
        path = "/" + "/".join(rng.choice(words) for _ in range(rng.randrange(1, 8)))
        if rng.random() < 0.3:
            path += rng.choice(["?force=true", "?mode=ALL", "?checkAllowAutoCreation=true", "?force=maybe"])
        method = rng.choice(["GET", "PUT", "POST", "DELETE", "HEAD"])
        reply = admin.request(method, path, rng.choice(bodies))
        assert reply.status < 500 or reply.status == 505, (method, path, reply)
    still = admin.request("GET", "/admin/v2/clusters")
    assert still.status == 200
