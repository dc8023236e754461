"""Permission verbs of `velamq admin namespaces` and `velamq admin topics` (SE-3), with pulsar-admin's
names and flags, over Pulsar's permission routes (velamq/admin/_routes_permissions.py):

    namespaces  permissions NS                                           {role: [actions]}
                grant-permission NS --role R --actions produce,consume   the role's actions become these
                revoke-permission NS --role R
                subscription-permission NS                               {subscription: [roles]}
                grant-subscription-permission NS --subscription S --roles r1,r2
                revoke-subscription-permission NS --subscription S --role R
                get-subscription-auth-mode NS | set-subscription-auth-mode NS -m None|Prefix
    topics      permissions TOPIC                                        the namespace's grants and the topic's
                grant-permission TOPIC --role R --actions consume
                revoke-permission TOPIC --role R                         412 if not granted on the topic itself

--actions and --roles take pulsar-admin's comma-separated lists (or the flag repeated). Actions are
checked here, as pulsar-admin checks them before it calls the broker: an unknown one exits 2 with
the list of Pulsar's actions. Who may call these (a superuser or the tenant's adminRoles) is the
broker's decision: a 403 prints its reason and exits 1, as every refused admin call does.
"""

from __future__ import annotations

import argparse
from typing import Any, Final

from velamq.cli._admin_policies import Args, Group, namespace_path, topic_path, verb
from velamq.client import AdminClient

# Pulsar's AuthAction names (velamq.security.AuthAction; not imported: it would load the broker-side
# token and password libraries into every `velamq admin` call).
AUTH_ACTIONS: Final = ("produce", "consume", "functions", "sources", "sinks", "packages")
SUBSCRIPTION_AUTH_MODES: Final = ("None", "Prefix")


def split_list(items: list[str] | None, what: str) -> list[str]:
    """["produce,consume", "functions"] -> ["produce", "consume", "functions"]; ValueError if empty."""
    values = [x.strip() for item in items or [] for x in item.split(",") if x.strip()]
    if not values:
        raise ValueError(f"give at least one {what}")
    return list(dict.fromkeys(values))


def parse_actions(items: list[str] | None) -> list[str]:
    actions = split_list(items, "action")
    unknown = [a for a in actions if a not in AUTH_ACTIONS]
    if unknown:
        raise ValueError(f"unknown action {unknown[0]!r}: Pulsar's actions are {', '.join(AUTH_ACTIONS)}")
    return actions


def _ns(p: argparse.ArgumentParser) -> None:
    p.add_argument("namespace", help="tenant/namespace")


def _topic(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic")


def _role(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--role", required=True, help=f"client role to {what}")


def _actions(p: argparse.ArgumentParser) -> None:
    p.add_argument("--actions", action="append", required=True,
                   help=f"actions to grant, comma-separated ({', '.join(AUTH_ACTIONS)})")


def _grant_args(target: Args) -> Args:
    def add(p: argparse.ArgumentParser) -> None:
        target(p)
        _role(p, "grant the actions to")
        _actions(p)

    return add


def _revoke_args(target: Args) -> Args:
    def add(p: argparse.ArgumentParser) -> None:
        target(p)
        _role(p, "revoke the permissions of")

    return add


# ---------------------------------------------------------------------------- namespaces


def _grant_subscription_args(p: argparse.ArgumentParser) -> None:
    _ns(p)
    p.add_argument("--subscription", required=True, help="subscription the roles may use")
    p.add_argument("--roles", action="append", required=True, help="client roles, comma-separated")


def _revoke_subscription_args(p: argparse.ArgumentParser) -> None:
    _ns(p)
    p.add_argument("--subscription", required=True, help="subscription to take the role from")
    _role(p, "take the subscription from")


def _auth_mode_args(p: argparse.ArgumentParser) -> None:
    _ns(p)
    p.add_argument("--subscription-auth-mode", "-m", dest="mode", required=True, choices=SUBSCRIPTION_AUTH_MODES,
                   help="Prefix: a role may only use subscriptions whose name starts with the role")


def _grant_namespace(c: AdminClient, a: argparse.Namespace) -> Any:
    return c.request("POST", namespace_path(a.namespace, "permissions", a.role), parse_actions(a.actions))


def _grant_subscription(c: AdminClient, a: argparse.Namespace) -> Any:
    path = namespace_path(a.namespace, "permissions", "subscription", a.subscription)
    return c.request("POST", path, split_list(a.roles, "role"))


def add_namespace_permission_verbs(group: Group) -> None:
    verb(group, "permissions", "show the grants of a namespace ({role: [actions]})",
         lambda c, a: c.request("GET", namespace_path(a.namespace, "permissions")), _ns)
    verb(group, "grant-permission", "grant a role actions on a namespace (replaces its previous actions)",
         _grant_namespace, _grant_args(_ns))
    verb(group, "revoke-permission", "revoke a role's grant on a namespace",
         lambda c, a: c.request("DELETE", namespace_path(a.namespace, "permissions", a.role)), _revoke_args(_ns))
    verb(group, "subscription-permission", "show which roles may use each subscription of a namespace",
         lambda c, a: c.request("GET", namespace_path(a.namespace, "permissions", "subscription")), _ns)
    verb(group, "grant-subscription-permission", "let only these roles use a subscription of a namespace",
         _grant_subscription, _grant_subscription_args)
    # pulsar-admin's path (Pulsar's Java admin client sends this one too).
    verb(group, "revoke-subscription-permission", "take a role off a subscription's list",
         lambda c, a: c.request("DELETE", namespace_path(a.namespace, "permissions", a.subscription, a.role)),
         _revoke_subscription_args)
    verb(group, "get-subscription-auth-mode", "None, or Prefix (subscription names must start with the role)",
         lambda c, a: c.request("GET", namespace_path(a.namespace, "subscriptionAuthMode")), _ns)
    verb(group, "set-subscription-auth-mode", "set the subscription auth mode of a namespace",
         lambda c, a: c.request("POST", namespace_path(a.namespace, "subscriptionAuthMode"), a.mode),
         _auth_mode_args)


# ---------------------------------------------------------------------------- topics


def add_topic_permission_verbs(group: Group) -> None:
    verb(group, "permissions", "show the grants that apply to a topic (the namespace's and its own)",
         lambda c, a: c.request("GET", topic_path(a.topic, "permissions")), _topic)
    verb(group, "grant-permission", "grant a role actions on one topic",
         lambda c, a: c.request("POST", topic_path(a.topic, "permissions", a.role), parse_actions(a.actions)),
         _grant_args(_topic))
    verb(group, "revoke-permission", "revoke a role's grant on one topic (not the namespace's)",
         lambda c, a: c.request("DELETE", topic_path(a.topic, "permissions", a.role)), _revoke_args(_topic))
