"""Fixtures of the Spark data source tests: one SparkSession per test module (it takes ~15 s)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from spark_helpers import new_spark


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    session = new_spark(request.module.__name__)
    yield session
    session.stop()
