"""The admin REST calls the connector makes, through velamq.client.AdminClient.

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

Topic names are velamq._topic_name.TopicName, Pulsar's rules (WC-2): `x` is
`persistent://public/default/x`, `t/ns/x` is `persistent://t/ns/x`, and partition i of topic x is
`x-partition-i`.
"""

from __future__ import annotations

from velamq._topic_name import TopicName
from velamq.client import AdminClient, AdminError, ConnectionSecurity
from velamq.spark._offsets import EARLIEST, LedgerMap, PartitionOffset


def parse_topic(name: str) -> TopicName:
    """A topic name as a user writes it in an option (surrounding blanks ignored)."""
    return TopicName.parse(name.strip())


class ConnectorAdmin:
    """The admin REST calls of the connector, over one AdminClient. Stateless, so picklable: the
    driver and every executor make their own, with the query's authentication and TLS settings."""

    def __init__(self, admin_url: str, security: ConnectionSecurity | None = None) -> None:
        self.client = AdminClient(admin_url, security=security)

    def _get_unless_missing(self, path: str, topic: TopicName | None = None) -> object:
        """The JSON answer of a GET, None when the server answers 404. For a per-partition call on
        a name planned as a plain topic, 405 ("not allowed on a partitioned topic") is None too:
        the topic was created partitioned after the plan listed it (the plan of the next trigger
        lists its partitions), as Pulsar answers for a partitioned topic's own name."""
        try:
            return self.client.request("GET", path)
        except AdminError as exc:
            if exc.status == 404 or (exc.status == 405 and topic is not None and topic.partition_index < 0):
                return None
            raise

    # ---- topics --------------------------------------------------------------------------------

    def partitions(self, topic: TopicName) -> int:
        """The partition count of a partitioned topic; 0 for a non-partitioned (or unknown) one."""
        answer = self.client.request("GET", AdminClient.topic_path(topic, "partitions"))
        return int(answer.get("partitions", 0)) if isinstance(answer, dict) else 0

    def topics_of_namespace(self, domain: str, tenant: str, namespace: str) -> list[TopicName]:
        """Every topic of the namespace, partitioned ones by their own name (not their partitions)."""
        base = AdminClient.path(domain, tenant, namespace)
        names: set[TopicName] = set()
        for path in (base, f"{base}/partitioned"):
            for name in self.client.request("GET", path) or []:
                topic = TopicName.parse(name).partitioned_parent
                if not topic.local_name.startswith("__"):  # Pulsar's system topics (__change_events ...)
                    names.add(topic)
        return sorted(names, key=str)

    def last_message_id(self, partition: TopicName) -> PartitionOffset | None:
        """The last stored entry of one partition (whole entry), None if the topic does not exist.

        An empty topic answers its current ledger with entry -1: "before the first entry"."""
        answer = self._get_unless_missing(AdminClient.topic_path(partition, "lastMessageId"), partition)
        if not isinstance(answer, dict):
            return None
        ledger_id, entry_id = int(answer["ledgerId"]), int(answer["entryId"])
        if ledger_id < 0:
            return EARLIEST
        return PartitionOffset(ledger_id, entry_id)

    def ledgers(self, partition: TopicName) -> LedgerMap | None:
        """The ledgers of one partition and their entry counts, None if the topic does not exist."""
        stats = self._get_unless_missing(AdminClient.topic_path(partition, "internalStats"), partition)
        return LedgerMap.from_internal_stats(stats) if isinstance(stats, dict) else None

    def ledger_flags(self, partition: TopicName) -> list[tuple[int, int, bool]]:
        """(ledger id, entries, offloaded) of the partition's ledgers, oldest first (docs/offload.md)."""
        stats = self._get_unless_missing(AdminClient.topic_path(partition, "internalStats"), partition)
        if not isinstance(stats, dict):
            return []
        return [(int(info["ledgerId"]), int(info.get("entries") or 0), bool(info.get("offloaded")))
                for info in stats.get("ledgers") or []]

    # ---- the query's durable cursor ------------------------------------------------------------

    def move_cursor(self, partition: TopicName, subscription: str, offset: PartitionOffset) -> None:
        """Put the subscription's cursor so that `offset`'s entry is the next one to read (kept by
        retention), creating the subscription there if it does not exist yet."""
        base = AdminClient.topic_path(partition, "subscription", subscription)
        if offset.is_earliest:
            # A partition the query has read nothing of: the cursor starts at the beginning.
            try:
                self.client.request("PUT", base, {"ledgerId": -1, "entryId": -1})
            except AdminError as exc:
                if exc.status != 409:
                    raise
            return
        target = {"ledgerId": offset.ledger_id, "entryId": max(offset.entry_id, 0)}
        try:
            self.client.request("POST", f"{base}/resetcursor", target)
        except AdminError as exc:
            if exc.status != 404:
                raise
            self.client.request("PUT", base, target)

    # ---- deduplication (the sink) --------------------------------------------------------------

    def deduplication_enabled(self, topic: TopicName) -> bool | None:
        """Topic-level setting; None when the topic does not exist."""
        try:
            answer = self.client.request("GET", AdminClient.topic_path(topic, "deduplicationEnabled"))
        except AdminError as exc:
            if exc.status == 404:
                return None
            raise
        return answer is True

    def enable_deduplication(self, topic: TopicName) -> None:
        self.client.request("POST", AdminClient.topic_path(topic, "deduplicationEnabled"), True)

    def namespace_deduplication(self, topic: TopicName) -> bool:
        """The namespace's setting, for brokers where topic-level policies are disabled."""
        path = AdminClient.path("namespaces", topic.tenant, *topic.namespace_part.split("/"), "deduplication")
        return self.client.request("GET", path) is True

