"""Small modules with one job, classes that fit in a head (docs/architecture.md, "Style"): no
module of velamq over 600 lines, no class over 350. A change that grows past either splits first."""

from __future__ import annotations

import ast
from pathlib import Path

import velamq

PACKAGE_DIR = Path(velamq.__file__).parent
module_lines_max = 600
class_lines_max = 350


def _sources() -> list[Path]:
    return [p for p in sorted(PACKAGE_DIR.rglob("*.py")) if not p.name.endswith("_pb2.py")]


def test_no_module_is_over_its_bound() -> None:
    too_long = {str(p.relative_to(PACKAGE_DIR)): n for p in _sources()
                if (n := len(p.read_text(encoding="utf-8").splitlines())) > module_lines_max}
    assert too_long == {}


def test_no_class_is_over_its_bound() -> None:
    too_long: dict[str, int] = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > class_lines_max:
                    too_long[f"{path.relative_to(PACKAGE_DIR)}:{node.name}"] = lines
    assert too_long == {}
