"""Merging the /metrics pages of several workers (admin/_metrics_merge.py): the merged page parses
as strict Prometheus text, every family has one HELP and one TYPE with its samples together, every
sample carries its worker's label, and no sample is lost or added."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from test_admin_api_metrics import SNAPSHOT, parse_prometheus

from velamq.admin import _metrics
from velamq.admin._metrics_merge import labelled, merge_pages, worker_up_page

_names = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)
_label_values = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
_values = st.one_of(st.integers(-(10**12), 10**12), st.floats(allow_nan=False, allow_infinity=True))


@st.composite
def _page(draw: st.DrawFn, families: list[tuple[str, str, str]]) -> str:
    """A page as velamq renders one: some of the given families, each with distinct label sets."""
    out = []
    for name, kind, help_text in families:
        if not draw(st.booleans()):
            continue
        label_sets = draw(st.lists(st.dictionaries(_names, _label_values, max_size=3), max_size=4,
                                   unique_by=lambda d: tuple(sorted(d.items()))))
        family = _metrics._Family(name, kind, help_text)
        for labels in label_sets:
            family.samples.append((tuple(sorted(labels.items())), draw(_values)))
        out.append(_metrics._render_family(family, {}))
    return "".join(out)


@st.composite
def _pages(draw: st.DrawFn) -> list[tuple[str, str]]:
    names = draw(st.lists(_names.filter(lambda n: n != "worker"), min_size=1, max_size=6, unique=True))
    families = [(n, draw(st.sampled_from(["counter", "gauge"])), draw(st.text(max_size=20))) for n in names]
    workers = draw(st.integers(1, 4))
    return [(str(w), draw(_page(families))) for w in range(workers)]


@settings(max_examples=150, deadline=None)
@given(_pages())
def test_merged_pages_parse_and_keep_every_sample_once(pages: list[tuple[str, str]]) -> None:
    merged = merge_pages(pages)
    if not any(page for _, page in pages):
        assert merged == ""
        return
    families = parse_prometheus(merged)  # strict: one TYPE, contiguous families, no duplicate series
    assert merged.count("# HELP ") == merged.count("# TYPE ") == len(families)
    wanted: Counter[tuple[str, str]] = Counter()
    for worker, page in pages:
        for name, family in parse_prometheus(page).items() if page else ():
            wanted[(name, worker)] += len(family.samples)
    got: Counter[tuple[str, str]] = Counter()
    for name, family in families.items():
        for labels in family.samples:
            assert labels[0][0] == "worker"
            got[(name, labels[0][1])] += 1
    assert got == wanted


def test_a_real_page_merged_with_itself() -> None:
    page = _metrics.render(SNAPSHOT)
    one = parse_prometheus(page)
    merged = parse_prometheus(merge_pages([("0", page), ("1", page)]))
    assert merged.keys() == one.keys()
    for name, family in one.items():
        assert merged[name].type == family.type and merged[name].help == family.help
        for labels, value in family.samples.items():
            for worker in ("0", "1"):
                assert merged[name].samples[(("worker", worker), *labels)] == value
        assert len(merged[name].samples) == 2 * len(family.samples)


def test_families_keep_the_first_pages_order_and_help() -> None:
    a = "# HELP x first\n# TYPE x gauge\nx 1\n# HELP y why\n# TYPE y counter\ny_total 2\n"
    b = "# HELP z zed\n# TYPE z gauge\nz 3\n# HELP x second\n# TYPE x gauge\nx{a=\"b\"} 4\n"
    assert merge_pages([("0", a), ("1", b)]) == (
        '# HELP x first\n# TYPE x gauge\nx{worker="0"} 1\nx{worker="1",a="b"} 4\n'
        '# HELP y why\n# TYPE y counter\ny_total{worker="0"} 2\n'
        '# HELP z zed\n# TYPE z gauge\nz{worker="1"} 3\n'
    )


def test_histogram_samples_stay_with_their_family() -> None:
    page = '# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\n'
    merged = merge_pages([("0", page), ("1", page)])
    assert merged.count("# TYPE h histogram") == 1
    assert merged.splitlines()[1:] == [
        'h_bucket{worker="0",le="1"} 1', 'h_bucket{worker="0",le="+Inf"} 2', 'h_sum{worker="0"} 3',
        'h_count{worker="0"} 2', 'h_bucket{worker="1",le="1"} 1', 'h_bucket{worker="1",le="+Inf"} 2',
        'h_sum{worker="1"} 3', 'h_count{worker="1"} 2',
    ]


def test_labelled_and_the_up_family() -> None:
    assert labelled("m 1", 'worker="2"') == 'm{worker="2"} 1'
    assert labelled("m{} 1", 'worker="2"') == 'm{worker="2"} 1'
    assert labelled('m{a="}"} 1 123', 'worker="2"') == 'm{worker="2",a="}"} 1 123'
    up = parse_prometheus(worker_up_page("c", [("0", True), ("1", False)]))["velamq_worker_metrics_up"]
    assert up.samples == {(("cluster", "c"), ("worker", "0")): 1, (("cluster", "c"), ("worker", "1")): 0}
