"""The repository's map resolves: every requirement id it cites is defined in docs/requirements.md,
and no file points at files outside the repository.

A cited range such as `PR-4..PR-10` (also `SE-1..3`, `BR-3 to BR-8`) cites every id in it. This file
is left out of the scans, since it spells out the patterns it looks for.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "docs" / "requirements.md"
THIS_FILE = Path(__file__).resolve()

PREFIXES = "WC|PR|BR|CH|ME|CO|OC|SP|OP|SC|DP|SE|SR|OT|MW|RP|TS"
ID = re.compile(rf"\b({PREFIXES})-(\d+)\b")
RANGE = re.compile(rf"\b({PREFIXES})-(\d+)\s*(?:\.\.|\u2013|\bto\b)\s*(?:\1-)?(\d+)\b")
DEFINITION = re.compile(rf"^- \*\*(({PREFIXES})-\d+)\*\* \S")

# Where ids are cited: the code, its tests, benchmarks, examples and docs.
CITING = ["velamq", "docs", "tests", "benchmarks", "examples", "README.md", "pyspark_velamq.py"]

# Paths that only exist outside the repository, and the old way of naming a requirement's source.
OUTSIDE = {
    "a path into shared/": re.compile(r"(?<![\w/.-])shared/"),
    "the design or spec file kept outside": re.compile(r"\b(?:DESIGN|SPEC)\.md\b|\bDESIGN §"),
    "a source cited by article number": re.compile(r"\barticles? 0\d\d\b", re.IGNORECASE),
}

# Folders that are not part of the repository's content (tools' caches, the virtual env, builds).
SKIPPED_DIRS = {"__pycache__", "build", "dist", "node_modules"}
KEPT_HIDDEN_DIRS = {".ci", ".github"}


def _text_files(top: Path) -> Iterator[Path]:
    if top.is_file():
        yield top
        return
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")
                         and (not d.startswith(".") or d in KEPT_HIDDEN_DIRS)
                         and Path(folder, d) != ROOT / "data")  # the standalone broker's default data dir
        for name in sorted(files):
            path = Path(folder, name)
            if name != ".git" and path.resolve() != THIS_FILE:  # a worktree's .git is a file
                yield path


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None  # an image or a binary fixture


def cited_ids(text: str) -> set[str]:
    ids = {f"{prefix}-{int(n)}" for prefix, n in ID.findall(text)}
    for prefix, first, last in RANGE.findall(text):
        ids |= {f"{prefix}-{n}" for n in range(int(first), int(last) + 1)}
    return ids


def defined_ids() -> list[str]:
    return [m.group(1) for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines()
            if (m := DEFINITION.match(line))]


def test_cited_ids_counts_every_id_of_a_range() -> None:
    assert cited_ids("PR-4..PR-6, SE-1..3, BR-3 to BR-5, CH-7") == {
        "PR-4", "PR-5", "PR-6", "SE-1", "SE-2", "SE-3", "BR-3", "BR-4", "BR-5", "CH-7"}
    assert cited_ids("PIP-37, UTF-8, XPR-1") == set()


def test_every_id_is_defined_once() -> None:
    defined = defined_ids()
    assert len(defined) > 50
    assert [i for i, n in Counter(defined).items() if n > 1] == []


def test_every_cited_id_is_defined() -> None:
    defined = set(defined_ids())
    undefined: dict[str, list[str]] = {}
    for top in CITING:
        for path in _text_files(ROOT / top):
            text = _read(path)
            for rid in sorted(cited_ids(text or "") - defined):
                undefined.setdefault(rid, []).append(str(path.relative_to(ROOT)))
    assert undefined == {}, "cited but not defined in docs/requirements.md"


@pytest.mark.parametrize("what", sorted(OUTSIDE))
def test_no_file_points_outside_the_repository(what: str) -> None:
    pattern = OUTSIDE[what]
    hits = []
    for path in _text_files(ROOT):
        text = _read(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert hits == [], what
