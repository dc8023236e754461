"""docs/compatibility.md keeps up with what velamq serves: every broker setting of Pulsar's
standalone.conf and every admin route of pulsar-admin's common verbs is either served by velamq or
named in one of the page's two tables (settings velamq ignores, routes it does not serve), each row
with its reason. A setting or route that velamq starts to serve must leave its table, and one it
stops serving must enter it: both fail here until the page says so.
"""

from __future__ import annotations

import re
from pathlib import Path

from velamq.admin._http import HttpError
from velamq.admin._router import Router
from velamq.admin._server import build_router
from velamq.broker._config import _KEYS
from velamq.security import SECURITY_KEYS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
DATA = Path(__file__).parent / "data"

# What a route's parameters are replaced with to make a path the router can resolve.
SAMPLE_VALUES = {
    "domain": "persistent", "tenant": "public", "namespace": "default", "topic": "t", "subscription": "sub",
    "role": "role", "cluster": "standalone", "broker": "localhost:8080", "bundle": "0x00000000_0xffffffff",
    "configName": "maxProducersPerTopic", "key": "k", "value": "v", "version": "0",
}


def _lines(name: str) -> list[str]:
    return [line.strip() for line in (DATA / name).read_text().splitlines() if line.strip() and line[0] != "#"]


def _table_column(title: str) -> str:
    """The first cell of every row of the table under a heading of docs/compatibility.md."""
    text = DOCS.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    rows = text[start : end if end >= 0 else len(text)].splitlines()
    return "\n".join(row.split("|")[1] for row in rows if row.startswith("| ") and not row.startswith("| -"))


def test_every_standalone_setting_is_read_or_its_neglect_explained() -> None:
    keys = _lines("pulsar_standalone_conf_keys.txt")
    read = set(_KEYS) | set(SECURITY_KEYS)
    ignored = set(re.findall(r"`([A-Za-z0-9_]+)`", _table_column("Pulsar settings velamq ignores")))
    missing = [k for k in keys if k not in read and k not in ignored]
    stale = [k for k in keys if k in read and k in ignored]
    assert missing == [], f"add to docs/compatibility.md's ignored settings, with the reason: {missing}"
    assert stale == [], f"velamq reads these now: take them out of docs/compatibility.md's ignored settings: {stale}"
    assert ignored <= set(keys), f"not keys of standalone.conf: {sorted(ignored - set(keys))}"


def _served(router: Router, method: str, route: str) -> bool:
    """The route resolves, and to a pattern with the same literal segments (GET /brokers/version
    must not count as served by GET /brokers/{cluster})."""
    path = re.sub(r"\{(\w+)\}", lambda m: SAMPLE_VALUES.get(m.group(1), "1"), route)
    try:
        found, _ = router.resolve_route(method, tuple(part for part in path.split("/") if part))
    except HttpError:  # 404 / 405
        return False
    wanted = [part for part in route.split("/") if part]
    matched = [part for part in found.pattern.split("/") if part]
    return all(_literal_kept(w, m) for w, m in zip(wanted, matched, strict=True))


def _literal_kept(wanted: str, matched: str) -> bool:
    """A literal segment of the wanted route is matched by a literal, or by a parameter that only
    takes a few values, this one among them ({domain:persistent|non-persistent})."""
    if wanted.startswith("{") or not matched.startswith("{"):
        return True
    _, _, choices = matched[1:-1].partition(":")
    return wanted in choices.split("|")


def test_every_common_admin_route_is_served_or_its_absence_explained() -> None:
    router = build_router()
    listed = _table_column("Admin routes velamq does not serve")
    missing, stale = [], []
    for line in _lines("pulsar_admin_routes.txt"):
        verb, route = (part.strip() for part in line.split("|"))
        method, pattern = route.split(" ", 1)
        served, documented = _served(router, method, pattern), f"`{route}`" in listed
        if not served and not documented:
            missing.append(f"{verb}: {route}")
        if served and documented:
            stale.append(f"{verb}: {route}")
    assert missing == [], "add to docs/compatibility.md's routes velamq does not serve: " + "; ".join(missing)
    assert stale == [], "velamq serves these now: take them out of docs/compatibility.md: " + "; ".join(stale)
