"""The broker and bundle routes pulsar-admin asks about, answered for velamq's one broker (WC-4).

    GET /admin/v2/brokers/{cluster}                              [this broker's id]: "host:port" of the
                                                                 admin server, as Pulsar names brokers
    GET /admin/v2/brokers/leaderBroker                           {"serviceUrl", "brokerId"}: this broker
    GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces     every namespace's one bundle
    GET /admin/v2/brokers/version                                velamq's version, as text
    GET /admin/v2/brokers/configuration                          [] (no setting changes at run time)
    GET /admin/v2/brokers/configuration/values                   {} (likewise)
    GET /admin/v2/namespaces/{tenant}/{namespace}/bundles        the namespace's BundlesData
                                                                 {"boundaries", "numBundles"}
    GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/bundle   the namespace's one bundle range

`namespaces bundles` answers the namespace's bundles as stored at its creation. Otherwise one
broker owns everything, as one bundle (0x00000000_0xffffffff): pulsar-admin's brokers list,
leader-broker, namespaces, version and topics bundle-range get the answers a single-broker Pulsar
cluster with one bundle per namespace would give, and
list-dynamic-config / get-all-dynamic-config say that no setting can change at run time (settings
are read at start). An unknown cluster, broker or namespace is 404.
"""

from __future__ import annotations

from typing import Any, Final

from velamq import __version__
from velamq.admin._access import DOMAIN
from velamq.admin._http import HttpError, Response
from velamq.admin._params import require_namespace, topic_of
from velamq.admin._router import Call, Router

FULL_RANGE: Final = "0x00000000_0xffffffff"


def broker_id(call: Call) -> str:
    """Pulsar's broker id: host:port of its web service."""
    return call.web_service_url.split("://", 1)[-1]


async def _require_cluster(call: Call) -> None:
    cluster = call.params["cluster"]
    if cluster not in await call.backend.metadata.list_clusters():
        raise HttpError(404, f"Cluster {cluster} does not exist")


async def list_brokers(call: Call) -> Response:
    await _require_cluster(call)
    return Response.json([broker_id(call)])


async def leader_broker(call: Call) -> Response:
    return Response.json({"serviceUrl": call.web_service_url, "brokerId": broker_id(call)})


async def owned_namespaces(call: Call) -> Response:
    await _require_cluster(call)
    if call.params["broker"] != broker_id(call):
        raise HttpError(404, f"Broker {call.params['broker']} not found")
    metadata = call.backend.metadata
    owned: dict[str, Any] = {}
    for tenant in await metadata.list_tenants():
        for namespace in await metadata.list_namespaces(tenant):
            owned[f"{namespace}/{FULL_RANGE}"] = {"broker_assignment": "shared", "is_controlled": False,
                                                  "is_active": True}
    return Response.json(owned)


async def version(call: Call) -> Response:
    return Response.text(__version__)


async def dynamic_configuration_names(call: Call) -> Response:
    return Response.json([])


async def dynamic_configuration_values(call: Call) -> Response:
    return Response.json({})


async def namespace_bundles(call: Call) -> Response:
    """The namespace's BundlesData, as stored at its creation (docs/workers.md)."""
    ns = f"{call.params['tenant']}/{call.params['namespace']}"
    await require_namespace(call, ns)
    return Response.json((await call.backend.metadata.get_namespace_bundles(ns)).to_policy())


async def topic_bundle(call: Call) -> Response:
    await require_namespace(call, topic_of(call).namespace)
    return Response.text(FULL_RANGE)


def register(router: Router) -> None:
    router.add("GET", "/admin/v2/brokers/{cluster}", list_brokers)
    router.add("GET", "/admin/v2/brokers/leaderBroker", leader_broker)
    router.add("GET", "/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", owned_namespaces)
    router.add("GET", "/admin/v2/brokers/version", version)
    router.add("GET", "/admin/v2/brokers/configuration", dynamic_configuration_names)
    router.add("GET", "/admin/v2/brokers/configuration/values", dynamic_configuration_values)
    router.add("GET", "/admin/v2/namespaces/{tenant}/{namespace}/bundles", namespace_bundles)
    router.add("GET", "/admin/v2/" + DOMAIN + "/{tenant}/{namespace}/{topic}/bundle", topic_bundle)
