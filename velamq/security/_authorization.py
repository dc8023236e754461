"""Who may do what: Pulsar's PulsarAuthorizationProvider, evaluated on an in-memory model.

The model is loaded from the metadata store and kept current by whoever changes it (the broker's
loop owns it): `load_tenant(tenant, info)` with Pulsar's TenantInfo {adminRoles, ...} and
`load_namespace(ns, policies)` with the namespace's Pulsar Policies, of which two fields matter:

    auth_policies = {
        "namespace_auth":          {role: [action, ...]},                    # grants on the namespace
        "destination_auth":        {full topic name: {role: [action, ...]}},  # grants on one topic
        "subscription_auth_roles": {subscription: [role, ...]},              # who may use a subscription
    }
    subscription_auth_mode = "None" | "Prefix"     # Prefix: subscription names start with the role

Decisions, as Pulsar makes them:
  - superUserRoles may do everything; a tenant's adminRoles may do everything in that tenant
    (PulsarAuthorizationProvider.allowTopicOperationAsync checks them first);
  - produce: a namespace or topic grant with "produce" (a partition also inherits its partitioned
    topic's grant);
  - consume: the subscription, if named, must be open to the role (a non-empty
    subscription_auth_roles entry that does not list it closes it; Prefix mode wants `role...`),
    then a namespace or topic grant with "consume";
  - lookup, stats, metadata: produce or consume;
  - terminate, compact, unload, delete, grants and policies: tenant admins and superusers only;
  - with authorizationAllowWildcardsMatching, a granted role "app-*" or "*-app" matches by prefix
    or suffix.
A role of None (authentication disabled, authorization enabled) is allowed nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Final

from velamq._topic_name import TopicName
from velamq.security._errors import AccessDeniedError


class AuthAction(StrEnum):
    """Pulsar's AuthAction: what a grant allows."""

    produce = "produce"
    consume = "consume"
    functions = "functions"
    sources = "sources"
    sinks = "sinks"
    packages = "packages"


class TopicOperation(Enum):
    LOOKUP = "lookup"
    GET_STATS = "get stats of"
    GET_METADATA = "get metadata of"
    PRODUCE = "produce to"
    CONSUME = "consume from"
    SUBSCRIBE = "subscribe to"
    UNSUBSCRIBE = "unsubscribe from"
    GET_SUBSCRIPTIONS = "list subscriptions of"
    SKIP = "skip messages on"
    EXPIRE_MESSAGES = "expire messages on"
    PEEK_MESSAGES = "peek messages on"
    RESET_CURSOR = "reset a cursor on"
    GET_BACKLOG_SIZE = "get the backlog size of"
    TERMINATE = "terminate"
    COMPACT = "compact"
    UNLOAD = "unload"
    DELETE = "delete"
    CREATE = "create"
    UPDATE_METADATA = "update"
    GRANT_PERMISSION = "grant permissions on"
    GET_PERMISSION = "read permissions of"
    REVOKE_PERMISSION = "revoke permissions on"


class NamespaceOperation(Enum):
    GET_TOPIC = "get a topic of"
    GET_TOPICS = "list topics of"
    UNSUBSCRIBE = "unsubscribe in"
    CLEAR_BACKLOG = "clear the backlog of"
    PACKAGES = "manage packages in"
    CREATE_TOPIC = "create a topic in"
    DELETE_TOPIC = "delete a topic in"
    GRANT_PERMISSION = "grant permissions on"
    GET_PERMISSION = "read permissions of"
    REVOKE_PERMISSION = "revoke permissions on"


_CONSUME_OPERATIONS: Final = frozenset({
    TopicOperation.CONSUME, TopicOperation.SUBSCRIBE, TopicOperation.UNSUBSCRIBE, TopicOperation.GET_SUBSCRIPTIONS,
    TopicOperation.SKIP, TopicOperation.EXPIRE_MESSAGES, TopicOperation.PEEK_MESSAGES, TopicOperation.RESET_CURSOR,
    TopicOperation.GET_BACKLOG_SIZE,
})
_LOOKUP_OPERATIONS: Final = frozenset({TopicOperation.LOOKUP, TopicOperation.GET_STATS, TopicOperation.GET_METADATA})
_NAMESPACE_CONSUME_OPERATIONS: Final = frozenset({
    NamespaceOperation.GET_TOPIC, NamespaceOperation.GET_TOPICS, NamespaceOperation.UNSUBSCRIBE,
    NamespaceOperation.CLEAR_BACKLOG,
})

Grants = Mapping[str, frozenset[AuthAction]]


@dataclass(frozen=True, slots=True)
class NamespaceAuth:
    """The authorization part of one namespace's policies (see the module docstring)."""

    namespace_auth: Grants = field(default_factory=dict)
    destination_auth: Mapping[str, Grants] = field(default_factory=dict)
    subscription_auth_roles: Mapping[str, frozenset[str]] = field(default_factory=dict)
    subscription_auth_mode: str = "None"

    @classmethod
    def from_policies(cls, policies: Mapping[str, Any]) -> NamespaceAuth:
        """From a namespace's stored Pulsar Policies; entries that do not parse are skipped (they
        were validated when written, see _auth_policies.py)."""
        auth = policies.get("auth_policies")
        auth = auth if isinstance(auth, Mapping) else {}
        destination = auth.get("destination_auth")
        destination = destination if isinstance(destination, Mapping) else {}
        subs = auth.get("subscription_auth_roles")
        mode = policies.get("subscription_auth_mode")
        return cls(
            namespace_auth=_grants(auth.get("namespace_auth")),
            destination_auth={
                str(topic): _grants(roles) for topic, roles in destination.items()
            },
            subscription_auth_roles={
                str(sub): frozenset(r for r in roles if isinstance(r, str))
                for sub, roles in (subs.items() if isinstance(subs, Mapping) else [])
                if isinstance(roles, list | tuple | set | frozenset)
            },
            subscription_auth_mode=mode if mode in ("None", "Prefix") else "None",
        )


def _grants(value: Any) -> Grants:
    if not isinstance(value, Mapping):
        return {}
    grants: dict[str, frozenset[AuthAction]] = {}
    for role, actions in value.items():
        if isinstance(role, str) and isinstance(actions, list | tuple | set | frozenset):
            grants[role] = frozenset(AuthAction(a) for a in actions if a in AuthAction.__members__)
    return grants


class AuthorizationModel:
    """Superusers, tenant admins and namespace grants, and Pulsar's decisions over them."""

    def __init__(self, super_user_roles: Iterable[str] = (), *, allow_wildcards: bool = False) -> None:
        self.super_user_roles = frozenset(super_user_roles)
        self.allow_wildcards = allow_wildcards
        self._tenant_admins: dict[str, frozenset[str]] = {}
        self._namespaces: dict[str, NamespaceAuth] = {}

    # ------------------------------------------------------------------------ loading

    def load_tenant(self, tenant: str, info: Mapping[str, Any]) -> None:
        roles = info.get("adminRoles") or []
        self._tenant_admins[tenant] = frozenset(r for r in roles if isinstance(r, str))

    def drop_tenant(self, tenant: str) -> None:
        self._tenant_admins.pop(tenant, None)

    def load_namespace(self, namespace: str, policies: Mapping[str, Any]) -> None:
        self._namespaces[namespace] = NamespaceAuth.from_policies(policies)

    def drop_namespace(self, namespace: str) -> None:
        self._namespaces.pop(namespace, None)

    def namespace_auth(self, namespace: str) -> NamespaceAuth:
        return self._namespaces.get(namespace) or NamespaceAuth()

    # ------------------------------------------------------------------------ roles

    def is_superuser(self, role: str | None) -> bool:
        return role is not None and role in self.super_user_roles

    def is_tenant_admin(self, role: str | None, tenant: str) -> bool:
        """Superusers and the tenant's adminRoles (Pulsar's validateTenantAdminAccess)."""
        return self.is_superuser(role) or (role is not None and role in self._tenant_admins.get(tenant, frozenset()))

    # ------------------------------------------------------------------------ decisions

    def allowed(self, role: str | None, action: AuthAction, topic: str, subscription: str | None = None) -> bool:
        """May `role` produce to / consume from `topic` (through `subscription`)? Admins may."""
        name = TopicName.parse(topic)
        if self.is_tenant_admin(role, name.tenant):
            return True
        if action is AuthAction.consume:
            return self._can_consume(role, name, subscription)
        return self._has_grant(role, name, action)

    def allow_topic_operation(
        self, role: str | None, operation: TopicOperation, topic: str, subscription: str | None = None
    ) -> bool:
        name = TopicName.parse(topic)
        if self.is_tenant_admin(role, name.tenant):
            return True
        if operation in _LOOKUP_OPERATIONS:
            return self._has_grant(role, name, AuthAction.produce) or self._can_consume(role, name, None)
        if operation is TopicOperation.PRODUCE:
            return self._has_grant(role, name, AuthAction.produce)
        if operation in _CONSUME_OPERATIONS:
            return self._can_consume(role, name, subscription)
        return False  # terminate, compact, unload, delete, create, permissions: admins only

    def allow_namespace_operation(self, role: str | None, operation: NamespaceOperation, namespace: str) -> bool:
        tenant = namespace.split("/", 1)[0]
        if self.is_tenant_admin(role, tenant):
            return True
        grants = self.namespace_auth(namespace).namespace_auth
        if operation in _NAMESPACE_CONSUME_OPERATIONS:
            return self._match(role, grants, AuthAction.consume)
        if operation is NamespaceOperation.PACKAGES:
            return self._match(role, grants, AuthAction.packages)
        return False

    def allow_tenant_operation(self, role: str | None, tenant: str) -> bool:
        return self.is_tenant_admin(role, tenant)

    def check_topic_operation(
        self, role: str | None, operation: TopicOperation, topic: str, subscription: str | None = None
    ) -> None:
        """AccessDeniedError unless allow_topic_operation."""
        if not self.allow_topic_operation(role, operation, topic, subscription):
            what = f"{topic} (subscription {subscription!r})" if subscription else topic
            raise AccessDeniedError(role, operation.value, what)

    def check_namespace_operation(self, role: str | None, operation: NamespaceOperation, namespace: str) -> None:
        if not self.allow_namespace_operation(role, operation, namespace):
            raise AccessDeniedError(role, operation.value, namespace)

    # ------------------------------------------------------------------------ internals

    def _can_consume(self, role: str | None, name: TopicName, subscription: str | None) -> bool:
        if role is None:
            return False
        auth = self.namespace_auth(name.namespace)
        if subscription:
            roles = auth.subscription_auth_roles.get(subscription)
            if roles and role not in roles:
                return False
            if auth.subscription_auth_mode == "Prefix" and not subscription.startswith(role):
                return False
        return self._has_grant(role, name, AuthAction.consume)

    def _has_grant(self, role: str | None, name: TopicName, action: AuthAction) -> bool:
        if role is None:
            return False
        auth = self.namespace_auth(name.namespace)
        if self._match(role, auth.namespace_auth, action):
            return True
        for topic in {str(name), str(name.partitioned_parent)}:
            grants = auth.destination_auth.get(topic)
            if grants and self._match(role, grants, action):
                return True
        return False

    def _match(self, role: str | None, grants: Grants, action: AuthAction) -> bool:
        if role is None:
            return False
        if action in grants.get(role, frozenset()):
            return True
        if not self.allow_wildcards:
            return False
        for granted, actions in grants.items():
            if action not in actions or not granted:
                continue
            if granted.endswith("*") and role.startswith(granted[:-1]):
                return True
            if granted.startswith("*") and role.endswith(granted[1:]):
                return True
        return False
