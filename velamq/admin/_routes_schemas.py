"""Topic schemas and the schema settings of namespaces and topics, as Pulsar's admin API has them.

Under /admin/v2/schemas/{tenant}/{namespace}/{topic} (a partition's name means its partitioned
topic's schemas; the two domains share them):

    GET    /schema                  GetSchemaResponse of the latest version; 404 if there is none
    GET    /schema/{version}        one version; 404 if it is not a live version
    GET    /schemas                 {"getSchemaResponses": [...]}, every live version, oldest first
    POST   /schema                  PostSchemaPayload {type, schema, properties}: register it (or find
                                    it) under the topic's strategy -> {"version": {"version": N}};
                                    409 incompatible, 422 invalid
    DELETE /schema[?force=true]     {"version": N}: a deletion version (the schema is gone, the next
                                    one starts a new history); force removes every version. -1 if
                                    there was nothing to delete.
    POST   /compatibility           {"compatibility": true, "schemaCompatibilityStrategy": "FULL"}
                                    (202) if the strategy would accept it, else 409 with the reason
    POST   /version                 {"version": N} of the equal live version, -1 if none (202)

Settings (GET answers 204 when unset, like the other policies; ?applied=true the value in force):

    namespaces/{t}/{ns}/isAllowAutoUpdateSchema                  GET, POST true|false
    namespaces/{t}/{ns}/schemaValidationEnforced                 GET, POST true|false
    namespaces/{t}/{ns}/schemaAutoUpdateCompatibilityStrategy    GET, PUT "Full" (Pulsar's older field)
    {domain}/{t}/{ns}/{topic}/schemaCompatibilityStrategy        GET, PUT "FORWARD", DELETE
    {domain}/{t}/{ns}/{topic}/schemaValidationEnforced           GET, POST true|false, DELETE

(namespaces/{t}/{ns}/schemaCompatibilityStrategy is in _routes_namespaces.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from velamq._topic_name import TopicName
from velamq.admin._http import HttpError, Response
from velamq.admin._params import (
    bool_body,
    bool_param,
    namespace_of,
    notify_policies_changed,
    object_body,
    require_namespace,
    require_topic,
    string_body,
    topic_of,
)
from velamq.admin._router import Call, Handler, Router
from velamq.metadata import (
    InvalidSchemaDataError,
    SchemaCompatibilityError,
    SchemaData,
    Strategy,
    allow_auto_update,
    effective_strategy,
    get_schema_response,
    schema_from_payload,
    validation_enforced,
)
from velamq.metadata import _schema_info as S

SCHEMAS: Final = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
NAMESPACE: Final = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC: Final = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"

_AUTO_UPDATE_NAMES: Final = frozenset(
    {"AutoUpdateDisabled", "Backward", "Forward", "Full", "AlwaysCompatible", "BackwardTransitive",
     "ForwardTransitive", "FullTransitive"}
)


async def _schema_topic(call: Call) -> str:
    """The topic named by a /schemas path (Pulsar reads it as persistent); 404 without namespace."""
    topic = TopicName.parse(f"persistent://{namespace_of(call)}/{call.params['topic']}")
    await require_namespace(call, topic.namespace)
    return str(topic)


async def _strategy(call: Call, topic: str) -> Strategy:
    """The topic's strategy as the broker resolves it: topic policy, namespace, broker default."""
    metadata = call.backend.metadata
    name = TopicName.parse(topic)
    return effective_strategy(await metadata.get_policies(name.namespace), await metadata.get_topic_policies(topic))


def _payload(call: Call) -> SchemaData:
    try:
        return schema_from_payload(object_body(call))
    except InvalidSchemaDataError as exc:
        raise HttpError(422, str(exc)) from None


def _refused(exc: SchemaCompatibilityError | InvalidSchemaDataError) -> HttpError:
    return HttpError(409 if isinstance(exc, SchemaCompatibilityError) else 422, str(exc))


# ---------------------------------------------------------------------------- the schemas


async def get_latest(call: Call) -> Response:
    topic = await _schema_topic(call)
    stored = await call.backend.metadata.schemas.get(topic)
    if stored is None:
        raise HttpError(404, "Schema not found")
    return Response.json(get_schema_response(stored))


async def get_version(call: Call) -> Response:
    topic = await _schema_topic(call)
    text = call.params["version"]
    if not text.lstrip("-").isdigit() or len(text) > 19:
        raise HttpError(400, f"Schema version must be a number, not {text[:40]!r}")
    stored = await call.backend.metadata.schemas.get(topic, int(text))
    if stored is None:
        raise HttpError(404, "Schema not found")
    return Response.json(get_schema_response(stored))


async def get_all(call: Call) -> Response:
    topic = await _schema_topic(call)
    versions = await call.backend.metadata.schemas.versions(topic)
    return Response.json({"getSchemaResponses": [get_schema_response(v) for v in versions]})


async def post_schema(call: Call) -> Response:
    topic = await _schema_topic(call)
    schema = _payload(call)
    try:
        # The admin may always add a version: isAllowAutoUpdateSchema limits producers only.
        version, _ = await call.backend.metadata.schemas.register(topic, schema, await _strategy(call, topic))
    except (SchemaCompatibilityError, InvalidSchemaDataError) as exc:
        raise _refused(exc) from None
    return Response.json({"version": {"version": version}})


async def delete_schema(call: Call) -> Response:
    topic = await _schema_topic(call)
    schemas = call.backend.metadata.schemas
    if bool_param(call, "force"):
        history = await schemas.history(topic)
        await schemas.delete_all(topic)
        version = history[-1].version if history else None
    else:
        version = await schemas.delete(topic)
    return Response.json({"version": -1 if version is None else version})


async def check_compatibility(call: Call) -> Response:
    topic = await _schema_topic(call)
    schema = _payload(call)
    strategy = await _strategy(call, topic)
    try:
        await call.backend.metadata.schemas.check_compatible(topic, schema, strategy)
    except (SchemaCompatibilityError, InvalidSchemaDataError) as exc:
        raise _refused(exc) from None
    return Response.json({"compatibility": True, "schemaCompatibilityStrategy": strategy.value}, status=202)


async def version_of(call: Call) -> Response:
    topic = await _schema_topic(call)
    schema = _payload(call)
    try:
        version = await call.backend.metadata.schemas.find(topic, schema)
    except InvalidSchemaDataError as exc:
        raise _refused(exc) from None
    return Response.json({"version": -1 if version is None else version}, status=202)


# ---------------------------------------------------------------------------- settings


def _namespace_setting(key: str, parse: Callable[[Call], Any], applied: Callable[[dict[str, Any]], Any]
                       ) -> tuple[Handler, Handler]:
    async def get(call: Call) -> Response:
        policies = await call.backend.metadata.get_policies(namespace_of(call))
        value = policies.get(key)
        if value is None and bool_param(call, "applied"):
            value = applied(policies)
        return Response.no_content() if value is None else Response.json(value)

    async def set_(call: Call) -> Response:
        ns = namespace_of(call)
        value = parse(call)
        await call.backend.metadata.set_policy(ns, key, value)
        await notify_policies_changed(call, ns, None)
        return Response.no_content()

    return get, set_


def _auto_update_strategy(call: Call) -> str:
    value = string_body(call).strip()
    if value not in _AUTO_UPDATE_NAMES:
        raise HttpError(400, f"Unknown schema auto update compatibility strategy {value[:100]!r}")
    return value


def _compatibility_strategy(call: Call) -> str:
    value = string_body(call).strip()
    if value not in Strategy.__members__:
        raise HttpError(400, f"Unknown schema compatibility strategy {value[:100]!r}")
    return value


def _topic_setting(key: str, parse: Callable[[Call], Any],
                   applied: Callable[[dict[str, Any], dict[str, Any]], Any]) -> tuple[Handler, Handler, Handler]:
    async def get(call: Call) -> Response:
        topic = topic_of(call)
        await require_topic(call, topic)
        stored = await call.backend.metadata.get_topic_policies(str(topic))
        value = stored.get(key)
        if value is None and bool_param(call, "applied"):
            value = applied(await call.backend.metadata.get_policies(topic.namespace), stored)
        return Response.no_content() if value is None else Response.json(value)

    async def write(call: Call, value: Any) -> Response:
        topic = topic_of(call)
        await require_topic(call, topic)
        await call.backend.metadata.set_topic_policy(str(topic), key, value)
        await notify_policies_changed(call, topic.namespace, str(topic.partitioned_parent))
        return Response.no_content()

    async def set_(call: Call) -> Response:
        return await write(call, parse(call))

    async def remove(call: Call) -> Response:
        return await write(call, None)

    return get, set_, remove


def register(router: Router) -> None:
    router.add("GET", SCHEMAS + "/schema", get_latest)
    router.add("GET", SCHEMAS + "/schema/{version}", get_version)
    router.add("GET", SCHEMAS + "/schemas", get_all)
    router.add("POST", SCHEMAS + "/schema", post_schema)
    router.add("DELETE", SCHEMAS + "/schema", delete_schema)
    router.add("POST", SCHEMAS + "/compatibility", check_compatibility)
    router.add("POST", SCHEMAS + "/version", version_of)

    for path, key, parse, applied, method in (
        ("isAllowAutoUpdateSchema", S.NS_ALLOW_AUTO_UPDATE_SCHEMA, bool_body, allow_auto_update, "POST"),
        ("schemaValidationEnforced", S.NS_SCHEMA_VALIDATION_ENFORCED, bool_body, validation_enforced, "POST"),
        ("schemaAutoUpdateCompatibilityStrategy", S.NS_SCHEMA_AUTO_UPDATE_STRATEGY, _auto_update_strategy,
         lambda p: "Full", "PUT"),
    ):
        get, set_ = _namespace_setting(key, parse, applied)
        router.add("GET", f"{NAMESPACE}/{path}", get)
        router.add(method, f"{NAMESPACE}/{path}", set_)

    for path, key, parse, topic_applied, method in (
        ("schemaCompatibilityStrategy", S.TOPIC_SCHEMA_COMPATIBILITY_STRATEGY, _compatibility_strategy,
         lambda ns, t: effective_strategy(ns, t).value, "PUT"),
        ("schemaValidationEnforced", S.TOPIC_SCHEMA_VALIDATION_ENFORCED, bool_body, validation_enforced, "POST"),
    ):
        get, set_, remove = _topic_setting(key, parse, topic_applied)
        router.add("GET", f"{TOPIC}/{path}", get)
        router.add(method, f"{TOPIC}/{path}", set_)
        router.add("DELETE", f"{TOPIC}/{path}", remove)
