"""Operations on a namespace's live topics, and properties of namespaces and topics (WC-4).

    PUT    /admin/v2/namespaces/{t}/{ns}/unload                   unload every loaded topic (clients
                                                                  reconnect and load it again)
    POST   /admin/v2/namespaces/{t}/{ns}/clearBacklog             skip the whole backlog of every
                                                                  subscription of every loaded topic
    POST   /admin/v2/namespaces/{t}/{ns}/clearBacklog/{sub}       the same for one subscription
    POST   /admin/v2/namespaces/{t}/{ns}/unsubscribe/{sub}        delete the subscription on every
                                                                  loaded topic that has it; 412 if one
                                                                  still has consumers

As in Pulsar, these act on the topics the broker has loaded (Pulsar: the topics of the bundles it
serves), not on every topic the metadata store knows: a topic nobody used since the broker started
is not loaded for this. With several workers, the worker that gets the request asks every other one
to do the same (`?local=true`: only its own topics). 404 for an unknown namespace.

Properties, free key/value strings kept with the namespace (its Policies' "properties") or the
topic (with its topic policies; a partition answers with its partitioned topic's):

    GET    /admin/v2/namespaces/{t}/{ns}/properties               {"k": "v", ...}
    PUT    /admin/v2/namespaces/{t}/{ns}/properties   {"k": "v"}  merged into the existing ones
    DELETE /admin/v2/namespaces/{t}/{ns}/properties               all of them
    GET    /admin/v2/namespaces/{t}/{ns}/property/{key}           "v"; 204 (null) if not set
    PUT    /admin/v2/namespaces/{t}/{ns}/property/{key}/{value}
    DELETE /admin/v2/namespaces/{t}/{ns}/property/{key}
    GET    /admin/v2/{domain}/{t}/{ns}/{topic}/properties         {"k": "v", ...}
    PUT    /admin/v2/{domain}/{t}/{ns}/{topic}/properties  {..}   merged
    DELETE /admin/v2/{domain}/{t}/{ns}/{topic}/properties?key=k   one key
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from velamq.admin._http import HttpError, Response
from velamq.admin._params import namespace_of, object_body, require_namespace, require_topic, topic_of
from velamq.admin._router import Call, Router
from velamq.admin._routing import on_every_peer

NAMESPACE: Final = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC: Final = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"
PROPERTIES: Final = "properties"  # the key in namespace Policies and in topic policies
# A property map is metadata, not a payload store: bound what one call may add.
properties_max: Final = 1_000
property_chars_max: Final = 4_096


async def _each_loaded_topic(call: Call, action: Callable[[str], Awaitable[None]]) -> None:
    """`action` on each loaded topic of the namespace here, then the same request on every other
    worker of a multi-worker broker (each acts on the topics it holds)."""
    ns = namespace_of(call)
    await require_namespace(call, ns)
    for topic in call.backend.loaded_topics(ns):
        await action(topic)
    await on_every_peer(call)


async def unload_namespace(call: Call) -> Response:
    await _each_loaded_topic(call, call.backend.unload_topic)
    return Response.no_content()


async def clear_backlog(call: Call) -> Response:
    only = call.params.get("subscription")

    async def clear(topic: str) -> None:
        for subscription in await call.backend.list_subscriptions(topic):
            if only is None or subscription == only:
                await call.backend.skip_messages(topic, subscription, None)

    await _each_loaded_topic(call, clear)
    return Response.no_content()


async def unsubscribe(call: Call) -> Response:
    subscription = call.params["subscription"]

    async def delete(topic: str) -> None:
        if subscription in await call.backend.list_subscriptions(topic):
            await call.backend.delete_subscription(topic, subscription, False)

    await _each_loaded_topic(call, delete)
    return Response.no_content()


# ---- properties ---------------------------------------------------------------------------------


def _checked(body: dict[str, Any] | None) -> dict[str, str]:
    if not body:
        raise HttpError(400, "Request body must be a JSON object of string properties")
    if len(body) > properties_max:
        raise HttpError(412, f"At most {properties_max} properties")
    for key, value in body.items():
        if not isinstance(value, str):
            raise HttpError(400, f"Property {key[:100]!r} must be a string")
        if not key or len(key) > property_chars_max or len(value) > property_chars_max:
            raise HttpError(412, f"Property keys must be 1 to {property_chars_max} characters, values at most that")
    return dict(body)


def _stored(value: Any) -> dict[str, str]:
    return dict(value) if isinstance(value, dict) else {}


def _capped(properties: dict[str, str]) -> dict[str, str] | None:
    if len(properties) > properties_max:
        raise HttpError(412, f"At most {properties_max} properties")
    return properties or None  # none left: the policy goes


def _merge(added: dict[str, str]) -> Callable[[Any], dict[str, str] | None]:
    return lambda current: _capped({**_stored(current), **added})


def _drop(key: str | None) -> Callable[[Any], dict[str, str] | None]:
    """Without `key`; without any property if `key` is None."""
    return lambda current: None if key is None else _capped({k: v for k, v in _stored(current).items() if k != key})


async def _change_namespace_properties(call: Call, change: Callable[[Any], Any]) -> Response:
    # One read-modify-write in the store: properties set at once (by any worker) are all kept.
    await call.backend.metadata.update_policy(namespace_of(call), PROPERTIES, change)
    return Response.no_content()


async def _change_topic_properties(call: Call, change: Callable[[Any], Any]) -> Response:
    """As _change_namespace_properties; the caller has checked that the topic exists."""
    await call.backend.metadata.update_topic_policy(str(topic_of(call)), PROPERTIES, change)
    return Response.no_content()


async def get_namespace_properties(call: Call) -> Response:
    return Response.json(_stored((await call.backend.metadata.get_policies(namespace_of(call))).get(PROPERTIES)))


async def put_namespace_properties(call: Call) -> Response:
    await require_namespace(call, namespace_of(call))  # 404 before the body's 400
    return await _change_namespace_properties(call, _merge(_checked(object_body(call))))


async def clear_namespace_properties(call: Call) -> Response:
    return await _change_namespace_properties(call, _drop(None))


async def get_namespace_property(call: Call) -> Response:
    stored = _stored((await call.backend.metadata.get_policies(namespace_of(call))).get(PROPERTIES))
    value = stored.get(call.params["key"])
    return Response.no_content() if value is None else Response.json(value)


async def put_namespace_property(call: Call) -> Response:
    await require_namespace(call, namespace_of(call))
    added = _checked({call.params["key"]: call.params["value"]})
    return await _change_namespace_properties(call, _merge(added))


async def remove_namespace_property(call: Call) -> Response:
    return await _change_namespace_properties(call, _drop(call.params["key"]))


async def get_topic_properties(call: Call) -> Response:
    topic = topic_of(call)
    await require_topic(call, topic)
    return Response.json(_stored((await call.backend.metadata.get_topic_policies(str(topic))).get(PROPERTIES)))


async def put_topic_properties(call: Call) -> Response:
    await require_topic(call, topic_of(call))
    return await _change_topic_properties(call, _merge(_checked(object_body(call))))


async def remove_topic_property(call: Call) -> Response:
    key = call.request.query_param("key")
    if not key:
        raise HttpError(400, "Query parameter key is required")
    await require_topic(call, topic_of(call))
    return await _change_topic_properties(call, _drop(key))


def register(router: Router) -> None:
    router.add("PUT", NAMESPACE + "/unload", unload_namespace)
    router.add("POST", NAMESPACE + "/clearBacklog", clear_backlog)
    router.add("POST", NAMESPACE + "/clearBacklog/{subscription}", clear_backlog)
    router.add("POST", NAMESPACE + "/unsubscribe/{subscription}", unsubscribe)
    router.add("GET", NAMESPACE + "/properties", get_namespace_properties)
    router.add("PUT", NAMESPACE + "/properties", put_namespace_properties)
    router.add("DELETE", NAMESPACE + "/properties", clear_namespace_properties)
    router.add("GET", NAMESPACE + "/property/{key}", get_namespace_property)
    router.add("PUT", NAMESPACE + "/property/{key}/{value}", put_namespace_property)
    router.add("DELETE", NAMESPACE + "/property/{key}", remove_namespace_property)
    router.add("GET", TOPIC + "/properties", get_topic_properties)
    router.add("PUT", TOPIC + "/properties", put_topic_properties)
    router.add("DELETE", TOPIC + "/properties", remove_topic_property)
