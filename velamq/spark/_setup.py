"""Checking that Spark's Python workers can run the connector (OP-3: a set-up that says what is wrong).

Spark runs the data source in Python worker processes started with PYSPARK_PYTHON (or the
`spark.pyspark.python` setting), and without either with `python3` from PATH, not with the
interpreter of the driver script. A job started as `.venv/bin/python job.py` without activating the
venv therefore has workers that lack velamq, and Spark only says DATA_SOURCE_NOT_FOUND (or, for a
source registered by hand, ModuleNotFoundError deep in a task's traceback).

check_workers(spark) runs one small task that reports the worker's interpreter and whether it can
import velamq. The task's function is built from source in a module of its own, so cloudpickle
ships it by value: unpickling it needs nothing of velamq, and it runs even where velamq is missing.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from velamq._errors import VelamqError

_PROBE_SOURCE = '''
def probe(_):
    import sys
    try:
        import velamq.spark  # noqa: F401
        error = ""
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return sys.executable, sys.version.split()[0], error
'''


class VelamqSparkSetupError(VelamqError, RuntimeError):
    """Spark's Python workers cannot import velamq (or cannot run at all)."""


def _probe() -> Any:
    namespace: dict[str, Any] = {"__name__": "velamq_spark_worker_probe"}
    exec(compile(_PROBE_SOURCE, "<velamq worker probe>", "exec"), namespace)
    return namespace["probe"]


def configured_worker_python(spark: Any) -> str:
    """The interpreter Spark starts Python workers with, as configured on the driver."""
    context = spark.sparkContext
    return str(getattr(context, "pythonExec", None) or os.environ.get("PYSPARK_PYTHON") or "python3")


def _advice(worker_python: str) -> str:
    return (f"Start the job with PYSPARK_PYTHON={sys.executable} (the driver's interpreter; also "
            f"PYSPARK_DRIVER_PYTHON if you use spark-submit), or set spark.pyspark.python to it before the "
            f"SparkSession starts, or install velamq into {worker_python} (pip install 'velamq[spark]'). "
            f"See docs/spark.md, 'Python workers'.")


def check_workers(spark: Any) -> str:
    """Run one task and make sure its Python worker imports velamq; returns the worker's interpreter.
    Raises VelamqSparkSetupError naming the interpreter and what to set when it does not."""
    configured = configured_worker_python(spark)
    try:
        executable, version, error = spark.sparkContext.parallelize([0], 1).map(_probe()).collect()[0]
    except Exception as exc:  # the worker did not even start (no pyspark there, no such file ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise VelamqSparkSetupError(
            f"Spark's Python workers ({configured}) could not run a task: {first}. {_advice(configured)}"
        ) from exc
    if error:
        raise VelamqSparkSetupError(
            f"Spark's Python workers run {executable} (Python {version}, configured as {configured!r}), which "
            f"cannot import velamq ({error}); the velamq data source cannot run there. {_advice(executable)}")
    return str(executable)
