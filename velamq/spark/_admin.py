"""Topic names and the admin REST calls the connector makes.

Every call is one of Apache Pulsar's admin v2 paths, so a job pointed at a Pulsar cluster's
`admin.url` works unchanged (SP-5). The connector never imports velamq's broker or admin code:

    GET    /admin/v2/persistent/{t}/{ns}                        topics of a namespace (partitions included)
    GET    /admin/v2/persistent/{t}/{ns}/partitioned            partitioned topics of a namespace
    GET    /admin/v2/persistent/{t}/{ns}/{topic}/partitions     {"partitions": N} (0: not partitioned)
    GET    .../{partition}/lastMessageId                        {"ledgerId", "entryId", ...}; 404 unknown
    GET    .../{partition}/internalStats                        ledgers and lastConfirmedEntry
    POST   .../{partition}/subscription/{sub}/resetcursor       body {"ledgerId", "entryId"}: the commit
    PUT    .../{partition}/subscription/{sub}                   create the query's durable cursor
    GET    .../{topic}/deduplicationEnabled                     topic-level deduplication (null if unset)
    POST   .../{topic}/deduplicationEnabled                     body true

Topic names follow Pulsar (WC-2): `x` is `persistent://public/default/x`, `t/ns/x` is
`persistent://t/ns/x`, and partition i of topic x is `x-partition-i`.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from velamq.spark._positions import EARLIEST, LedgerMap, Position

admin_timeout_s = 30.0
PARTITION_SUFFIX = "-partition-"
_PARTITION_RE = re.compile(r"^(.*)-partition-(\d+)$")


class AdminError(RuntimeError):
    """An admin REST call failed: carries the HTTP status (0 when the server could not be reached)."""

    def __init__(self, status: int, method: str, url: str, reason: str) -> None:
        super().__init__(f"{method} {url}: HTTP {status}: {reason}" if status else f"{method} {url}: {reason}")
        self.status = status


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic or one partition of a partitioned topic."""

    domain: str
    tenant: str
    namespace: str
    local: str

    @classmethod
    def parse(cls, name: str) -> Topic:
        name = name.strip()
        domain = "persistent"
        rest = name
        if "://" in name:
            domain, rest = name.split("://", 1)
        parts = rest.split("/")
        if len(parts) == 1:
            parts = ["public", "default", parts[0]]
        if len(parts) != 3 or not all(parts) or domain not in ("persistent", "non-persistent"):
            raise ValueError(f"invalid topic name {name!r}")
        return cls(domain, parts[0], parts[1], parts[2])

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local}"

    def partition(self, index: int) -> Topic:
        return Topic(self.domain, self.tenant, self.namespace, f"{self.local}{PARTITION_SUFFIX}{index}")

    @property
    def partition_index(self) -> int:
        """-1 unless the name ends in -partition-<n>."""
        match = _PARTITION_RE.match(self.local)
        return int(match.group(2)) if match else -1

    @property
    def parent(self) -> Topic:
        """The partitioned topic a partition belongs to (itself for any other name)."""
        match = _PARTITION_RE.match(self.local)
        return Topic(self.domain, self.tenant, self.namespace, match.group(1)) if match else self

    @property
    def rest_path(self) -> str:
        return f"{self.domain}/{self.tenant}/{self.namespace}/{urllib.parse.quote(self.local, safe='')}"


class AdminClient:
    """Blocking, stateless (picklable) client of the admin REST API."""

    def __init__(self, admin_url: str, timeout_s: float = admin_timeout_s) -> None:
        self.admin_url = admin_url.rstrip("/")
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """JSON answer of one call (None for an empty body); AdminError for any status >= 400."""
        url = f"{self.admin_url}{path}"
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise AdminError(exc.code, method, url, _reason(exc)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AdminError(0, method, url, f"cannot reach the admin API ({reason})") from None
        return json.loads(raw) if raw.strip() else None

    # ---- topics --------------------------------------------------------------------------------

    def partitions(self, topic: Topic) -> int:
        """The partition count of a partitioned topic; 0 for a non-partitioned (or unknown) one."""
        answer = self.request("GET", f"/admin/v2/{topic.rest_path}/partitions")
        return int(answer.get("partitions", 0)) if isinstance(answer, dict) else 0

    def topics_of_namespace(self, domain: str, tenant: str, namespace: str) -> list[Topic]:
        """Every topic of the namespace, partitioned ones by their own name (not their partitions)."""
        base = f"/admin/v2/{domain}/{tenant}/{namespace}"
        names: set[Topic] = set()
        for path in (base, f"{base}/partitioned"):
            for name in self.request("GET", path) or []:
                topic = Topic.parse(name).parent
                if not topic.local.startswith("__"):  # Pulsar's system topics (__change_events ...)
                    names.add(topic)
        return sorted(names, key=str)

    def last_message_id(self, partition: Topic) -> Position | None:
        """The last stored entry of one partition (whole entry), None if the topic does not exist.

        An empty topic answers its current ledger with entry -1: "before the first entry"."""
        try:
            answer = self.request("GET", f"/admin/v2/{partition.rest_path}/lastMessageId")
        except AdminError as exc:
            if exc.status == 404:
                return None
            raise
        ledger_id, entry_id = int(answer["ledgerId"]), int(answer["entryId"])
        if ledger_id < 0:
            return EARLIEST
        return Position(ledger_id, entry_id)

    def ledgers(self, partition: Topic) -> LedgerMap | None:
        """The ledgers of one partition and their entry counts, None if the topic does not exist."""
        try:
            stats = self.request("GET", f"/admin/v2/{partition.rest_path}/internalStats")
        except AdminError as exc:
            if exc.status == 404:
                return None
            raise
        return LedgerMap.from_internal_stats(stats)

    # ---- the query's durable cursor ------------------------------------------------------------

    def move_cursor(self, partition: Topic, subscription: str, position: Position) -> None:
        """Put the subscription's cursor so that `position`'s entry is the next one to read (kept by
        retention), creating the subscription there if it does not exist yet."""
        sub = urllib.parse.quote(subscription, safe="")
        base = f"/admin/v2/{partition.rest_path}/subscription/{sub}"
        if position.is_earliest:
            # A partition the query has read nothing of: the cursor starts at the beginning.
            try:
                self.request("PUT", base, {"ledgerId": -1, "entryId": -1})
            except AdminError as exc:
                if exc.status != 409:
                    raise
            return
        target = {"ledgerId": position.ledger_id, "entryId": max(position.entry_id, 0)}
        try:
            self.request("POST", f"{base}/resetcursor", target)
        except AdminError as exc:
            if exc.status != 404:
                raise
            self.request("PUT", base, target)

    # ---- deduplication (the sink) --------------------------------------------------------------

    def deduplication_enabled(self, topic: Topic) -> bool | None:
        """Topic-level setting; None when the topic does not exist."""
        try:
            answer = self.request("GET", f"/admin/v2/{topic.rest_path}/deduplicationEnabled")
        except AdminError as exc:
            if exc.status == 404:
                return None
            raise
        return answer is True

    def enable_deduplication(self, topic: Topic) -> None:
        self.request("POST", f"/admin/v2/{topic.rest_path}/deduplicationEnabled", True)

    def namespace_deduplication(self, topic: Topic) -> bool:
        """The namespace's setting, for brokers where topic-level policies are disabled."""
        answer = self.request("GET", f"/admin/v2/namespaces/{topic.tenant}/{topic.namespace}/deduplication")
        return answer is True


def _reason(exc: urllib.error.HTTPError) -> str:
    try:
        body = exc.read().decode("utf-8", "replace")
    except OSError:
        return str(exc.reason)
    try:
        parsed = json.loads(body)
    except ValueError:
        return body.strip()[:500] or str(exc.reason)
    if isinstance(parsed, dict) and "reason" in parsed:
        return str(parsed["reason"])
    return body.strip()[:500]
