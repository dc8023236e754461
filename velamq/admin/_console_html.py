"""The console's HTML toolkit: the page frame, escaping, links, tables and number formats.

Every string that reaches a page goes through `esc` (text and attribute values alike: quotes are
escaped too) or, inside a URL, through `seg`/`query` first. Names come from clients (topics,
subscriptions, consumers, producers, addresses) and may hold any character but "/"; nothing in a
page is ever trusted to be markup. The response also carries a Content-Security-Policy that
allows no script, no external resource and no framing at all: a string that slipped through
escaping still could not run.

The pages have no script: forms and links are plain GET requests, charts are inline SVG drawn on
the server (no external assets; the broker may run offline).
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Final
from urllib.parse import quote, urlencode

from velamq._topic_name import TopicName

CONTENT_TYPE: Final = "text/html; charset=utf-8"
# Everything inline, nothing from elsewhere, no script: the page only needs its own CSS and SVG.
SECURITY_HEADERS: Final = (
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
)

_STYLE: Final = """
body { font-family: system-ui, sans-serif; margin: 0; color: #1d2733; background: #f6f7f9; }
header { background: #22303f; color: #fff; padding: 0.6em 1.5em; display: flex; gap: 1.5em;
         align-items: baseline; flex-wrap: wrap; }
header a { color: #cfe3ff; } header .note { color: #b8c4d2; }
header .brand { font-weight: 700; font-size: 1.2em; color: #fff; }
main { padding: 1em 1.5em 3em; }
nav.crumbs { margin-bottom: 0.8em; } nav.crumbs a { color: #2160b0; }
h1 { font-size: 1.35em; margin: 0.2em 0 0.6em; word-break: break-all; }
h2 { font-size: 1.1em; margin: 1.4em 0 0.5em; }
table { border-collapse: collapse; background: #fff; margin-bottom: 1em; }
th, td { border: 1px solid #d5dae1; padding: 0.3em 0.6em; text-align: right; white-space: nowrap; }
th { background: #eceff3; font-weight: 600; }
td.name, th.name { text-align: left; font-family: ui-monospace, monospace; white-space: normal;
                   word-break: break-all; max-width: 46em; }
td.text { text-align: left; }
tr.muted td { color: #7a8594; }
.cards { display: flex; flex-wrap: wrap; gap: 0.8em; margin-bottom: 1em; }
.card { background: #fff; border: 1px solid #d5dae1; padding: 0.5em 0.9em; min-width: 8em; }
.card .label { font-size: 0.8em; color: #5d6875; } .card .value { font-size: 1.3em; font-weight: 600; }
.chart { background: #fff; border: 1px solid #d5dae1; padding: 0.4em; display: inline-block; }
.chart svg { display: block; } .note { color: #5d6875; font-size: 0.9em; }
form.search input[type=search] { width: 22em; padding: 0.3em; }
.pager { margin: 0.6em 0; } .pager a, .pager span { margin-right: 0.6em; }
.pager span.current { font-weight: 700; }
"""


def esc(value: object) -> str:
    """Text or attribute value: &, <, >, " and ' escaped."""
    return html.escape(str(value), quote=True)


def seg(value: str) -> str:
    """One URL path segment: everything but unreserved characters percent-encoded ("/" too)."""
    return quote(value, safe="")


def query(**params: object) -> str:
    """"?a=1&b=x" from the parameters that are not None or empty; "" if none."""
    kept = {k: str(v) for k, v in params.items() if v is not None and v != ""}
    return "?" + urlencode(kept) if kept else ""


def namespace_href(namespace: str, search: str = "", page: int = 1) -> str:
    tenant, _, ns = namespace.partition("/")
    return f"/console/namespaces/{seg(tenant)}/{seg(ns)}" + query(q=search, page=page if page > 1 else None)


def topic_href(topic: str) -> str:
    name = TopicName.parse(topic)
    return f"/console/topics/{name.domain}/{seg(name.tenant)}/{seg(name.namespace_part)}/{seg(name.local_name)}"


def link(href: str, text: str) -> str:
    return f"<a href='{esc(href)}'>{esc(text)}</a>"


# ---- numbers ----------------------------------------------------------------------------------


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def fmt_rate(x: float) -> str:
    """msg/s: whole numbers from 100 on, one decimal below."""
    if not math.isfinite(x):
        return "-"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}"


def stat(key: str, value: int | float | bool | str, *, bytes_: bool = False, rate: bool = False) -> str:
    """A table cell holding one figure of Pulsar's stats JSON: data-stat names it (Pulsar's field
    name), data-value is the exact value, the text is for people."""
    if isinstance(value, bool | str):
        text = str(value).lower() if isinstance(value, bool) else value
        return f"<td class='text' data-stat='{esc(key)}' data-value='{esc(text)}'>{esc(text)}</td>"
    text = fmt_bytes(value) if bytes_ else fmt_rate(value) if rate else f"{value}"
    title = f" title='{esc(value)} bytes'" if bytes_ else ""
    return f"<td data-stat='{esc(key)}' data-value='{esc(value)}'{title}>{esc(text)}</td>"


def table(
    headers: Sequence[str], rows: Iterable[str], *, cls: str = "", empty: str = "none", named: bool = True
) -> str:
    """A table, its first column a name if `named`; `rows` are ready <tr> strings (escaped by the caller)."""
    head = "".join(
        f"<th class='name'>{esc(h)}</th>" if i == 0 and named else f"<th>{esc(h)}</th>" for i, h in enumerate(headers)
    )
    body = list(rows) or [f"<tr class='muted'><td class='name' colspan='{len(headers)}'>{esc(empty)}</td></tr>"]
    cls_attr = f" class='{esc(cls)}'" if cls else ""
    return f"<table{cls_attr}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def card(label: str, value: str, key: str | None = None) -> str:
    key_attr = f" data-stat='{esc(key)}'" if key else ""
    return (
        f"<div class='card'{key_attr}><div class='label'>{esc(label)}</div>"
        f"<div class='value'>{esc(value)}</div></div>"
    )


# ---- the frame --------------------------------------------------------------------------------


def page(
    title: str,
    body: Sequence[str],
    *,
    crumbs: Sequence[tuple[str, str | None]] = (),
    service_url: str,
    web_service_url: str,
    refresh_s: int | None = None,
    self_href: str = "/",
) -> str:
    """A whole page. `crumbs` are (text, href or None); `body` is escaped HTML already.
    With refresh_s the page reloads itself (opt-in from the page: ?refresh=10)."""
    trail = " / ".join(link(href, text) if href else esc(text) for text, href in crumbs)
    refresh = f"<meta http-equiv='refresh' content='{int(refresh_s)}'>" if refresh_s else ""
    toggle_href = self_href + ("&" if "?" in self_href else "?") + f"refresh={0 if refresh_s else 10}"
    toggle = f"auto-refresh {'on' if refresh_s else 'off'} ({link(toggle_href, 'off' if refresh_s else 'every 10 s')})"
    return "\n".join([
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        refresh,
        f"<title>{esc(title)} - velamq</title><style>{_STYLE}</style></head><body>",
        f"<header><a class='brand' href='/'>velamq</a><span>broker <code>{esc(service_url)}</code></span>"
        f"<span>admin <code>{esc(web_service_url)}</code></span><a href='/metrics'>metrics</a>"
        f"<span class='note'>{toggle}</span></header>",
        "<main>",
        f"<nav class='crumbs'>{trail}</nav>" if trail else "",
        f"<h1>{esc(title)}</h1>",
        *body,
        "</main></body></html>",
    ])
