"""Fixtures shared by the test tree: a real `velamq standalone` process and official-client helpers.

- `broker`: one broker per test module (start-up is cheap, OP-1), for tests that do not restart it.
- `workers2`: one broker of two worker processes per test module (docs/workers.md).
- `fresh_broker`: one broker per test, for tests that stop, kill or restart it.
- `topic`: a topic name unique to the test (derived from the test name plus a random suffix).
- `make_client`: builds `pulsar.Client`s with short operation timeouts and quiet logging, and closes
  every one of them when the test ends, whatever happened.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# interop_helpers (official-client helpers) is shared by tests outside tests/interop too, and
# wait_helpers (the one poll-until-a-condition loop) by every test directory.
sys.path.insert(0, str(Path(__file__).parent / "interop"))
sys.path.insert(0, str(Path(__file__).parent))

from velamq.testing import BrokerProcess, run_broker

# Property tests judge inputs, not time: on two loaded cores (CI, a parallel run) an example may
# take longer than hypothesis's default 200 ms deadline, and data generation may be "too slow" for
# its health check, without anything being wrong.
settings.register_profile("velamq", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("velamq")

# How long an operation of the official client may take before it fails instead of retrying for the
# default 30 s: keeps a broken broker from turning a test run into a long hang.
client_operation_timeout_s = 10

ClientFactory = Callable[..., Any]


def new_client(service_url: str, **kwargs: Any) -> Any:
    """A `pulsar.Client` with a short operation timeout and warnings-only logging."""
    import pulsar

    kwargs.setdefault("operation_timeout_seconds", client_operation_timeout_s)
    kwargs.setdefault("logger", pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    return pulsar.Client(service_url, **kwargs)


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    """One broker process for the whole test module."""
    with run_broker() as b:
        yield b


@pytest.fixture(scope="module")
def workers2() -> Iterator[BrokerProcess]:
    """One broker of two worker processes (`--workers 2`) for the whole test module."""
    with run_broker(workers=2) as b:
        yield b


@pytest.fixture
def fresh_broker() -> Iterator[BrokerProcess]:
    """One broker process for this test only (it may stop, kill and start it)."""
    with run_broker() as b:
        yield b


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A short topic name unique to this test."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:60]
    # The suffix starts with a letter: "...-partition-<digits>" would name a partition.
    return f"{base}-t{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_client() -> Iterator[ClientFactory]:
    """`make_client(service_url, **kwargs)` -> pulsar.Client; all of them are closed at teardown."""
    clients: list[Any] = []

    def factory(service_url: str, **kwargs: Any) -> Any:
        c = new_client(service_url, **kwargs)
        clients.append(c)
        return c

    yield factory
    for c in reversed(clients):
        try:
            c.close()
        except Exception:
            pass  # already closed by the test, or its broker is gone


@pytest.fixture
def client(broker: BrokerProcess, make_client: ClientFactory) -> Any:
    """An official client connected to the module's broker."""
    return make_client(broker.service_url)


# The test directories whose files take longest, heaviest first; the others follow. With `make test`
# each file runs whole on one worker (--dist loadfile: a module's broker or SparkSession starts
# once) and files are handed out in collection order (--no-loadscope-reorder): long files start
# first and the many short unit files fill the workers' ends, instead of a Spark module starting
# last and running alone.
_slow_directories = ("spark", "integration", "interop", "browser")


# Test files that share one xdist worker, one after the other, instead of one worker each: every
# Spark module starts a SparkSession (a JVM of ~1 GiB that keeps a core busy while it starts), and
# four at once on two cores starved each other past their streaming tests' deadlines.
_one_worker_directories = ("spark",)


@pytest.hookimpl(tryfirst=True)  # before xdist turns the xdist_group marks into work units
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent

    def top(item: pytest.Item) -> str:
        return item.path.relative_to(tests).parts[0] if item.path.is_relative_to(tests) else ""

    def rank(item: pytest.Item) -> int:
        return _slow_directories.index(top(item)) if top(item) in _slow_directories else len(_slow_directories)

    items.sort(key=rank)  # stable: the order within a directory and a file stays
    # `--dist loadgroup`: a file is one work unit (its module fixtures start once), a directory of
    # _one_worker_directories is one.
    for item in items:
        where = item.path.relative_to(tests) if item.path.is_relative_to(tests) else item.path
        group = top(item) if top(item) in _one_worker_directories else str(where)
        item.add_marker(pytest.mark.xdist_group(group))


_session_status: list[int] = []  # pytest's exit status, for pytest_unconfigure


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Close the official clients that a test left open (one whose broker was killed under it may
    have failed to close), while the interpreter is whole: a `pulsar.Client` destroyed during the
    interpreter's own shutdown ends the process with std::terminate, turning a green run red."""
    _session_status.append(int(exitstatus))
    pulsar = sys.modules.get("pulsar")
    if pulsar is None:
        return
    gc.collect()
    left = [obj for obj in gc.get_objects() if isinstance(obj, pulsar.Client)]
    for client in left:
        try:
            client.close()
        except Exception:
            pass  # already closed, or its broker is gone: what matters is that it goes now
    if left:
        print(f"\nconftest: closed {len(left)} official client(s) left open by tests", file=sys.stderr)
    del left
    gc.collect()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the test process with pytest's own status once everything is reported. A C++ thread of
    the official client library (the test peer) still running when the interpreter finalizes makes
    the C++ runtime call std::terminate ("terminate called without an active exception", exit 134)
    after a fully green run; no test's outcome depends on what finalization would do."""
    if not _session_status or not any(m.startswith("pulsar") for m in sys.modules):
        return
    threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if threads:
        print(f"conftest: {len(threads)} thread(s) still running at exit: {sorted(threads)[:10]}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_session_status[-1])
