"""The Spark data source over a broker of two workers (issue 23): a partitioned topic whose
partitions live on different workers is read whole, through the service and admin URLs only."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from spark_helpers import create_partitioned, payload, produce, source_options

from velamq._bundles import NamespaceBundles, default_owner
from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(600)



def test_batch_read_of_partitions_on_two_workers(spark: Any, workers2: BrokerProcess) -> None:
    topic = f"workers-{uuid.uuid4().hex[:8]}"
    full = f"persistent://public/default/{topic}"
    bundles = NamespaceBundles.even(4)
    owners = {default_owner("public/default", bundles.index_of(f"{full}-partition-{i}"), 2) for i in range(6)}
    assert owners == {0, 1}  # the partitions are served by both workers
    create_partitioned(workers2.admin_url, topic, 6)
    n = 6_000
    produce(workers2.service_url, topic, range(n))
    rows = spark.read.format("velamq").options(**source_options(workers2, topic=topic)).load().collect()
    assert sorted(r.value for r in rows) == sorted(payload(i) for i in range(n))
    assert {r.partition for r in rows} == set(range(6))
