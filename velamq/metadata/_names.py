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


# Topic names already parsed (a topic's load and its first producer ask the store about the same
# name several times). Cleared when full, so it never holds more than this many names.
_parsed_topics_max: Final = 1024
_parsed_topics: dict[str, TopicName] = {}


def check_topic(topic: str) -> TopicName:
    parsed = _parsed_topics.get(topic) if isinstance(topic, str) else None
    if parsed is None:
        parsed = TopicName.parse(topic)
        if len(_parsed_topics) >= _parsed_topics_max:
            _parsed_topics.clear()
        _parsed_topics[topic] = parsed
    return parsed
