"""Merging the /metrics pages of several workers into one Prometheus text page (format 0.0.4).

    merge_pages([("0", own_page), ("1", peer_page)]) -> one page

With several worker processes every worker's admin server answers /metrics for the whole broker
(docs/workers.md): its own page and each peer's (`/metrics?local=true`). Every sample gets the
label `worker="<id>"` (first, before the page's own labels), and each family keeps exactly one
`# HELP` and one `# TYPE` (the first page that has them wins) with all its samples together, from
every page in the order given. A family appears where it first appeared, so the page of the first
worker sets the order.

What a page may hold is what velamq renders (_metrics.py, the replication lines): `# HELP` /
`# TYPE` lines and samples `name{labels} value`, with no `worker` label of their own. Samples of
a histogram or summary (`_bucket`, `_sum`, `_count`) stay with their family. Other comments and
blank lines are dropped. Pure: text in, text out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from velamq.admin._metrics import escape_label_value

WORKER_LABEL: Final = "worker"
_NAME_RE: Final = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# Sample names that belong to the family of the TYPE line before them (histograms and summaries).
_SUFFIXES: Final = ("_bucket", "_sum", "_count")


@dataclass(slots=True)
class _Family:
    help: str | None = None
    type: str | None = None
    samples: list[str] = field(default_factory=list)


def labelled(sample: str, label: str) -> str:
    """A sample line with `label` (`worker="1"`) put first among its labels."""
    match = _NAME_RE.match(sample)
    if match is None:
        raise ValueError(f"not a sample line: {sample[:80]!r}")
    name, rest = match.group(0), sample[match.end():]
    if rest.startswith("{}"):
        return f"{name}{{{label}}}{rest[2:]}"
    if rest.startswith("{"):
        return f"{name}{{{label},{rest[1:]}"
    return f"{name}{{{label}}}{rest}"


def _family_of(sample_name: str, current: str | None) -> str:
    if current is not None and (
        sample_name == current or any(sample_name == current + suffix for suffix in _SUFFIXES)
    ):
        return current
    return sample_name


def _add_page(families: dict[str, _Family], worker: str, page: str) -> None:
    label = f'{WORKER_LABEL}="{escape_label_value(worker)}"'
    current: str | None = None
    for line in page.split("\n"):  # the format's only line end (splitlines would also cut at \r, \x85...)
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                current = parts[2]
                family = families.setdefault(current, _Family())
                text = parts[3] if len(parts) > 3 else ""
                if parts[1] == "HELP" and family.help is None:
                    family.help = text
                elif parts[1] == "TYPE" and family.type is None:
                    family.type = text
            continue
        match = _NAME_RE.match(line)
        if match is None:
            continue  # not a sample: nothing a scraper could read either
        current = _family_of(match.group(0), current)
        families.setdefault(current, _Family()).samples.append(labelled(line, label))


def merge_pages(pages: Iterable[tuple[str, str]]) -> str:
    """One page from (worker id, page text) pairs, every sample labelled with its worker."""
    families: dict[str, _Family] = {}
    for worker, page in pages:
        _add_page(families, worker, page)
    out: list[str] = []
    for name, family in families.items():
        if family.help is not None:
            out.append(f"# HELP {name} {family.help}")
        if family.type is not None:
            out.append(f"# TYPE {name} {family.type}")
        out.extend(family.samples)
    return "\n".join(out) + "\n" if out else ""


def worker_up_page(cluster: str, answered: Sequence[tuple[str, bool]]) -> str:
    """`velamq_worker_metrics_up{cluster,worker}`: 1 for each worker whose figures are in the page,
    0 for one that did not answer (its figures are missing from this scrape)."""
    c = escape_label_value(cluster)
    lines = [
        "# HELP velamq_worker_metrics_up 1 if the worker's figures are in this page, 0 if it did not answer",
        "# TYPE velamq_worker_metrics_up gauge",
        *(f'velamq_worker_metrics_up{{cluster="{c}",{WORKER_LABEL}="{escape_label_value(w)}"}} {int(up)}'
          for w, up in answered),
    ]
    return "\n".join(lines) + "\n"
