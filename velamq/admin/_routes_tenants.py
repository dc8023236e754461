"""Clusters and tenants: /admin/v2/clusters[...] and /admin/v2/tenants[...] (WC-4).

    GET    /admin/v2/clusters                 ["standalone", ...]
    GET    /admin/v2/clusters/{cluster}       ClusterData {serviceUrl, brokerServiceUrl, ...}
    PUT    /admin/v2/clusters/{cluster}       204, 409 if it exists (POST and DELETE: _routes_replication.py)
    GET    /admin/v2/tenants                  ["public", ...]
    GET    /admin/v2/tenants/{tenant}         TenantInfo {adminRoles, allowedClusters}; 404
    PUT    /admin/v2/tenants/{tenant}         204; 409 exists; 412 unknown cluster
    POST   /admin/v2/tenants/{tenant}         204 (update); 404
    DELETE /admin/v2/tenants/{tenant}         204; 404; 409 while it has namespaces
"""

from __future__ import annotations

from typing import Any

from velamq._errors import PreconditionFailedError
from velamq.admin._http import HttpError, Response
from velamq.admin._params import bool_param, object_body
from velamq.admin._router import Call, Router
from velamq.admin._routes_permissions import forget_tenant, reload_tenant


def _cluster_data(call: Call, stored: dict[str, Any]) -> dict[str, Any]:
    backend = call.backend
    data: dict[str, Any] = {
        "serviceUrl": call.web_service_url,
        "serviceUrlTls": call.web_service_url_tls or "",
        "brokerServiceUrl": backend.service_url,
        "brokerServiceUrlTls": backend.service_url_tls or "",
        "brokerClientTlsEnabled": False,
        "tlsAllowInsecureConnection": False,
    }
    if call.params["cluster"] != backend.cluster_name:
        data = {key: "" if isinstance(value, str) else value for key, value in data.items()}
    data.update(stored)
    return data


async def list_clusters(call: Call) -> Response:
    return Response.json(await call.backend.metadata.list_clusters())


async def get_cluster(call: Call) -> Response:
    stored = await call.backend.metadata.get_cluster(call.params["cluster"])
    return Response.json(_cluster_data(call, stored))


async def create_cluster(call: Call) -> Response:
    await call.backend.metadata.create_cluster(call.params["cluster"], object_body(call) or {})
    if call.replication is not None:  # replication lists may name it already
        await call.replication.clusters_changed(call.params["cluster"])
    return Response.no_content()


async def _tenant_info(call: Call) -> dict[str, Any]:
    body = object_body(call) or {}
    for key in ("adminRoles", "allowedClusters"):
        value = body.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise HttpError(400, f"{key} must be a list of strings")
    if not body.get("allowedClusters"):
        # pulsar-admin fills in every cluster when none is given; do the same for bare REST calls.
        body = {**body, "allowedClusters": await call.backend.metadata.list_clusters()}
    return body


async def list_tenants(call: Call) -> Response:
    return Response.json(await call.backend.metadata.list_tenants())


async def get_tenant(call: Call) -> Response:
    return Response.json(await call.backend.metadata.get_tenant(call.params["tenant"]))


async def create_tenant(call: Call) -> Response:
    await call.backend.metadata.create_tenant(call.params["tenant"], await _tenant_info(call))
    await reload_tenant(call, call.params["tenant"])
    return Response.no_content()


async def update_tenant(call: Call) -> Response:
    await call.backend.metadata.update_tenant(call.params["tenant"], await _tenant_info(call))
    await reload_tenant(call, call.params["tenant"])  # adminRoles take effect at once
    return Response.no_content()


async def delete_tenant(call: Call) -> Response:
    if bool_param(call, "force"):
        # Pulsar's default (forceDeleteTenantAllowed=false); recursive deletion is not offered.
        raise HttpError(405, "Broker doesn't allow forced deletion of tenants")
    try:
        await call.backend.metadata.delete_tenant(call.params["tenant"])
    except PreconditionFailedError as exc:
        raise HttpError(409, str(exc)) from None  # Pulsar answers Conflict here, not 412
    forget_tenant(call, call.params["tenant"])
    return Response.no_content()


def register(router: Router) -> None:
    router.add("GET", "/admin/v2/clusters", list_clusters)
    router.add("GET", "/admin/v2/clusters/{cluster}", get_cluster)
    router.add("PUT", "/admin/v2/clusters/{cluster}", create_cluster)
    router.add("GET", "/admin/v2/tenants", list_tenants)
    router.add("GET", "/admin/v2/tenants/{tenant}", get_tenant)
    router.add("PUT", "/admin/v2/tenants/{tenant}", create_tenant)
    router.add("POST", "/admin/v2/tenants/{tenant}", update_tenant)
    router.add("DELETE", "/admin/v2/tenants/{tenant}", delete_tenant)
