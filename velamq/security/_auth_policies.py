"""Grants as stored: pure functions over a namespace's `auth_policies` (Pulsar's JSON shape).

Persistence needs no new table: Pulsar keeps grants inside the namespace's Policies, and velamq's
metadata store already keeps each namespace's Policies as one JSON object (namespaces.policies), so
a grant is a read-modify-write of its "auth_policies" key:

    policies["auth_policies"] = {
        "namespace_auth":          {"app": ["consume", "produce"]},
        "destination_auth":        {"persistent://t/ns/x": {"reader": ["consume"]}},
        "subscription_auth_roles": {"sub-1": ["reader"]},
    }
    policies["subscription_auth_mode"] = "Prefix"      # or "None" / absent

Every function takes the current value (None or a dict) and returns a new dict to store; none
mutates its argument. Lists are sorted, so the stored JSON is stable. The admin API's bodies are
validated here: InvalidGrantError (HTTP 400) for a body that is not a list of known actions / of
role names; PreconditionFailedError (412) for revoking what is not granted, as Pulsar answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from velamq._errors import PreconditionFailedError
from velamq._topic_name import TopicName
from velamq.security._authorization import AuthAction
from velamq.security._errors import InvalidGrantError

AuthPolicies = dict[str, Any]
# The sections of auth_policies, in the order `normalize` unpacks them.
_SECTIONS = ("namespace_auth", "destination_auth", "subscription_auth_roles")


def normalize(value: Any) -> AuthPolicies:
    """A valid auth_policies dict from a stored or submitted one (e.g. the body of PUT namespaces);
    InvalidGrantError for a shape Pulsar would refuse."""
    if value is None:
        return {section: {} for section in _SECTIONS}
    if not isinstance(value, Mapping):
        raise InvalidGrantError("auth_policies must be a JSON object")
    ns_auth, topic_auth, sub_auth = ({} if value.get(k) is None else value[k] for k in _SECTIONS)
    if not isinstance(ns_auth, Mapping) or not isinstance(topic_auth, Mapping) or not isinstance(sub_auth, Mapping):
        raise InvalidGrantError("namespace_auth, destination_auth and subscription_auth_roles must be JSON objects")
    destination: dict[str, Any] = {}
    for topic, grants in topic_auth.items():
        if not isinstance(grants, Mapping):
            raise InvalidGrantError(f"destination_auth[{topic!r}] must be a JSON object")
        destination[str(TopicName.parse(str(topic)))] = {_role(r): parse_actions(a) for r, a in grants.items()}
    return {
        "namespace_auth": {_role(r): parse_actions(a) for r, a in ns_auth.items()},
        "destination_auth": destination,
        "subscription_auth_roles": {_subscription(s): parse_roles(r) for s, r in sub_auth.items()},
    }


def parse_actions(body: Any) -> list[str]:
    """A grant body: a JSON list of AuthAction names, e.g. ["produce", "consume"]."""
    if not isinstance(body, list | tuple | set | frozenset) or not all(isinstance(a, str) for a in body):
        raise InvalidGrantError("expected a JSON list of actions, e.g. [\"produce\", \"consume\"]")
    unknown = sorted(a for a in body if a not in AuthAction.__members__)
    if unknown:
        known = ", ".join(AuthAction.__members__)
        raise InvalidGrantError(f"unknown action {unknown[0]!r} (Pulsar's actions are {known})")
    return sorted(set(body))


def parse_roles(body: Any) -> list[str]:
    """A subscription grant body: a JSON list of role names."""
    if not isinstance(body, list | tuple | set | frozenset):
        raise InvalidGrantError("expected a JSON list of roles")
    return sorted({_role(r) for r in body})


def _role(role: Any) -> str:
    if not isinstance(role, str) or not role or len(role) > 1024:
        raise InvalidGrantError("a role must be a non-empty string")
    return role


def _subscription(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidGrantError("a subscription name must be a non-empty string")
    return name


# ---------------------------------------------------------------------------- namespace grants


def grant_namespace(current: Any, role: str, actions: Any) -> AuthPolicies:
    """POST /admin/v2/namespaces/{t}/{ns}/permissions/{role}: the role's actions become `actions`."""
    policies = normalize(current)
    policies["namespace_auth"][_role(role)] = parse_actions(actions)
    return policies


def revoke_namespace(current: Any, role: str) -> AuthPolicies:
    """DELETE .../namespaces/{t}/{ns}/permissions/{role}; revoking an absent role is a no-op, as in Pulsar."""
    policies = normalize(current)
    policies["namespace_auth"].pop(role, None)
    return policies


def namespace_permissions(current: Any) -> dict[str, list[str]]:
    """GET .../namespaces/{t}/{ns}/permissions: {role: [actions]}."""
    return dict(normalize(current)["namespace_auth"])


# ---------------------------------------------------------------------------- topic grants


def grant_topic(current: Any, topic: str, role: str, actions: Any) -> AuthPolicies:
    """POST /admin/v2/persistent/{t}/{ns}/{topic}/permissions/{role}."""
    policies = normalize(current)
    name = str(TopicName.parse(topic))
    policies["destination_auth"].setdefault(name, {})[_role(role)] = parse_actions(actions)
    return policies


def revoke_topic(current: Any, topic: str, role: str) -> AuthPolicies:
    """DELETE .../{topic}/permissions/{role}: 412 if the role has no grant on the topic itself
    (Pulsar: "Permissions are not set at the topic level")."""
    policies = normalize(current)
    name = str(TopicName.parse(topic))
    grants = policies["destination_auth"].get(name, {})
    if role not in grants:
        raise PreconditionFailedError("Permissions are not set at the topic level")
    del grants[role]
    if not grants:
        del policies["destination_auth"][name]
    return policies


def drop_topic(current: Any, topic: str) -> AuthPolicies:
    """A deleted topic's grants go with it (Pulsar revokes them when it deletes the topic)."""
    policies = normalize(current)
    policies["destination_auth"].pop(str(TopicName.parse(topic)), None)
    return policies


def topic_permissions(current: Any, topic: str) -> dict[str, list[str]]:
    """GET .../{topic}/permissions: the namespace's grants merged with the topic's (and, for a
    partition, its partitioned topic's), as Pulsar's getPermissionsOnTopic answers."""
    policies = normalize(current)
    name = TopicName.parse(topic)
    merged: dict[str, set[str]] = {r: set(a) for r, a in policies["namespace_auth"].items()}
    for key in dict.fromkeys((str(name.partitioned_parent), str(name))):
        for role, actions in policies["destination_auth"].get(key, {}).items():
            merged.setdefault(role, set()).update(actions)
    return {role: sorted(actions) for role, actions in merged.items()}


# ---------------------------------------------------------------------------- subscription grants


def grant_subscription(current: Any, subscription: str, roles: Any) -> AuthPolicies:
    """POST .../namespaces/{t}/{ns}/permissions/subscription/{sub} with a JSON list of roles:
    only those roles may use the subscription from now on (the list replaces the previous one)."""
    policies = normalize(current)
    policies["subscription_auth_roles"][_subscription(subscription)] = parse_roles(roles)
    return policies


def revoke_subscription(current: Any, subscription: str, role: str) -> AuthPolicies:
    """DELETE .../permissions/subscription/{sub}/{role}; 412 for a subscription with no roles set."""
    policies = normalize(current)
    roles = policies["subscription_auth_roles"].get(subscription)
    if roles is None:
        raise PreconditionFailedError("couldn't find subscription")
    policies["subscription_auth_roles"][subscription] = [r for r in roles if r != role]
    return policies


def subscription_permissions(current: Any) -> dict[str, list[str]]:
    """GET .../namespaces/{t}/{ns}/permissions/subscription: {subscription: [roles]}."""
    return dict(normalize(current)["subscription_auth_roles"])


def parse_subscription_auth_mode(value: Any) -> str:
    """POST .../namespaces/{t}/{ns}/subscriptionAuthMode body: "None" or "Prefix"."""
    if value not in ("None", "Prefix"):
        raise InvalidGrantError('subscription auth mode must be "None" or "Prefix"')
    return str(value)
