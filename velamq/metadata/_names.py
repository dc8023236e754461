"""Tenant, namespace and topic names as the metadata store checks them, on the loop, before any
operation is sent to its thread: a bad name fails fast with InvalidTopicNameError."""

from __future__ import annotations

import re
from typing import Final

from velamq._errors import InvalidTopicNameError
from velamq._topic_name import TopicName

# Namespace names already checked (the check is a regular expression per part; lookups repeat it).
_checked_namespaces_max: Final = 10_000

# Tenant and namespace parts: Pulsar's NamedEntity rule, also used by velamq._topic_name.
_NAME_PART_RE: Final = re.compile(r"^[-=:.\w]+$")


def check_tenant(tenant: str) -> str:
    if not isinstance(tenant, str) or not _NAME_PART_RE.match(tenant) or len(tenant) > 255:
        raise InvalidTopicNameError(str(tenant), "bad tenant name")
    return tenant


_checked_namespaces: dict[str, str] = {}


def check_namespace(ns: str) -> tuple[str, str]:
    """'tenant/ns' (or V1 'tenant/cluster/ns') -> (namespace, tenant)."""
    tenant = _checked_namespaces.get(ns) if isinstance(ns, str) else None
    if tenant is not None:
        return ns, tenant
    parts = ns.split("/") if isinstance(ns, str) else []
    if len(parts) not in (2, 3) or len(ns) > 512 or not all(_NAME_PART_RE.match(p) for p in parts):
        raise InvalidTopicNameError(str(ns), "expected tenant/namespace")
    if len(_checked_namespaces) >= _checked_namespaces_max:
        _checked_namespaces.clear()
    _checked_namespaces[ns] = parts[0]
    return ns, parts[0]


def check_topic(topic: str) -> TopicName:
    return TopicName.parse(topic)  # which keeps the names parsed lately (_topic_name.py)
