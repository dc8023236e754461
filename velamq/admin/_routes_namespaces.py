"""Namespaces and their policies: /admin/v2/namespaces/... (WC-4).

    GET    /admin/v2/namespaces/{tenant}                           ["tenant/ns", ...]; 404
    PUT    /admin/v2/namespaces/{tenant}/{ns}   [body Policies]    204; 404 tenant; 409 exists;
                                                                   400/412 a policy that does not check
    GET    /admin/v2/namespaces/{tenant}/{ns}                      Policies (Pulsar's shape); 404
    DELETE /admin/v2/namespaces/{tenant}/{ns}[?force=true]         204; 404; 409 while it has topics;
                                                                   force: its topics too (in batches),
                                                                   405 unless forceDeleteNamespaceAllowed
    GET|POST|DELETE .../{ns}/<policy>                              see _routes_policies.py
    GET    .../{ns}/schemaCompatibilityStrategy                    "FORWARD" (or "UNDEFINED")
    PUT    .../{ns}/schemaCompatibilityStrategy  body "FORWARD"    204; 400 unknown strategy
    GET    .../{ns}/topics?mode=PERSISTENT|NON_PERSISTENT|ALL      full names, partitions included
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Collection
from typing import Any, Final

from velamq._errors import PreconditionFailedError
from velamq.admin._http import HttpError, Response
from velamq.admin._params import bool_param, namespace_of, object_body, require_namespace, string_body
from velamq.admin._policy_specs import check_namespace_body
from velamq.admin._router import Call, Router
from velamq.admin._routes_permissions import check_policies_body, forget_namespace, reload_namespace
from velamq.metadata import DEFAULT_CLUSTER, MetadataStore

SCHEMA_COMPATIBILITY: Final = "schema_compatibility_strategy"

SCHEMA_COMPATIBILITY_STRATEGIES: Final = frozenset({
    "UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
    "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE",
})

# What Pulsar's GET namespace shows for a namespace created with no policies (standalone defaults);
# the policies stored for the namespace are laid over it.
POLICY_DEFAULTS: Final[dict[str, Any]] = {
    "auth_policies": {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}},
    "replication_clusters": [DEFAULT_CLUSTER],
    "bundles": {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4,
    },
    "backlog_quota_map": {},
    "clusterDispatchRate": {},
    "topicDispatchRate": {},
    "subscriptionDispatchRate": {},
    "replicatorDispatchRate": {},
    "clusterSubscribeRate": {},
    "publishMaxMessageRate": {},
    "latency_stats_sample_rate": {},
    "deleted": False,
    "encryption_required": False,
    "subscription_auth_mode": "None",
    "offload_threshold": -1,
    "offload_threshold_in_seconds": -1,
    "schema_auto_update_compatibility_strategy": "Full",
    "schema_compatibility_strategy": "UNDEFINED",
    "is_allow_auto_update_schema": True,
    "schema_validation_enforced": False,
    "subscription_types_enabled": [],
    "properties": {},
}

TOPIC_MODES: Final = {
    "PERSISTENT": ("persistent",),
    "NON_PERSISTENT": ("non-persistent",),
    "ALL": ("persistent", "non-persistent"),
}


# A listing longer than this is encoded to JSON in a thread (a million names take a second).
_encode_in_thread_names = 10_000


async def namespace_topics(metadata: MetadataStore, ns: str, domains: Collection[str]) -> Response:
    """Topics of a namespace as Pulsar lists them: non-partitioned topics and every partition of each
    partitioned topic (Pulsar creates partitions eagerly, velamq lazily: list them all the same).
    Read a page at a time; a long list is encoded off the loop."""
    names = await metadata.namespace_topic_names(ns, domains)
    if len(names) <= _encode_in_thread_names:
        return Response.json(names)
    body = await asyncio.to_thread(lambda: json.dumps(names, separators=(",", ":")).encode())
    return Response(200, body, "application/json")


async def list_namespaces(call: Call) -> Response:
    return Response.json(await call.backend.metadata.list_namespaces(call.params["tenant"]))


async def create_namespace(call: Call) -> Response:
    body = object_body(call)
    policies = None if body is None else check_policies_body(check_namespace_body(body))
    ns = namespace_of(call)
    await call.backend.metadata.create_namespace(ns, policies)
    await reload_namespace(call, ns)  # a body with auth_policies grants at once (the suite's CI set-up)
    return Response.no_content()


async def get_namespace(call: Call) -> Response:
    stored = await call.backend.metadata.get_policies(namespace_of(call))
    local = {"replication_clusters": [call.backend.cluster_name]}
    return Response.json({**copy.deepcopy(POLICY_DEFAULTS), **local, **stored})


async def delete_namespace(call: Call) -> Response:
    ns = namespace_of(call)
    if bool_param(call, "force"):
        if not call.backend.force_delete_namespace_allowed:
            # Pulsar's default (forceDeleteNamespaceAllowed=false).
            raise HttpError(405, "Broker doesn't allow forced deletion of namespaces")
        await require_namespace(call, ns)
        await call.backend.delete_namespace_topics(ns)
    try:
        await call.backend.metadata.delete_namespace(ns)
    except PreconditionFailedError as exc:
        raise HttpError(409, str(exc)) from None  # Pulsar answers Conflict here, not 412
    forget_namespace(call, ns)
    return Response.no_content()


async def get_schema_compatibility(call: Call) -> Response:
    policies = await call.backend.metadata.get_policies(namespace_of(call))
    return Response.json(policies.get(SCHEMA_COMPATIBILITY, "UNDEFINED"))


async def set_schema_compatibility(call: Call) -> Response:
    strategy = string_body(call).strip()
    if strategy not in SCHEMA_COMPATIBILITY_STRATEGIES:
        raise HttpError(400, f"Unknown schema compatibility strategy {strategy[:100]!r}")
    await call.backend.metadata.set_policy(namespace_of(call), SCHEMA_COMPATIBILITY, strategy)
    return Response.no_content()


async def list_namespace_topics(call: Call) -> Response:
    mode = (call.request.query_param("mode") or "PERSISTENT").upper()
    domains = TOPIC_MODES.get(mode)
    if domains is None:
        raise HttpError(400, f"mode must be one of {', '.join(TOPIC_MODES)}")
    ns = namespace_of(call)
    await require_namespace(call, ns)
    return await namespace_topics(call.backend.metadata, ns, domains)


def register(router: Router) -> None:
    base = "/admin/v2/namespaces/{tenant}/{namespace}"
    router.add("GET", "/admin/v2/namespaces/{tenant}", list_namespaces)
    router.add("PUT", base, create_namespace)
    router.add("GET", base, get_namespace)
    router.add("DELETE", base, delete_namespace)
    router.add("GET", base + "/schemaCompatibilityStrategy", get_schema_compatibility)
    router.add("PUT", base + "/schemaCompatibilityStrategy", set_schema_compatibility)
    router.add("GET", base + "/topics", list_namespace_topics)
