"""The broker and bundle routes pulsar-admin asks about (WC-4).

    GET /admin/v2/brokers/{cluster}                              every broker's id: "host:port" of its
                                                                 admin server, as Pulsar names brokers
                                                                 (one per worker of a multi-worker broker)
    GET /admin/v2/brokers/leaderBroker                           {"serviceUrl", "brokerId"}: this broker
    GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces     the bundles that broker owns
    GET /admin/v2/brokers/version                                velamq's version, as text
    GET /admin/v2/brokers/configuration                          [] (no setting changes at run time)
    GET /admin/v2/brokers/configuration/values                   {} (likewise)
    GET /admin/v2/namespaces/{tenant}/{namespace}/bundles        {"boundaries", "numBundles"}
    GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/bundle   the bundle range that holds the topic
    PUT /admin/v2/namespaces/{tenant}/{namespace}/{bundle}/unload[?destinationBroker=host:port]
                                                                 unload the bundle's topics (204)

A namespace's bundles are its `bundles` policy (velamq._bundles: CRC-32 of the full topic name over
sorted boundaries; `defaultNumberOfNamespaceBundles` equal ones when the policy is absent). In one
process the broker owns every bundle, and unloading one closes its loaded topics (their clients
reconnect and load them again), as Pulsar's standalone does. With several workers a bundle has one
owner worker: the unload is answered by a 307 to the owner, which moves the bundle to
`destinationBroker` (another worker's id) or to a worker it picks (docs/workers.md). An unknown
cluster, broker or namespace is 404; a bundle name that is not `0x%08x_0x%08x`, or not one of the
namespace's bundles, is 412; a destinationBroker that is no broker's id is 412.
"""

from __future__ import annotations

from typing import Any

from velamq import __version__
from velamq._bundles import BundleError, NamespaceBundles, parse_bundle
from velamq.admin._access import DOMAIN, NAMESPACE
from velamq.admin._http import HttpError, Response
from velamq.admin._params import namespace_of, require_namespace, topic_of
from velamq.admin._router import Call, Router
from velamq.admin._routing import redirect


def broker_id(call: Call) -> str:
    """Pulsar's broker id: host:port of its web service."""
    return call.web_service_url.split("://", 1)[-1]


async def _require_cluster(call: Call) -> None:
    cluster = call.params["cluster"]
    if cluster not in await call.backend.metadata.list_clusters():
        raise HttpError(404, f"Cluster {cluster} does not exist")


async def broker_ids(call: Call) -> list[str]:
    """Every broker's id: each worker's with several workers, else this one's."""
    if call.routing is None:
        return [broker_id(call)]
    return sorted(await call.routing.broker_addresses())


async def list_brokers(call: Call) -> Response:
    await _require_cluster(call)
    return Response.json(await broker_ids(call))


async def bundles_of(call: Call, namespace: str) -> NamespaceBundles:
    """The namespace's bundles (404 if it does not exist)."""
    await require_namespace(call, namespace)
    policy = (await call.backend.metadata.get_policies(namespace)).get("bundles")
    try:
        return NamespaceBundles.from_policy(policy if isinstance(policy, dict) else None)
    except BundleError as exc:
        raise HttpError(500, f"the bundles policy of {namespace} is malformed: {exc}") from None


async def leader_broker(call: Call) -> Response:
    return Response.json({"serviceUrl": call.web_service_url, "brokerId": broker_id(call)})


async def owned_namespaces(call: Call) -> Response:
    await _require_cluster(call)
    if call.params["broker"] not in await broker_ids(call):
        raise HttpError(404, f"Broker {call.params['broker']} not found")
    metadata = call.backend.metadata
    owned: dict[str, Any] = {}
    for tenant in await metadata.list_tenants():
        for namespace in await metadata.list_namespaces(tenant):
            for bundle in (await bundles_of(call, namespace)).ranges:
                if not await _owns(call, call.params["broker"], namespace, bundle.name):
                    continue
                owned[f"{namespace}/{bundle.name}"] = {"broker_assignment": "shared", "is_controlled": False,
                                                      "is_active": True}
    return Response.json(owned)


async def _owns(call: Call, broker: str, namespace: str, bundle: str) -> bool:
    if call.routing is None:
        return True
    owner = await call.routing.bundle_owner_web_url(namespace, bundle, False)
    return (broker_id(call) if owner is None else owner.split("://", 1)[-1].rstrip("/")) == broker


async def version(call: Call) -> Response:
    return Response.text(__version__)


async def dynamic_configuration_names(call: Call) -> Response:
    return Response.json([])


async def dynamic_configuration_values(call: Call) -> Response:
    return Response.json({})


async def namespace_bundles(call: Call) -> Response:
    return Response.json((await bundles_of(call, namespace_of(call))).to_policy())


async def topic_bundle(call: Call) -> Response:
    topic = topic_of(call)
    return Response.text((await bundles_of(call, topic.namespace)).bundle_of(str(topic)).name)


async def unload_bundle(call: Call) -> Response:
    namespace = namespace_of(call)
    bundles = await bundles_of(call, namespace)
    try:
        bundle = parse_bundle(call.params["bundle"])
        bundles.index_of_range(bundle)
    except BundleError as exc:
        raise HttpError(412, str(exc)) from None
    destination = call.request.query_param("destinationBroker") or None
    if destination is not None and destination not in await broker_ids(call):
        raise HttpError(412, f"Destination broker {destination} is not an active broker")
    if call.routing is not None:
        owner = await call.routing.bundle_owner_web_url(namespace, bundle.name, call.tls)
        if owner is not None:
            return redirect(owner, call.request)
    await call.backend.unload_bundle(namespace, bundle.name, destination)
    return Response.no_content()


def register(router: Router) -> None:
    router.add("GET", "/admin/v2/brokers/{cluster}", list_brokers)
    router.add("GET", "/admin/v2/brokers/leaderBroker", leader_broker)
    router.add("GET", "/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", owned_namespaces)
    router.add("GET", "/admin/v2/brokers/version", version)
    router.add("GET", "/admin/v2/brokers/configuration", dynamic_configuration_names)
    router.add("GET", "/admin/v2/brokers/configuration/values", dynamic_configuration_values)
    router.add("GET", "/admin/v2/namespaces/{tenant}/{namespace}/bundles", namespace_bundles)
    router.add("GET", "/admin/v2/" + DOMAIN + "/{tenant}/{namespace}/{topic}/bundle", topic_bundle)
    router.add("PUT", NAMESPACE + "/{bundle}/unload", unload_bundle)
