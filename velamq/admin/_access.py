"""Who may call which admin route: Pulsar's rules as one table, checked before every handler.

Every route has an Access. The table below names the routes that are more open than the default;
any other route gets the strictest rule its path allows, so a route added later is safe until it
is listed here:

    path with a tenant (tenants, namespaces, topics, schemas...)   the tenant's adminRoles or a superuser
    any other path (clusters PUT, tenants list, brokers/health)     a superuser

What the table opens, as Pulsar's PulsarAuthorizationProvider does:

    topic stats, internal stats, partition metadata, HTTP lookup, schema reads   produce or consume
    subscriptions, peek, examine, message by id, skip, expire, reset, (un)subscribe   consume (and the
                                                                                 subscription's roles)
    topic lists of a namespace, namespace clear-backlog / unsubscribe         consume on the namespace
    clusters GET, brokers/ready                                               any authenticated role
    /metrics                                                                  nobody, or any authenticated
                                                                              role with authenticateMetricsEndpoint
    the console                                                               any authenticated role; the
                                                                              pages show their tenants only

Refusals, with Pulsar's codes and {"reason": ...} wording: credentials missing or refused 401 (see
_auth_http.py); a topic operation not granted 401 as well (Pulsar's validateTopicOperation answers
UNAUTHORIZED); a namespace operation, a tenant or a superuser route 403.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

from velamq._errors import InvalidTopicNameError
from velamq._topic_name import TopicName
from velamq.admin._auth_http import Caller
from velamq.admin._http import HttpError
from velamq.security import NamespaceOperation, TopicOperation


class Need(Enum):
    NOTHING = "nothing"  # /metrics unless authenticateMetricsEndpoint
    AUTHENTICATED = "authenticated"
    CONSOLE = "console"  # authenticated, with a browser challenge on 401; pages check tenants
    SUPERUSER = "superuser"
    TENANT_ADMIN = "tenant admin"
    NAMESPACE = "namespace operation"
    TOPIC = "topic operation"


@dataclass(frozen=True, slots=True)
class Access:
    need: Need
    operation: TopicOperation | NamespaceOperation | None = None


DOMAIN: Final = "{domain:persistent|non-persistent}"
NAMESPACE: Final = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC: Final = "/admin/v2/" + DOMAIN + "/{tenant}/{namespace}/{topic}"
SUBSCRIPTION: Final = TOPIC + "/subscription/{subscription}"
SCHEMAS: Final = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
METRICS: Final = "/metrics"

_AUTHENTICATED: Final = Access(Need.AUTHENTICATED)
_CONSOLE: Final = Access(Need.CONSOLE)
_SUPERUSER: Final = Access(Need.SUPERUSER)
_TENANT_ADMIN: Final = Access(Need.TENANT_ADMIN)


def _topic(operation: TopicOperation) -> Access:
    return Access(Need.TOPIC, operation)


def _namespace(operation: NamespaceOperation) -> Access:
    return Access(Need.NAMESPACE, operation)


_STATS: Final = _topic(TopicOperation.GET_STATS)
_PEEK: Final = _topic(TopicOperation.PEEK_MESSAGES)
_LOOKUP: Final = _topic(TopicOperation.LOOKUP)
_TOPICS: Final = _namespace(NamespaceOperation.GET_TOPICS)

RULES: Final[Mapping[tuple[str, str], Access]] = {
    ("GET", "/admin/v2/brokers/health"): _SUPERUSER,
    ("GET", "/admin/v2/brokers/ready"): _AUTHENTICATED,
    ("GET", METRICS): Access(Need.NOTHING),
    ("GET", "/"): _CONSOLE,
    ("GET", "/console/namespaces/{tenant}/{namespace}"): _CONSOLE,
    ("GET", "/console/topics/" + DOMAIN + "/{tenant}/{namespace}/{topic}"): _CONSOLE,
    ("GET", "/console/data/overview"): _CONSOLE,
    ("GET", "/console/data/namespaces/{tenant}/{namespace}"): _CONSOLE,
    ("GET", "/console/data/topics/" + DOMAIN + "/{tenant}/{namespace}/{topic}"): _CONSOLE,
    ("GET", "/admin/v2/clusters"): _AUTHENTICATED,
    ("GET", "/admin/v2/clusters/{cluster}"): _AUTHENTICATED,
    # Creating, updating and deleting a tenant is a superuser's, though the path names the tenant.
    ("PUT", "/admin/v2/tenants/{tenant}"): _SUPERUSER,
    ("POST", "/admin/v2/tenants/{tenant}"): _SUPERUSER,
    ("DELETE", "/admin/v2/tenants/{tenant}"): _SUPERUSER,
    # Namespace-wide operations a consumer may do.
    ("GET", NAMESPACE + "/topics"): _TOPICS,
    ("GET", "/admin/v2/" + DOMAIN + "/{tenant}/{namespace}"): _TOPICS,
    ("GET", "/admin/v2/" + DOMAIN + "/{tenant}/{namespace}/partitioned"): _TOPICS,
    ("POST", NAMESPACE + "/clearBacklog"): _namespace(NamespaceOperation.CLEAR_BACKLOG),
    ("POST", NAMESPACE + "/clearBacklog/{subscription}"): _namespace(NamespaceOperation.CLEAR_BACKLOG),
    ("POST", NAMESPACE + "/unsubscribe/{subscription}"): _namespace(NamespaceOperation.UNSUBSCRIBE),
    # Reading a topic's figures and metadata: produce or consume.
    ("GET", TOPIC + "/stats"): _STATS,
    ("GET", TOPIC + "/partitioned-stats"): _STATS,
    ("GET", TOPIC + "/internalStats"): _STATS,
    ("GET", TOPIC + "/partitioned-internalStats"): _STATS,
    ("GET", TOPIC + "/partitions"): _topic(TopicOperation.GET_METADATA),
    ("GET", "/lookup/v2/topic/" + DOMAIN + "/{tenant}/{namespace}/{topic}"): _LOOKUP,
    ("GET", SCHEMAS + "/schema"): _LOOKUP,
    ("GET", SCHEMAS + "/schema/{version}"): _LOOKUP,
    ("GET", SCHEMAS + "/schemas"): _LOOKUP,
    ("POST", SCHEMAS + "/compatibility"): _LOOKUP,
    ("POST", SCHEMAS + "/version"): _LOOKUP,
    # Reading messages and moving cursors: consume (and the subscription's roles, if it has some).
    ("GET", TOPIC + "/lastMessageId"): _PEEK,
    ("GET", TOPIC + "/ledger/{ledger}/entry/{entry}"): _PEEK,
    ("GET", TOPIC + "/examinemessage"): _PEEK,
    ("GET", TOPIC + "/messageid/{timestamp}"): _PEEK,
    ("GET", SUBSCRIPTION + "/position/{position}"): _PEEK,
    ("GET", TOPIC + "/subscriptions"): _topic(TopicOperation.GET_SUBSCRIPTIONS),
    ("PUT", SUBSCRIPTION): _topic(TopicOperation.SUBSCRIBE),
    ("DELETE", SUBSCRIPTION): _topic(TopicOperation.UNSUBSCRIBE),
    ("POST", SUBSCRIPTION + "/skip/{count}"): _topic(TopicOperation.SKIP),
    ("POST", SUBSCRIPTION + "/skip_all"): _topic(TopicOperation.SKIP),
    ("POST", SUBSCRIPTION + "/expireMessages/{seconds}"): _topic(TopicOperation.EXPIRE_MESSAGES),
    ("POST", TOPIC + "/all_subscription/expireMessages/{seconds}"): _topic(TopicOperation.EXPIRE_MESSAGES),
    ("POST", SUBSCRIPTION + "/resetcursor/{timestamp}"): _topic(TopicOperation.RESET_CURSOR),
    ("POST", SUBSCRIPTION + "/resetcursor"): _topic(TopicOperation.RESET_CURSOR),
}


def access_of(method: str, pattern: str, params: Mapping[str, str]) -> Access:
    """The route's rule: from the table, else the strictest its path allows (module docstring)."""
    rule = RULES.get(("GET" if method == "HEAD" else method, pattern))
    if rule is not None:
        return rule
    return _TENANT_ADMIN if "tenant" in params else _SUPERUSER


def topic_name(params: Mapping[str, str]) -> TopicName:
    """The topic a route's parameters name (schema paths have no domain: persistent)."""
    parts = [params["tenant"], params["namespace"], params["topic"]]
    if any("/" in part for part in parts):
        # An encoded "/" would shift the parts; the route itself refuses such a name (412) too.
        raise InvalidTopicNameError("/".join(parts), "'/' in a part of the name")
    return TopicName.parse(f"{params.get('domain', 'persistent')}://{'/'.join(parts)}")


def check(access: Access, caller: Caller, params: Mapping[str, str]) -> None:
    """HttpError (403, or 401 for a topic operation) unless `caller` may use a route with `access`
    and these path parameters."""
    if not caller.enforce or access.need in (Need.NOTHING, Need.AUTHENTICATED, Need.CONSOLE):
        return
    if caller.is_superuser():
        return
    if access.need is Need.SUPERUSER:
        raise HttpError(403, "This operation requires super-user access")
    tenant = params["tenant"]
    if caller.is_tenant_admin(tenant):
        return
    model = caller.model
    assert model is not None  # enforce implies a model
    if access.need is Need.NAMESPACE and isinstance(access.operation, NamespaceOperation):
        namespace = f"{tenant}/{params['namespace']}"
        if model.allow_namespace_operation(caller.role, access.operation, namespace):
            return
        raise HttpError(
            403, f"Unauthorized to validateNamespaceOperation for operation [{access.operation.name}] "
            f"on namespace [{namespace}]"
        )
    if access.need is Need.TOPIC and isinstance(access.operation, TopicOperation):
        topic = str(topic_name(params))
        if model.allow_topic_operation(caller.role, access.operation, topic, params.get("subscription")):
            return
        # 401, not 403: Pulsar's validateTopicOperation answers UNAUTHORIZED (its clients rely on the code).
        raise HttpError(
            401, f"Unauthorized to validateTopicOperation for operation [{access.operation.name}] on topic [{topic}]"
        )
    raise HttpError(403, "Don't have permission to administrate resources on this tenant")
