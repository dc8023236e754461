"""Pulsar topic names (WC-2).

    x                                   -> persistent://public/default/x
    tenant/ns/x                         -> persistent://tenant/ns/x
    persistent://tenant/ns/x            -> itself
    non-persistent://tenant/ns/x        -> itself
    persistent://prop/cluster/ns/x      -> V1 name (cluster kept in the namespace part)
    <topic>-partition-<n>               -> partition n of the partitioned topic <topic>, if <topic>
                                           is one (partition_role); otherwise an ordinary topic

Topics patterns (regex subscriptions, the Spark source's topicsPattern) name their namespace the
same way: `x.*` lives in public/default, `tenant/ns/x.*` in tenant/ns (TopicPattern).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from velamq._errors import InvalidTopicNameError

DOMAINS = ("persistent", "non-persistent")
PARTITION_SUFFIX = "-partition-"
_PARTITION_RE = re.compile(r"^(.*)-partition-(\d+)$")
_NAME_PART_RE = re.compile(r"^[-=:.\w]+$")


def _check_part(full: str, part: str, what: str) -> None:
    if not part or not _NAME_PART_RE.match(part):
        raise InvalidTopicNameError(full, f"bad {what} {part!r}")


# Names parsed lately: a topic's creation parses its name in each of its commands (lookup,
# partitioned metadata, subscribe, producer, ...). Cleared when full, so it never holds more than
# this many; TopicName is immutable, so one object may serve every caller.
_parsed_max: Final = 1024
_parsed: dict[str, TopicName] = {}


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace_part: str  # "ns", or "cluster/ns" for V1 names
    local_name: str  # includes any -partition-N suffix
    # Made once (each is asked for several times per command: a created topic's SUBSCRIBE asked
    # for its namespace six times and matched the partition pattern four times): the full name;
    # the namespace (interned: one string for the topics of a namespace); the partition number
    # (-1: not a partition) and the partitioned topic's local name (None: not a partition).
    _full: str = field(init=False, repr=False, compare=False)
    _namespace: str = field(init=False, repr=False, compare=False)
    _partition: int = field(init=False, repr=False, compare=False)
    _parent_local: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "_full", f"{self.domain}://{self.tenant}/{self.namespace_part}/{self.local_name}")
        setattr_(self, "_namespace", sys.intern(f"{self.tenant}/{self.namespace_part}"))
        m = _PARTITION_RE.match(self.local_name) if PARTITION_SUFFIX in self.local_name else None
        setattr_(self, "_partition", int(m.group(2)) if m else -1)
        setattr_(self, "_parent_local", m.group(1) if m else None)

    @classmethod
    def parse(cls, name: str) -> TopicName:
        parsed = _parsed.get(name) if cls is TopicName and isinstance(name, str) else None
        if parsed is None:
            parsed = cls._parse(name)
            if cls is TopicName:
                if len(_parsed) >= _parsed_max:
                    _parsed.clear()
                _parsed[name] = parsed
        return parsed

    @classmethod
    def _parse(cls, name: str) -> TopicName:
        if not name or len(name) > 2048:
            raise InvalidTopicNameError(name, "empty or too long")
        rest = name
        domain = "persistent"
        if "://" in name:
            domain, rest = name.split("://", 1)
            if domain not in DOMAINS:
                raise InvalidTopicNameError(name, f"unknown domain {domain!r}")
            parts = rest.split("/")
            if len(parts) == 3:
                tenant, ns, local = parts
            elif len(parts) == 4:
                tenant, cluster, ns, local = parts
                _check_part(name, cluster, "cluster")
                ns = f"{cluster}/{ns}"
            else:
                raise InvalidTopicNameError(name, "expected domain://tenant/namespace/topic")
        else:
            parts = rest.split("/")
            if len(parts) == 1:
                tenant, ns, local = "public", "default", parts[0]
            elif len(parts) == 3:
                tenant, ns, local = parts
            else:
                raise InvalidTopicNameError(name, "expected topic or tenant/namespace/topic")
        _check_part(name, tenant, "tenant")
        for p in ns.split("/"):
            _check_part(name, p, "namespace")
        if not local or "/" in local or local.strip() != local or "\n" in local:
            raise InvalidTopicNameError(name, f"bad local name {local!r}")
        return cls(domain, tenant, ns, local)

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def persistent(self) -> bool:
        return self.domain == "persistent"

    @property
    def partition_index(self) -> int:
        """The partition number, or -1 if this is not a partition of a partitioned topic."""
        return self._partition

    @property
    def partitioned_parent(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself if not a partition)."""
        parent = self._parent_local
        if parent is None:
            return self
        return TopicName(self.domain, self.tenant, self.namespace_part, parent)

    def partition(self, index: int) -> TopicName:
        return TopicName(self.domain, self.tenant, self.namespace_part, f"{self.local_name}{PARTITION_SUFFIX}{index}")

    def __str__(self) -> str:
        return self._full


class PartitionRole(Enum):
    """What a topic name is, given the partitioned topics that exist (Pulsar's rule)."""

    ORDINARY = "ordinary"  # no -partition-N suffix, or its parent is not a partitioned topic
    PARTITION = "partition"  # partition N of a partitioned topic with more than N partitions
    OUT_OF_RANGE = "out of range"  # -partition-N of a partitioned topic with N partitions or fewer


def partition_role(name: TopicName, parent_partitions: int) -> PartitionRole:
    """The one rule for `<topic>-partition-<n>` names, shared by the broker and the storage
    checker. `parent_partitions` is the partition count of `name.partitioned_parent` (0 if that is
    not a partitioned topic). As in Pulsar, such a name without a partitioned parent is an ordinary
    topic (a producer may create `bar-partition-3` when there is no partitioned `bar`); under a
    partitioned parent it is a partition if its index is in range, and refused otherwise."""
    if name.partition_index < 0 or parent_partitions <= 0:
        return PartitionRole.ORDINARY
    if name.partition_index < parent_partitions:
        return PartitionRole.PARTITION
    return PartitionRole.OUT_OF_RANGE


@dataclass(frozen=True, slots=True)
class TopicPattern:
    """A topics pattern: a regular expression over the topics of one namespace.

    The namespace is read as in a topic name (`x.*` -> persistent://public/default/x.*); what
    follows it is the regular expression, not checked here. `regex` is the full-name expression."""

    domain: str
    tenant: str
    namespace_part: str
    local_regex: str

    @classmethod
    def parse(cls, pattern: str) -> TopicPattern:
        rest, domain = pattern.strip(), "persistent"
        if "://" in rest:
            domain, rest = rest.split("://", 1)
        parts = rest.split("/", 2)
        if len(parts) < 3:
            return cls(domain, "public", "default", rest)
        return cls(domain, parts[0], parts[1], parts[2])

    @property
    def namespace(self) -> str:
        return f"{self.tenant}/{self.namespace_part}"

    @property
    def regex(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace_part}/{self.local_regex}"
