"""A PySpark data source for Pulsar-protocol topics, velamq's or an Apache Pulsar cluster's (SP-1..SP-5).

    spark.read.format("velamq").option("service.url", "pulsar://localhost:6650")
        .option("admin.url", "http://localhost:8080").option("topic", "events").load()
    spark.readStream.format("velamq")...          # offsets in the checkpoint, exactly-once replays
    df.write.format("velamq").option("topic", "out").mode("append").save()
    df.writeStream.format("velamq")...            # idempotent: producer name + sequence ids, dedup on

Installing the package registers the source with Spark (the top-level module `pyspark_velamq`
exposes it as `DefaultSource`); `register(spark)` does it by hand, e.g. where the package was
shipped with --py-files instead of installed, and checks that Spark's Python workers can import
velamq (they run PYSPARK_PYTHON, not the driver's interpreter: see check_workers). The connector
uses only velamq.client's public API and Pulsar's admin REST paths, so the same job runs against
Apache Pulsar (SP-5). See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from velamq.spark._options import VelamqOptionError
from velamq.spark._read import VelamqDataLossError
from velamq.spark._schema import VelamqSchemaError, source_schema
from velamq.spark._setup import VelamqSparkSetupError, check_workers
from velamq.spark._source import VelamqDataSource

__all__ = [
    "VelamqDataLossError",
    "VelamqDataSource",
    "VelamqOptionError",
    "VelamqSchemaError",
    "VelamqSparkSetupError",
    "check_workers",
    "register",
    "source_schema",
]


def register(spark: Any, check: bool = True) -> None:
    """Register the `velamq` format with a SparkSession (not needed when the package is installed,
    but it also checks the set-up): first one small task makes sure Spark's Python workers can
    import velamq (check_workers), and if they cannot, VelamqSparkSetupError says which interpreter
    they run and what to set (PYSPARK_PYTHON) instead of Spark's DATA_SOURCE_NOT_FOUND later."""
    if check:
        check_workers(spark)
    spark.dataSource.register(VelamqDataSource)
