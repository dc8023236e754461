"""Run the official Python client's tests/auto_cluster_failover_test.py against two velamq nodes.

    python benchmarks/auto_cluster_failover_suite.py --test-file PATH/auto_cluster_failover_test.py

The test (apache/pulsar-client-python, not part of this repository) starts two Pulsar standalone
containers; this launcher starts two `velamq standalone` processes in their place, on the ports and
with the cluster names the test expects (pulsar://localhost:16650 + http://localhost:18080 as
"standalone-0", :26650 + :28080 as "standalone-1"), and gives the test what it uses of a container:
`get_wrapped_container().kill(signal=...)` sends the signal to the broker process, `.logs()` is its
output, `stop()` stops it. The test then runs unchanged with unittest; the exit code is its result.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal as signals
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Any

from velamq.testing import BrokerProcess

NODES = (("standalone-0", 16650, 18080), ("standalone-1", 26650, 28080))


class _Wrapped:
    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker

    def kill(self, signal: str = "SIGKILL") -> None:
        pid = self.broker.pid
        if pid is not None:
            os.kill(pid, getattr(signals, signal))

    def logs(self) -> bytes:
        return self.broker.output.encode()


class NodeShim:
    """What the test uses of a testcontainers DockerContainer, for one velamq process."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker

    def get_wrapped_container(self) -> _Wrapped:
        return _Wrapped(self.broker)

    def stop(self) -> None:
        self.broker.stop()


def _start(root: Path, name: str, port: int, http_port: int) -> BrokerProcess:
    broker = BrokerProcess(root / name, ["--cluster-name", name])
    broker.broker_port, broker.http_port = port, http_port
    broker.start()
    return broker


def velamq_case(base: type[Any], root: Path) -> type[Any]:
    """The test's TestCase with its containers replaced by velamq processes."""

    class OnVelamq(base):  # type: ignore[misc, valid-type]
        @classmethod
        def setUpClass(cls) -> None:
            nodes = [NodeShim(_start(root, name, port, http)) for name, port, http in NODES]
            cls.primary_container, cls.secondary_container = nodes
            cls._configure_cluster(cls.PRIMARY_ADMIN_URL, cls.PRIMARY_URL, "standalone-0")
            cls._configure_cluster(cls.SECONDARY_ADMIN_URL, cls.SECONDARY_URL, "standalone-1")

    OnVelamq.__name__ = base.__name__ + "OnVelamq"
    return OnVelamq


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--test-file", type=Path, required=True, help="auto_cluster_failover_test.py")
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("auto_cluster_failover_test", args.test_file)
    if spec is None or spec.loader is None:
        parser.error(f"cannot load {args.test_file}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    root = Path(tempfile.mkdtemp(prefix="velamq-failover-suite-"))
    try:
        suite = unittest.TestSuite()
        loader = unittest.TestLoader()
        for name in dir(module):
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, unittest.TestCase) and value.__module__ == module.__name__:
                suite.addTests(loader.loadTestsFromTestCase(velamq_case(value, root)))
        result = unittest.TextTestRunner(verbosity=2).run(suite)
        print(f"score: {result.testsRun - len(result.failures) - len(result.errors) - len(result.skipped)}"
              f"/{result.testsRun} passed")
        return 0 if result.wasSuccessful() else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
