"""Grants: Pulsar's permission routes, and keeping the shared authorization model current (SE-3).

    GET    /admin/v2/namespaces/{t}/{ns}/permissions                        {role: [actions]}
    POST   /admin/v2/namespaces/{t}/{ns}/permissions/{role}   ["produce"]   204 (replaces the role's actions)
    DELETE /admin/v2/namespaces/{t}/{ns}/permissions/{role}                 204 (absent role: no-op)
    GET    /admin/v2/namespaces/{t}/{ns}/permissions/subscription           {subscription: [roles]}
    POST   /admin/v2/namespaces/{t}/{ns}/permissions/subscription/{sub}  ["r1"]   204
    DELETE /admin/v2/namespaces/{t}/{ns}/permissions/{sub}/{role}           204; 412 no roles set
           (pulsar-admin's path; .../permissions/subscription/{sub}/{role} is taken too)
    GET    /admin/v2/namespaces/{t}/{ns}/subscriptionAuthMode               "None" | "Prefix"
    POST   /admin/v2/namespaces/{t}/{ns}/subscriptionAuthMode   "Prefix"    204
    GET    /admin/v2/{domain}/{t}/{ns}/{topic}/permissions                  namespace's and topic's grants
    POST   /admin/v2/{domain}/{t}/{ns}/{topic}/permissions/{role} ["consume"]  204
    DELETE /admin/v2/{domain}/{t}/{ns}/{topic}/permissions/{role}           204; 412 not set on the topic

All of them need the tenant's adminRoles or a superuser (_access.py's default). Grants are stored
in the namespace's policies under "auth_policies" (Pulsar's JSON, velamq.security._auth_policies),
one read-modify-write in the metadata store (MetadataStore.update_policy); right after it the
namespace is loaded again into the AuthorizationModel the broker shares, so a live connection is
judged by the new grants at its next command. Bodies that are not lists of known actions or
roles: 400; unknown namespace: 404.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from velamq._topic_name import TopicName
from velamq.admin._access import NAMESPACE, TOPIC
from velamq.admin._http import HttpError, Response
from velamq.admin._params import namespace_of, require_namespace, topic_of
from velamq.admin._router import Call, Router
from velamq.security import _auth_policies as grants

AUTH_POLICIES: Final = "auth_policies"
SUBSCRIPTION_AUTH_MODE: Final = "subscription_auth_mode"


# ---------------------------------------------------------------------------- the shared model


def _model(call: Call) -> Any:
    """The server's authorization model, or None when authorization is off."""
    return call.security.authorization if call.security is not None else None


async def reload_namespace(call: Call, ns: str) -> None:
    """Load the namespace's stored grants into the authorization model (if the server has one)."""
    if (model := _model(call)) is not None:
        model.load_namespace(ns, await call.backend.metadata.get_policies(ns))


def forget_namespace(call: Call, ns: str) -> None:
    if (model := _model(call)) is not None:
        model.drop_namespace(ns)


async def reload_tenant(call: Call, tenant: str) -> None:
    if (model := _model(call)) is not None:
        model.load_tenant(tenant, await call.backend.metadata.get_tenant(tenant))


def forget_tenant(call: Call, tenant: str) -> None:
    if (model := _model(call)) is not None:
        model.drop_tenant(tenant)


def check_policies_body(body: dict[str, Any]) -> dict[str, Any]:
    """The security fields of a PUT namespace body, checked and normalised (400 if they do not)."""
    if body.get(AUTH_POLICIES) is not None:
        body[AUTH_POLICIES] = grants.normalize(body[AUTH_POLICIES])
    if body.get(SUBSCRIPTION_AUTH_MODE) is not None:
        body[SUBSCRIPTION_AUTH_MODE] = grants.parse_subscription_auth_mode(body[SUBSCRIPTION_AUTH_MODE])
    return body


async def _stored(call: Call, ns: str) -> Any:
    await require_namespace(call, ns)
    return (await call.backend.metadata.get_policies(ns)).get(AUTH_POLICIES)


async def _update(call: Call, ns: str, key: str, change: Callable[[Any], Any]) -> Response:
    """Store `change(current value)` under `key` in one step of the metadata store, so grants made
    at once (here or through another worker process) all apply; then reload the model, under the
    grants lock so that reloads follow the changes in order."""
    if call.security is None:
        raise RuntimeError("permission routes need the AdminServer's security context")
    async with call.security.grants_lock:
        await require_namespace(call, ns)
        await call.backend.metadata.update_policy(ns, key, change)
        await reload_namespace(call, ns)
    return Response.no_content()


async def _update_grants(call: Call, ns: str, change: Callable[[Any], dict[str, Any]]) -> Response:
    return await _update(call, ns, AUTH_POLICIES, change)


async def drop_topic_grants(call: Call, topic: str) -> None:
    """A deleted topic's own grants go with it, as Pulsar revokes them on delete (so a topic made
    again later under that name starts without them). No write when it had none."""
    ns = TopicName.parse(topic).namespace
    stored = (await call.backend.metadata.get_policies(ns)).get(AUTH_POLICIES)
    if isinstance(stored, dict) and topic in (stored.get("destination_auth") or {}):
        await _update_grants(call, ns, lambda now: grants.drop_topic(now, topic))


def _body(call: Call) -> Any:
    if not call.request.body.strip():
        raise HttpError(400, "Request body is missing (a JSON list is expected)")
    return call.request.json()


# ---------------------------------------------------------------------------- namespace grants


async def get_namespace_permissions(call: Call) -> Response:
    return Response.json(grants.namespace_permissions(await _stored(call, namespace_of(call))))


async def grant_namespace(call: Call) -> Response:
    role, actions = call.params["role"], _body(call)
    return await _update_grants(call, namespace_of(call), lambda now: grants.grant_namespace(now, role, actions))


async def revoke_namespace(call: Call) -> Response:
    role = call.params["role"]
    return await _update_grants(call, namespace_of(call), lambda current: grants.revoke_namespace(current, role))


async def get_subscription_permissions(call: Call) -> Response:
    return Response.json(grants.subscription_permissions(await _stored(call, namespace_of(call))))


async def grant_subscription(call: Call) -> Response:
    sub, roles = call.params["subscription"], _body(call)
    return await _update_grants(call, namespace_of(call), lambda now: grants.grant_subscription(now, sub, roles))


async def revoke_subscription(call: Call) -> Response:
    sub, role = call.params["subscription"], call.params["role"]
    return await _update_grants(call, namespace_of(call), lambda now: grants.revoke_subscription(now, sub, role))


async def get_subscription_auth_mode(call: Call) -> Response:
    ns = namespace_of(call)
    await require_namespace(call, ns)
    return Response.json((await call.backend.metadata.get_policies(ns)).get(SUBSCRIPTION_AUTH_MODE, "None"))


async def set_subscription_auth_mode(call: Call) -> Response:
    mode = grants.parse_subscription_auth_mode(_body(call))
    return await _update(call, namespace_of(call), SUBSCRIPTION_AUTH_MODE, lambda _: mode)


# ---------------------------------------------------------------------------- topic grants


async def get_topic_permissions(call: Call) -> Response:
    topic = topic_of(call)
    return Response.json(grants.topic_permissions(await _stored(call, topic.namespace), str(topic)))


async def grant_topic(call: Call) -> Response:
    topic, role, actions = topic_of(call), call.params["role"], _body(call)
    return await _update_grants(
        call, topic.namespace, lambda current: grants.grant_topic(current, str(topic), role, actions)
    )


async def revoke_topic(call: Call) -> Response:
    topic, role = topic_of(call), call.params["role"]
    return await _update_grants(call, topic.namespace, lambda current: grants.revoke_topic(current, str(topic), role))


def register(router: Router) -> None:
    permissions = NAMESPACE + "/permissions"
    router.add("GET", permissions, get_namespace_permissions)
    router.add("POST", permissions + "/{role}", grant_namespace)
    router.add("DELETE", permissions + "/{role}", revoke_namespace)
    router.add("GET", permissions + "/subscription", get_subscription_permissions)
    router.add("POST", permissions + "/subscription/{subscription}", grant_subscription)
    router.add("DELETE", permissions + "/{subscription}/{role}", revoke_subscription)
    router.add("DELETE", permissions + "/subscription/{subscription}/{role}", revoke_subscription)
    router.add("GET", NAMESPACE + "/subscriptionAuthMode", get_subscription_auth_mode)
    router.add("POST", NAMESPACE + "/subscriptionAuthMode", set_subscription_auth_mode)
    router.add("GET", TOPIC + "/permissions", get_topic_permissions)
    router.add("POST", TOPIC + "/permissions/{role}", grant_topic)
    router.add("DELETE", TOPIC + "/permissions/{role}", revoke_topic)
