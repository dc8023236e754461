"""A namespace's offload policies (docs/offload.md), as Pulsar's admin API has them.

Under /admin/v2/namespaces/{tenant}/{namespace}:

    offloadThreshold           GET: bytes (-1: not set, the broker's applies); PUT (POST too) a
                               number: -1 back to the broker's, another negative value no offload
                               by size, 0 every sealed ledger; DELETE: -1
    offloadThresholdInSeconds  the same in seconds since a ledger was sealed
    offloadDeletionLagMs       GET: ms, or 204 when not set; PUT (POST) a number (negative: local
                               copies are kept); DELETE: not set (Pulsar's clear-offload-deletion-lag)
    offloadPolicies            GET: Pulsar's OffloadPoliciesImpl, or 204; POST (PUT) one; DELETE
                               (and DELETE .../removeOffloadPolicies, the path pulsar-admin uses)

Under /admin/v2/persistent/{tenant}/{namespace}/{topic}: offloadPolicies (GET / POST / DELETE),
the topic's own, over its namespace's field by field (on a partition: its partitioned topic's).

As in Pulsar, a threshold or lag set alone and the same field of offloadPolicies are one setting:
each write keeps the two in step, and offloadPolicies given without a field takes the one set
alone. offloadPolicies must name a supported driver and, for S3, a bucket (412 otherwise, with
Pulsar's reasons); velamq offloads all ledgers of a broker to the one store its configuration names,
so its driver, bucket, endpoint, region or fileSystemURI must be that store's (412 says which is
not). Storage's offload check reads the policies at every check: a change applies at the next one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from velamq.admin._http import HttpError, Response
from velamq.admin._params import json_body, namespace_of, notify_policies_changed, require_topic, topic_of
from velamq.admin._policy_specs import as_int, as_object
from velamq.admin._router import Call, Router
from velamq.metadata import _offload_policies as O

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"
PULSAR_DRIVERS = ("S3", "aws-s3", "google-cloud-storage", "filesystem", "azureblob", "aliyun-oss")

Handler = Callable[[Call], Awaitable[Response]]


def _impl(policies: dict[str, Any]) -> dict[str, Any] | None:
    impl = policies.get(O.NS_OFFLOAD_POLICIES)
    return dict(impl) if isinstance(impl, dict) else None


async def _set(call: Call, ns: str, field: str, key: str, value: int | None) -> None:
    """Set one of the three settings: the namespace's own field and, if offloadPolicies is set,
    its field (removed there when the value means "not set")."""
    policies = await call.backend.metadata.get_policies(ns)  # 404 for an unknown namespace
    await call.backend.metadata.set_policy(ns, key, value)
    impl = _impl(policies)
    if impl is not None:
        unset = value is None or (value == O.NOT_SET and key != O.NS_OFFLOAD_DELETION_LAG)
        if unset:
            impl.pop(field, None)
        else:
            impl[field] = value
        await call.backend.metadata.set_policy(ns, O.NS_OFFLOAD_POLICIES, impl)
    await notify_policies_changed(call, ns, None)


def _setting_handlers(field: str, key: str, cleared: int | None) -> tuple[Handler, Handler, Handler]:
    """GET / PUT / DELETE of one setting; `cleared` is what GET shows when it is not set."""

    async def get(call: Call) -> Response:
        policies = await call.backend.metadata.get_policies(namespace_of(call))
        value = (_impl(policies) or {}).get(field)
        if value is None:
            value = policies.get(key, cleared)
        return Response.no_content() if value is None else Response.json(value)

    async def put(call: Call) -> Response:
        body = json_body(call)
        if body is None:
            raise HttpError(400, "Request body is required")
        await _set(call, namespace_of(call), field, key, as_int(body, key))
        return Response.no_content()

    async def delete(call: Call) -> Response:
        await _set(call, namespace_of(call), field, key, cleared)
        return Response.no_content()

    return get, put, delete


def check_offload_policies(call: Call, value: Any) -> dict[str, Any]:
    """An OffloadPoliciesImpl body, checked as Pulsar's validateOffloadPolicies does, then against
    this broker's store."""
    if value is None:
        raise HttpError(412, "The offloadPolicies must be specified for namespace offload.")
    impl = dict(as_object(value, "OffloadPolicies"))
    driver = impl.get(O.DRIVER)
    if not isinstance(driver, str) or driver.lower() not in (d.lower() for d in PULSAR_DRIVERS):
        raise HttpError(412, f"The driver is not supported, support value: {','.join(PULSAR_DRIVERS)}")
    s3 = driver.lower() in ("s3", "aws-s3")
    if driver.lower() not in ("s3", "aws-s3", "filesystem"):
        raise HttpError(412, f"velamq offloads with the filesystem and aws-s3 drivers only, not {driver}")
    bucket = O.first_of(impl, O.BUCKET)
    if s3 and not bucket:
        raise HttpError(412, "The bucket must be specified for namespace offload.")
    for field, _ in O.MIRRORED:
        if impl.get(field) is not None:
            impl[field] = as_int(impl[field], field)
    uri = impl.get(O.FILESYSTEM_URI)
    reason = call.backend.offload_store_differs(
        driver, bucket, O.first_of(impl, O.ENDPOINT), O.first_of(impl, O.REGION), uri if isinstance(uri, str) else ""
    )
    if reason is not None:
        raise HttpError(412, reason)
    return impl


async def get_offload_policies(call: Call) -> Response:
    impl = _impl(await call.backend.metadata.get_policies(namespace_of(call)))
    return Response.no_content() if impl is None else Response.json(impl)


async def set_offload_policies(call: Call) -> Response:
    ns = namespace_of(call)
    policies = await call.backend.metadata.get_policies(ns)
    impl = check_offload_policies(call, json_body(call))
    for field, key in O.MIRRORED:  # one setting each: a field not given takes the one set alone
        if impl.get(field) is None:
            alone = policies.get(key)
            if alone is not None and (alone != O.NOT_SET or key == O.NS_OFFLOAD_DELETION_LAG):
                impl[field] = alone
        else:
            await call.backend.metadata.set_policy(ns, key, impl[field])
    await call.backend.metadata.set_policy(ns, O.NS_OFFLOAD_POLICIES, impl)
    await notify_policies_changed(call, ns, None)
    return Response.no_content()


async def remove_offload_policies(call: Call) -> Response:
    ns = namespace_of(call)
    await call.backend.metadata.get_policies(ns)
    await call.backend.metadata.set_policy(ns, O.NS_OFFLOAD_POLICIES, None)
    await notify_policies_changed(call, ns, None)
    return Response.no_content()


async def _topic(call: Call) -> str:
    topic = topic_of(call)
    if not topic.persistent:
        raise HttpError(405, "offload policies are for persistent topics only")
    await require_topic(call, topic)
    return str(topic.partitioned_parent)


async def get_topic_offload_policies(call: Call) -> Response:
    stored = await call.backend.metadata.get_topic_policies(await _topic(call))
    impl = stored.get(O.TOPIC_OFFLOAD_POLICIES)
    return Response.json(impl) if isinstance(impl, dict) else Response.no_content()


async def set_topic_offload_policies(call: Call) -> Response:
    topic = await _topic(call)
    impl = check_offload_policies(call, json_body(call))
    await call.backend.metadata.set_topic_policy(topic, O.TOPIC_OFFLOAD_POLICIES, impl)
    await notify_policies_changed(call, topic_of(call).namespace, topic)
    return Response.no_content()


async def remove_topic_offload_policies(call: Call) -> Response:
    topic = await _topic(call)
    await call.backend.metadata.set_topic_policy(topic, O.TOPIC_OFFLOAD_POLICIES, None)
    await notify_policies_changed(call, topic_of(call).namespace, topic)
    return Response.no_content()


def register(router: Router) -> None:
    settings = (
        ("offloadThreshold", O.THRESHOLD_BYTES, O.NS_OFFLOAD_THRESHOLD, O.NOT_SET),
        ("offloadThresholdInSeconds", O.THRESHOLD_S, O.NS_OFFLOAD_THRESHOLD_S, O.NOT_SET),
        ("offloadDeletionLagMs", O.DELETION_LAG_MS, O.NS_OFFLOAD_DELETION_LAG, None),
    )
    for path, field, key, cleared in settings:
        get, put, delete = _setting_handlers(field, key, cleared)
        router.add("GET", f"{NAMESPACE}/{path}", get)
        router.add("PUT", f"{NAMESPACE}/{path}", put)
        router.add("POST", f"{NAMESPACE}/{path}", put)
        router.add("DELETE", f"{NAMESPACE}/{path}", delete)
    router.add("GET", f"{NAMESPACE}/offloadPolicies", get_offload_policies)
    router.add("POST", f"{NAMESPACE}/offloadPolicies", set_offload_policies)
    router.add("PUT", f"{NAMESPACE}/offloadPolicies", set_offload_policies)
    router.add("DELETE", f"{NAMESPACE}/offloadPolicies", remove_offload_policies)
    router.add("DELETE", f"{NAMESPACE}/removeOffloadPolicies", remove_offload_policies)
    router.add("GET", f"{TOPIC}/offloadPolicies", get_topic_offload_policies)
    router.add("POST", f"{TOPIC}/offloadPolicies", set_topic_offload_policies)
    router.add("PUT", f"{TOPIC}/offloadPolicies", set_topic_offload_policies)
    router.add("DELETE", f"{TOPIC}/offloadPolicies", remove_topic_offload_policies)
