"""Topics, partitioned topics and HTTP lookup (WC-4; the lookup is what HTTPLookupService.cc calls).

{domain} is persistent or non-persistent; names that do not parse get 412, an unknown namespace 404.

    PUT    /admin/v2/{domain}/{t}/{ns}/{topic}/partitions   body N or "N"  204; 409 exists; 406 N<=0
    GET    /admin/v2/{domain}/{t}/{ns}/{topic}/partitions   {"partitions": N}, 0 if not partitioned
    POST   /admin/v2/{domain}/{t}/{ns}/{topic}/partitions   body N         204; 409 not partitioned;
                                                                           422 fewer than now
    DELETE /admin/v2/{domain}/{t}/{ns}/{topic}/partitions?force=           204; 404; 412 in use
    POST   /admin/v2/{domain}/{t}/{ns}/{topic}/createMissedPartitions      204; creates the rows of
                                                                           partitions never used; 404
                                                                           if not partitioned
    PUT    /admin/v2/{domain}/{t}/{ns}/{topic}              non-partitioned  204; 409 exists
    DELETE /admin/v2/{domain}/{t}/{ns}/{topic}?force=                      204; 404; 409 partitioned;
                                                                           412 in use
    GET    /admin/v2/{domain}/{t}/{ns}                      topics of that domain, partitions included
    GET    /admin/v2/{domain}/{t}/{ns}/partitioned          partitioned topics of that domain
    GET    /lookup/v2/topic/{domain}/{t}/{ns}/{topic}       {brokerUrl, brokerUrlTls, httpUrl, ...}
                                                            of the broker (the worker) that owns it
"""

from __future__ import annotations

from velamq._errors import PreconditionFailedError
from velamq._topic_name import TopicName
from velamq.admin._http import HttpError, Response
from velamq.admin._params import bool_param, int_body, namespace_of, require_namespace, topic_of
from velamq.admin._router import Call, Router
from velamq.admin._routes_namespaces import namespace_topics
from velamq.admin._routes_permissions import drop_topic_grants
from velamq.admin._routing import by_owner
from velamq.metadata import partitions_max

DOMAIN = "{domain:persistent|non-persistent}"
TOPIC = "/admin/v2/" + DOMAIN + "/{tenant}/{namespace}/{topic}"


def _partitions_body(call: Call) -> int:
    partitions = int_body(call)
    if partitions <= 0:
        raise HttpError(406, "Number of partitions should be more than 0")
    if partitions > partitions_max:
        raise HttpError(406, f"Number of partitions should be less than or equal to {partitions_max}")
    return partitions


def _not_a_partition(topic: TopicName) -> None:
    if topic.partition_index >= 0:
        raise HttpError(412, f"Partitioned topic name must not contain '-partition-': {topic}")


async def create_partitioned_topic(call: Call) -> Response:
    topic = topic_of(call)
    _not_a_partition(topic)
    partitions = _partitions_body(call)
    await require_namespace(call, topic.namespace)
    await call.backend.create_partitioned_topic(str(topic), partitions)
    return Response.no_content()


async def get_partitioned_metadata(call: Call) -> Response:
    # checkAllowAutoCreation=true asks whether a missing topic *could* be auto-created; velamq
    # auto-creates non-partitioned topics (Pulsar's allowAutoTopicCreationType=non-partitioned), so
    # the answer is 0 partitions either way, and 404 only when the namespace itself is missing.
    bool_param(call, "checkAllowAutoCreation")
    topic = topic_of(call)
    await require_namespace(call, topic.namespace)
    return Response.json({"partitions": await call.backend.metadata.get_partitions(str(topic))})


async def update_partitioned_topic(call: Call) -> Response:
    topic = topic_of(call)
    partitions = _partitions_body(call)
    await require_namespace(call, topic.namespace)
    metadata = call.backend.metadata
    if await metadata.get_partitions(str(topic)) <= 0:
        raise HttpError(409, f"Topic {topic} is not the partitioned topic.")
    try:
        await metadata.update_partitions(str(topic), partitions)
    except PreconditionFailedError as exc:
        raise HttpError(422, str(exc)) from None  # Pulsar: Unprocessable Entity
    return Response.no_content()


async def create_missed_partitions(call: Call) -> Response:
    topic = topic_of(call)
    _not_a_partition(topic)
    await require_namespace(call, topic.namespace)
    metadata = call.backend.metadata
    partitions = await metadata.get_partitions(str(topic))
    if partitions <= 0:
        raise HttpError(404, f"Partitioned topic {topic} not found")
    for index in range(partitions):  # velamq creates partitions when first used; these are not yet
        await metadata.create_topic(str(topic.partition(index)), exist_ok=True)
    return Response.no_content()


async def delete_partitioned_topic(call: Call) -> Response:
    topic = topic_of(call)
    force = bool_param(call, "force")
    await require_namespace(call, topic.namespace)
    await call.backend.delete_partitioned_topic(str(topic), force)
    await drop_topic_grants(call, str(topic))
    return Response.no_content()


async def create_topic(call: Call) -> Response:
    topic = topic_of(call)
    await require_namespace(call, topic.namespace)
    metadata = call.backend.metadata
    if topic.partition_index >= 0:
        parent_partitions = await metadata.get_partitions(str(topic.partitioned_parent))
        if 0 < parent_partitions <= topic.partition_index:
            raise HttpError(
                412, f"{topic} is beyond the {parent_partitions} partitions of {topic.partitioned_parent}"
            )
    await call.backend.create_topic(str(topic))
    return Response.no_content()


async def delete_topic(call: Call) -> Response:
    topic = topic_of(call)
    force = bool_param(call, "force")
    await require_namespace(call, topic.namespace)
    if await call.backend.metadata.get_partitions(str(topic)) > 0:
        raise HttpError(
            409,
            f"{topic} is a partitioned topic, instead of calling delete topic, please call "
            "delete-partitioned-topic.",
        )
    await call.backend.delete_topic(str(topic), force)
    await drop_topic_grants(call, str(topic))
    return Response.no_content()


async def list_topics(call: Call) -> Response:
    ns = namespace_of(call)
    await require_namespace(call, ns)
    return await namespace_topics(call.backend.metadata, ns, (call.params["domain"],))


async def list_partitioned_topics(call: Call) -> Response:
    ns = namespace_of(call)
    await require_namespace(call, ns)
    domain = call.params["domain"]
    names = await call.backend.metadata.list_partitioned_topics(ns)
    return Response.json([n for n in names if TopicName.parse(n).domain == domain])


async def lookup(call: Call) -> Response:
    topic = topic_of(call)
    await require_namespace(call, topic.namespace)
    if call.routing is not None:  # several workers: the one that owns the topic
        return Response.json(await call.routing.topic_lookup(str(topic)))
    backend = call.backend
    # The C++ client's HTTPLookupService requires both brokerUrl and brokerUrlTls to be present.
    return Response.json({
        "brokerUrl": backend.service_url,
        "brokerUrlTls": backend.service_url_tls or "",
        "httpUrl": call.web_service_url,
        "httpUrlTls": call.web_service_url_tls or "",
        "nativeUrl": backend.service_url,
    })


def register(router: Router) -> None:
    router.add("PUT", TOPIC + "/partitions", create_partitioned_topic)
    router.add("GET", TOPIC + "/partitions", get_partitioned_metadata)
    router.add("POST", TOPIC + "/partitions", update_partitioned_topic)
    router.add("DELETE", TOPIC + "/partitions", delete_partitioned_topic)
    router.add("POST", TOPIC + "/createMissedPartitions", create_missed_partitions)
    router.add("PUT", TOPIC, create_topic)
    router.add("DELETE", TOPIC, by_owner(delete_topic))
    router.add("GET", "/admin/v2/" + DOMAIN + "/{tenant}/{namespace}", list_topics)
    router.add("GET", "/admin/v2/" + DOMAIN + "/{tenant}/{namespace}/partitioned", list_partitioned_topics)
    router.add("GET", "/lookup/v2/topic/" + DOMAIN + "/{tenant}/{namespace}/{topic}", lookup)
