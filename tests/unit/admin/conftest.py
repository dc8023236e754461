"""Fixtures of the admin tests; the harness itself is in admin_harness.py (importable by name)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_harness import Admin, start_admin


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[Admin]:
    yield from start_admin(tmp_path)
