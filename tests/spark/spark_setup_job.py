"""A Spark job started as a user would start it: `python job.py`, with whatever PYSPARK_PYTHON the
environment has. It calls velamq.spark.register(spark) and prints the outcome on its last line
(run by tests/spark/test_spark_setup.py)."""

from __future__ import annotations

import sys

from spark_helpers import new_spark

import velamq.spark


def main() -> int:
    spark = new_spark("velamq-setup-check")
    try:
        velamq.spark.register(spark)
    except velamq.spark.VelamqSparkSetupError as exc:
        print(f"SETUP-ERROR {exc}", flush=True)
        return 3
    finally:
        spark.stop()
    print("REGISTERED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
