"""The web console's pages (OP-3): read-only views of tenants, namespaces, topics and rates.

    /                                              overview: broker rates (chart), busiest topics,
                                                   tenants and namespaces with their topic counts,
                                                   with several workers each worker (up or not)
    /console/namespaces/{t}/{ns}?q=&page=          a namespace's topics, searched and paged in the
                                                   metadata store (never the whole list), with the
                                                   figures of those that are loaded
    /console/topics/{domain}/{t}/{ns}/{topic}      one topic: the figures of its /stats, its rate
                                                   chart, producers, subscriptions and consumers;
                                                   for a partitioned topic, its partitions

The functions here turn data into HTML and nothing else (the routes in _routes_web.py fetch the
data); every string from a client is escaped (see _console_html.py). A topic's figures come from the
same JSON as GET /admin/v2/.../stats (_stats_json.topic_stats_json), each cell naming its field in
data-stat, so what the console shows is what the REST API answers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from velamq._topic_name import TopicName
from velamq.admin._console_charts import rate_chart
from velamq.admin._console_data import WorkerStatus
from velamq.admin._console_html import (
    card,
    esc,
    fmt_bytes,
    fmt_rate,
    link,
    namespace_href,
    page,
    seg,
    stat,
    table,
    topic_href,
)
from velamq.admin._console_replication import topic_section
from velamq.broker import BrokerOverview, RateSeries, TopicMetrics
from velamq.metadata import TopicListing

page_size_default: Final = 50
# Page links shown around the current one (the rest are reached by first/last or by searching).
pager_radius: Final = 3


@dataclass(frozen=True, slots=True)
class Frame:
    """What every page shows in its header, and whether it reloads itself."""

    service_url: str
    web_service_url: str
    refresh_s: int | None = None

    def page(self, title: str, body: Sequence[str], crumbs: Sequence[tuple[str, str | None]], href: str) -> str:
        return page(
            title, body, crumbs=crumbs, service_url=self.service_url, web_service_url=self.web_service_url,
            refresh_s=self.refresh_s, self_href=href,
        )


def _namespace_crumbs(namespace: str) -> list[tuple[str, str | None]]:
    return [("overview", "/"), (namespace, namespace_href(namespace))]


# ---- overview ---------------------------------------------------------------------------------


def overview_page(
    frame: Frame, overview: BrokerOverview, namespaces: Sequence[tuple[str, int, int]], namespaces_total: int,
    workers: Sequence[WorkerStatus] = (), note: str = "",
) -> str:
    """`namespaces`: (namespace, topics, loaded topics), those shown; namespaces_total: all there are.
    `workers`: the workers of a broker of several (none: one process); `note`: which did not answer."""
    cards = [
        card("connections", str(overview.connections_active), "connectionsActive"),
        card("topics loaded", str(overview.topics_loaded), "topicsLoaded"),
        card("namespaces", str(namespaces_total), "namespaces"),
    ]
    if overview.rate_history.msg_in:
        cards += [
            card("msg/s in", fmt_rate(overview.rate_history.msg_in[-1]), "msgRateIn"),
            card("msg/s out", fmt_rate(overview.rate_history.msg_out[-1]), "msgRateOut"),
        ]
    busiest = [
        f"<tr><td class='name'>{link(topic_href(name), name)}</td><td>{esc(fmt_rate(rate_in))}</td>"
        f"<td>{esc(fmt_rate(rate_out))}</td></tr>"
        for name, rate_in, rate_out in overview.busiest_topics
    ]
    ns_rows = [
        f"<tr data-namespace='{esc(ns)}'><td class='name'>{_namespace_link(ns)}</td>"
        f"<td data-stat='topics'>{topics}</td><td data-stat='loaded'>{loaded}</td></tr>"
        for ns, topics, loaded in namespaces
    ]
    body = [
        *_note(note),
        f"<div class='cards'>{''.join(cards)}</div>",
        "<h2>Messages per second, whole broker</h2>",
        rate_chart(overview.rate_history, "msg/s in and out, whole broker"),
        "<h2>Busiest topics</h2>",
        table(["topic", "msg/s in", "msg/s out"], busiest, cls="busiest", empty="no traffic at the last sample"),
        "<h2>Tenants and namespaces</h2>",
        table(["namespace", "topics", "loaded"], ns_rows, cls="namespaces", empty="no namespace"),
        *_workers_section(workers),
    ]
    if namespaces_total > len(namespaces):
        body.append(f"<p class='note'>{namespaces_total - len(namespaces)} more namespaces are not shown.</p>")
    return frame.page("Overview", body, [], "/")


def _note(note: str) -> list[str]:
    """A page's warning line (e.g. the workers that did not answer), or nothing."""
    return [f"<p class='note missing-workers'>{esc(note)}</p>"] if note else []


def _workers_section(workers: Sequence[WorkerStatus]) -> list[str]:
    if not workers:
        return []
    rows = [
        f"<tr data-worker='{w.worker_id}'><td class='name'>{w.worker_id}</td>{stat('address', w.web_service_url)}"
        f"{stat('pid', '-' if w.pid is None else str(w.pid))}"
        f"{stat('topicsLoaded', '-' if w.topics_loaded is None else str(w.topics_loaded))}"
        f"{stat('up', w.up)}</tr>"
        for w in workers
    ]
    answered = sum(1 for w in workers if w.up)
    return [
        f"<h2>Workers ({answered} of {len(workers)} answered)</h2>",
        table(["worker", "address", "pid", "topics loaded", "up"], rows, cls="workers"),
    ]


def _namespace_link(namespace: str) -> str:
    # V1 namespaces (tenant/cluster/ns) have no console page: shown, not linked.
    return link(namespace_href(namespace), namespace) if namespace.count("/") == 1 else esc(namespace)


# ---- a namespace's topics ---------------------------------------------------------------------


def _kind(name: str, partitions: int) -> str:
    parsed = TopicName.parse(name)
    if partitions > 0:
        return f"partitioned ({partitions})"
    return "partition" if parsed.partition_index >= 0 else parsed.domain


def _topic_row(name: str, partitions: int, m: TopicMetrics | None) -> str:
    local = TopicName.parse(name).local_name
    name_cell = (
        f"<td class='name'>{link(topic_href(name), local)}</td><td class='text'>{esc(_kind(name, partitions))}</td>"
    )
    if m is None:
        status = "-" if partitions > 0 else "not loaded"
        return (
            f"<tr class='muted' data-topic='{esc(name)}'>{name_cell}<td class='text' colspan='8'>{status}</td></tr>"
        )
    return (
        f"<tr data-topic='{esc(name)}'>{name_cell}"
        f"{stat('producers', m.producers)}{stat('consumers', m.consumers)}"
        f"{stat('subscriptions', len(m.subscriptions))}{stat('msgRateIn', m.msg_rate_in, rate=True)}"
        f"{stat('msgRateOut', m.msg_rate_out, rate=True)}{stat('msgBacklog', m.backlog_entries)}"
        f"{stat('backlogSize', m.backlog_size_bytes, bytes_=True)}"
        f"{stat('storageSize', m.storage_size_bytes, bytes_=True)}"
        "</tr>"
    )


def _pager(listing: TopicListing, page_size: int) -> str:
    pages = max(1, math.ceil(listing.total / page_size))
    current = listing.offset // page_size + 1
    ns, search = listing.namespace, listing.search

    def to(number: int, label_html: str, rel: str) -> str:
        return f"<a rel='{rel}' data-page='{number}' href='{esc(namespace_href(ns, search, number))}'>{label_html}</a>"

    parts = []
    if current > 1:
        parts += [to(1, "&laquo; first", "first"), to(current - 1, "&lsaquo; previous", "prev")]
    for number in range(max(1, current - pager_radius), min(pages, current + pager_radius) + 1):
        parts.append(
            f"<span class='current' data-page='{number}'>{number}</span>" if number == current
            else to(number, str(number), "page")
        )
    if current < pages:
        parts += [to(current + 1, "next &rsaquo;", "next"), to(pages, "last &raquo;", "last")]
    return f"<div class='pager'>{''.join(parts)}</div>"


def namespace_page(
    frame: Frame, listing: TopicListing, metrics: Mapping[str, TopicMetrics], page_size: int, href: str,
    extra: Sequence[str] = (), note: str = "",
) -> str:
    """One page of the namespace's topics (already cut by the metadata store); `extra`: sections
    after them (geo-replication's); `note`: which workers did not answer."""
    ns = listing.namespace
    first = listing.offset + 1 if listing.topics else 0
    last = listing.offset + len(listing.topics)
    what = f"matching '{listing.search}'" if listing.search else "in all"
    summary = f"Topics {first} to {last} of {listing.total} {what}"
    form = (
        f"<form class='search' method='get' action='{esc(namespace_href(ns))}'>"
        f"<input type='search' name='q' value='{esc(listing.search)}' placeholder='part of a topic name'>"
        " <button type='submit'>Search</button>"
        + (f" {link(namespace_href(ns), 'clear')}" if listing.search else "")
        + "</form>"
    )
    rows = [_topic_row(name, partitions, metrics.get(name)) for name, partitions in listing.topics]
    headers = ["topic", "kind", "producers", "consumers", "subscriptions", "msg/s in", "msg/s out",
               "backlog", "backlog size", "storage"]
    body = [
        *_note(note),
        form,
        f"<p class='summary' data-total='{listing.total}'>{esc(summary)}</p>",
        _pager(listing, page_size),
        table(headers, rows, cls="topics", empty="no topic" + (" matches" if listing.search else "")),
        _pager(listing, page_size),
        "<p class='note'>Figures are shown for loaded topics; the console never loads a topic to list it.</p>",
        *extra,
    ]
    return frame.page(f"Namespace {ns}", body, [("overview", "/"), (ns, None)], href)


# ---- one topic --------------------------------------------------------------------------------


def _history_note(history: RateSeries | None, interval_s: float) -> str:
    if history is None:
        return f"<p class='note'>No traffic in the last minutes (the rate history samples every {interval_s:g} s).</p>"
    return rate_chart(history, "msg/s in and out")


def topic_page(
    frame: Frame, topic: str, stats: Mapping[str, Any], history: RateSeries | None, interval_s: float, href: str,
    served_by: str = "",
) -> str:
    """`stats` is the topic's /stats JSON (Pulsar's TopicStats); `served_by`: which worker's figures."""
    name = TopicName.parse(topic)
    summary_rows = [
        "<tr>" + "".join([
            stat("msgRateIn", stats["msgRateIn"], rate=True), stat("msgRateOut", stats["msgRateOut"], rate=True),
            stat("msgThroughputIn", stats["msgThroughputIn"], bytes_=True),
            stat("msgThroughputOut", stats["msgThroughputOut"], bytes_=True),
            stat("msgInCounter", stats["msgInCounter"]), stat("msgOutCounter", stats["msgOutCounter"]),
            stat("storageSize", stats["storageSize"], bytes_=True),
            stat("backlogSize", stats["backlogSize"], bytes_=True),
            stat("averageMsgSize", round(stats["averageMsgSize"], 1)),
            stat("deduplicationStatus", stats["deduplicationStatus"]),
        ]) + "</tr>"
    ]
    summary_headers = ["msg/s in", "msg/s out", "bytes/s in", "bytes/s out", "messages in", "messages out",
                       "storage", "backlog size", "avg message", "dedup"]
    summary = table(summary_headers, summary_rows, cls="summary", named=False)
    producers = [
        f"<tr data-producer='{esc(p['producerName'])}'><td class='name'>{esc(p['producerName'])}</td>"
        f"{stat('accessMode', p['accessMode'])}{stat('msgRateIn', p['msgRateIn'], rate=True)}"
        f"{stat('msgThroughputIn', p['msgThroughputIn'], bytes_=True)}{stat('address', p['address'])}"
        f"{stat('connectedSince', p['connectedSince'])}</tr>"
        for p in stats["publishers"]
    ]
    subscriptions = [
        f"<tr data-subscription='{esc(sub_name)}'><td class='name'>{esc(sub_name)}</td>"
        f"{stat('type', s['type'])}{stat('msgBacklog', s['msgBacklog'])}"
        f"{stat('backlogSize', s['backlogSize'], bytes_=True)}{stat('unackedMessages', s['unackedMessages'])}"
        f"{stat('msgRateOut', s['msgRateOut'], rate=True)}{stat('msgOutCounter', s['msgOutCounter'])}"
        f"{stat('consumers', len(s['consumers']))}{stat('markDeletePosition', s['markDeletePosition'])}</tr>"
        for sub_name, s in sorted(stats["subscriptions"].items())
    ]
    consumers = [
        f"<tr data-subscription='{esc(sub_name)}' data-consumer='{esc(c['consumerName'])}'>"
        f"<td class='name'>{esc(c['consumerName'])}</td><td class='name'>{esc(sub_name)}</td>"
        f"{stat('availablePermits', c['availablePermits'])}{stat('unackedMessages', c['unackedMessages'])}"
        f"{stat('msgRateOut', c['msgRateOut'], rate=True)}{stat('msgOutCounter', c['msgOutCounter'])}"
        f"{stat('isActive', c['isActive'])}{stat('address', c['address'])}"
        f"{stat('connectedSince', c['connectedSince'])}</tr>"
        for sub_name, s in sorted(stats["subscriptions"].items())
        for c in s["consumers"]
    ]
    body = [
        summary,
        "<h2>Messages per second</h2>",
        _history_note(history, interval_s),
        f"<h2>Producers ({len(producers)})</h2>",
        table(["producer", "access mode", "msg/s in", "bytes/s in", "address", "connected since"], producers,
              cls="producers"),
        f"<h2>Subscriptions ({len(subscriptions)})</h2>",
        table(["subscription", "type", "backlog", "backlog size", "unacked", "msg/s out", "messages out",
               "consumers", "mark-delete"], subscriptions, cls="subscriptions"),
        f"<h2>Consumers ({len(consumers)})</h2>",
        table(["consumer", "subscription", "permits", "unacked", "msg/s out", "messages out", "active", "address",
               "connected since"], consumers, cls="consumers"),
        topic_section(stats.get("replication", {})),
        f"<p class='note'>The same figures as {link(_stats_path(name), 'GET …/stats')}.</p>",
        *([f"<p class='note served-by'>{esc(served_by)}</p>"] if served_by else []),
    ]
    crumbs = [*_namespace_crumbs(name.namespace), (name.local_name, None)]
    return frame.page(topic, body, crumbs, href)


def partitioned_page(
    frame: Frame, topic: str, partitions: int, metrics: Mapping[str, TopicMetrics], href: str, note: str = ""
) -> str:
    """A partitioned topic: its partitions, with the figures of the loaded ones (`note`: which
    workers did not answer)."""
    name = TopicName.parse(topic)
    rows = [_topic_row(str(p), 0, metrics.get(str(p))) for p in (name.partition(i) for i in range(partitions))]
    headers = ["partition", "kind", "producers", "consumers", "subscriptions", "msg/s in", "msg/s out",
               "backlog", "backlog size", "storage"]
    total_in = sum(m.msg_rate_in for m in metrics.values())
    total_out = sum(m.msg_rate_out for m in metrics.values())
    storage = sum(m.storage_size_bytes for m in metrics.values())
    body = [
        *_note(note),
        "<div class='cards'>" + card("partitions", str(partitions), "partitions")
        + card("msg/s in", fmt_rate(total_in)) + card("msg/s out", fmt_rate(total_out))
        + card("storage (loaded)", fmt_bytes(storage)) + "</div>",
        table(headers, rows, cls="topics"),
    ]
    crumbs = [*_namespace_crumbs(name.namespace), (name.local_name, None)]
    return frame.page(topic, body, crumbs, href)


def not_found_page(frame: Frame, what: str, href: str) -> str:
    return message_page(frame, "Not found", what, href)


def message_page(frame: Frame, title: str, what: str, href: str) -> str:
    return frame.page(title, [f"<p>{esc(what)}</p>", f"<p>{link('/', 'back to the overview')}</p>"],
                      [("overview", "/")], href)


def _stats_path(name: TopicName) -> str:
    return f"/admin/v2/{name.domain}/{seg(name.tenant)}/{seg(name.namespace_part)}/{seg(name.local_name)}/stats"
