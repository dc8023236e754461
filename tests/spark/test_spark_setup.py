"""Spark set-up (OP-3, issue 15): a job whose Python workers lack velamq fails with a message that
names the workers' interpreter and PYSPARK_PYTHON, not with Spark's DATA_SOURCE_NOT_FOUND.

The job runs as a subprocess, as a user starts it, with PYSPARK_PYTHON pointing at a bare venv:
one that has pyspark (and py4j, which it imports) on its path, as a system Python with PySpark
would, but not velamq."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import py4j
import pyspark
from spark_helpers import HERE

import velamq.spark


def _bare_python(root: Path) -> Path:
    venv.EnvBuilder(with_pip=False).create(root)
    python = root / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    shared = root / "shared"  # only pyspark and py4j, linked from this venv
    shared.mkdir()
    for module in (pyspark, py4j):
        package = Path(module.__file__ or "").parent
        (shared / package.name).symlink_to(package)
    (Path(site) / "spark_only.pth").write_text(f"{shared}\n")
    return python


def test_workers_without_velamq_get_a_message_naming_the_interpreter(tmp_path: Path) -> None:
    bare = _bare_python(tmp_path / "bare")
    # Out of the repository (a worker's sys.path starts with its working directory), and without
    # a PYTHONPATH of the test run's own (one naming a source tree would make velamq importable).
    without_path = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    check = subprocess.run([str(bare), "-c", "import pyspark; import velamq"], capture_output=True, text=True,
                           cwd=tmp_path, env=without_path)
    assert "No module named 'velamq'" in check.stderr  # the premise: pyspark there, velamq not
    env = {**os.environ, "PYSPARK_PYTHON": str(bare), "PYTHONPATH": str(HERE)}
    job = subprocess.run([sys.executable, str(HERE / "spark_setup_job.py")], env=env, capture_output=True,
                         text=True, timeout=600, cwd=tmp_path)
    last = job.stdout.strip().splitlines()[-1] if job.stdout.strip() else job.stderr[-2000:]
    assert job.returncode == 3, last
    assert last.startswith("SETUP-ERROR"), last
    assert str(bare) in last  # which interpreter the workers run
    assert "No module named 'velamq'" in last
    assert f"PYSPARK_PYTHON={sys.executable}" in last  # what to set
    assert "DATA_SOURCE_NOT_FOUND" not in job.stdout + job.stderr


def test_register_checks_and_registers_when_the_workers_have_velamq(spark: Any) -> None:
    worker = velamq.spark.check_workers(spark)
    assert Path(worker).resolve() == Path(sys.executable).resolve()
    velamq.spark.register(spark)
