"""A disk that fills up, with the official client (send timeout 5 s):

1. on a real small filesystem (a tmpfs mounted for the test): the broker turns read-only before the
   disk is full; every send's callback fires within the send timeout (acknowledged, or failed with
   ProducerBlockedQuotaExceededException / Timeout / ProducerQueueIsFull, never left hanging);
   consumers keep reading; deleting a topic frees space and writing resumes, for the same producer,
   without a restart; after a kill -9 every acknowledged message is there;
2. on the same kind of filesystem, filled from outside so that a write fails (ENOSPC): the broker
   turns read-only at the failed append, nothing hangs, nothing acknowledged is lost, and once the
   filler is removed storage writes again by itself (velamq_storage_writable) and the broker turns
   writable, without a restart; a kill -9 then loses nothing acknowledged;
3. killed on a full disk (filled to the last byte): the broker starts on it, read-only (storage
   gives back its ballast if replay needs the space), serves readers, refuses producers, and takes
   them again once space is back;
4. in this process, with the fault injected at the filesystem boundary (a fake statvfs), so that it
   runs wherever mounting is not allowed.

Mounting needs root (CAP_SYS_ADMIN); without it, tests 1 to 3 are skipped with that reason.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from limits_helpers import http, metrics
from wait_helpers import wait_until

from velamq.broker import BrokerConfig, DiskUsage
from velamq.testing import BrokerProcess, run_broker_in_thread

pytestmark = pytest.mark.timeout(300)

MIB = 1 << 20
send_timeout_ms = 5000
callback_slack_s = 10.0  # the client's timer and a loaded machine (CI: two busy cores); a hung send never comes
message = 10_000
allowed = {pulsar.Result.Ok, pulsar.Result.ProducerBlockedQuotaExceededException, pulsar.Result.Timeout,
           pulsar.Result.ProducerQueueIsFull}


@pytest.fixture
def small_fs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A tmpfs of the size given by the test (`@pytest.mark.parametrize` indirect, in MiB)."""
    mount = tmp_path / "fs"
    mount.mkdir()
    size_mib = int(getattr(request, "param", 256))
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a {size_mib} MiB tmpfs (needs root / CAP_SYS_ADMIN): {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


class Sends:
    """send_async with a callback per message: result and how long after the send it came."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self.results: dict[int, tuple[Any, float]] = {}
        self.sent = 0
        self._lock = threading.Lock()

    def send(self, index: int) -> None:
        started = time.monotonic()

        def done(result: Any, _mid: Any) -> None:
            with self._lock:
                self.results[index] = (result, time.monotonic() - started)

        self.producer.send_async(b"%08d" % index + b"x" * (message - 8), done)
        self.sent += 1

    def all_called_back(self) -> bool:
        with self._lock:
            return len(self.results) == self.sent

    def acked(self) -> set[int]:
        with self._lock:
            return {i for i, (result, _) in self.results.items() if result == pulsar.Result.Ok}

    def check(self) -> Counter[str]:
        """Every callback came, within the send timeout, with an allowed result."""
        wait_until(self.all_called_back, timeout_s=send_timeout_ms / 1000 + 30, what="every callback")
        with self._lock:
            slowest = max(delay for _, delay in self.results.values())
            kinds = Counter(str(result) for result, _ in self.results.values())
            assert {result for result, _ in self.results.values()} <= allowed, kinds
        assert slowest <= send_timeout_ms / 1000 + callback_slack_s, (slowest, kinds)
        return kinds


def fill_until(sends: Sends, done: Any, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "the disk guard never turned the broker read-only"
        for _ in range(100):
            sends.send(sends.sent)
        time.sleep(0.005)


def sending(client: Any, topic: str, first: int) -> Sends:
    """A subscription that keeps the topic, a producer's Sends, `first` messages sent and flushed."""
    client.subscribe(topic, "keep")
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=send_timeout_ms)
    sends = Sends(producer)
    for _ in range(first):
        sends.send(sends.sent)
    producer.flush()
    return sends


def fill_disk(fs: Path, leave_bytes: int) -> None:
    """A filler file that leaves `leave_bytes` of the file system free."""
    st = os.statvfs(fs)
    with open(fs / "filler", "wb") as f:
        os.posix_fallocate(f.fileno(), 0, st.f_bavail * st.f_frsize - leave_bytes)


def until_sent(send: Callable[[], Any], what: str) -> None:
    """Retry `send` until it succeeds (a producer back from its reconnect back-off, or the broker
    taking producers again); at most 90 s."""

    def sent() -> bool:
        try:
            send()
        except Exception:
            return False
        return True

    wait_until(sent, what, timeout_s=90)


def read_back(client: Any, topic: str, wanted: set[int]) -> set[int]:
    """Read the topic from its start; the indexes of `wanted` that are there."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    found: set[int] = set()
    while reader.has_message_available():
        found.add(int(reader.read_next(timeout_millis=10_000).data()[:8]))
    reader.close()
    return found & wanted


def broker_on(fs: Path, memory: str, check_interval_ms: int) -> BrokerProcess:
    config = fs.parent / "broker.conf"
    # Small journal files: trimming one frees 1 MiB, not the 64 MiB that would turn the broker
    # writable again at once on so small a disk (the read-only state is what the tests look at).
    # A deleted topic's entries leave the disk when the garbage collector drops or rewrites their
    # entry logs: it runs every second here, not BookKeeper's default quarter of an hour. Entry
    # logs of 4 MiB: a deleted topic's entries fill whole logs, which the collector drops without
    # copying anything (on a full disk there is no room to rewrite a log shared with live entries).
    config.write_text(
        f"diskCheckInterval={check_interval_ms}\njournalMaxSizeMB=1\nlogSizeLimit={4 * MIB}\n"
        "gcWaitTime=1000\nminorCompactionInterval=1\nmajorCompactionInterval=2\n"
    )
    broker = BrokerProcess(fs / "data", ["--config", str(config), "--memory", memory], log_path=fs.parent / "log")
    broker.start()
    return broker


@pytest.mark.parametrize("small_fs", [256], indirect=True)
def test_read_only_before_the_disk_is_full_and_writable_again_after_a_delete(
    small_fs: Path, make_client: Any
) -> None:
    broker = broker_on(small_fs, "64M", 200)  # 64 MiB kept free: a quarter of this disk
    try:
        client = make_client(broker.service_url)
        full, ballast = "persistent://public/default/full", "persistent://public/default/ballast"
        keep = client.subscribe(full, "keep")  # retention keeps what a subscription has not acked
        client.subscribe(ballast, "keep")
        filler = client.create_producer(ballast, batching_enabled=False, block_if_queue_full=True)
        for _ in range(6000):
            filler.send_async(b"b" * message, None)
        filler.flush()

        producer = client.create_producer(full, batching_enabled=False, send_timeout_millis=send_timeout_ms)
        sends = Sends(producer)
        fill_until(sends, lambda: metrics(broker.admin_url)["velamq_broker_disk_read_only"] == 1)
        for _ in range(200):  # sends while read-only: failed, never hanging
            sends.send(sends.sent)
        kinds = sends.check()
        assert kinds[str(pulsar.Result.Ok)] > 0 and kinds[str(pulsar.Result.ProducerBlockedQuotaExceededException)] > 0
        figures = metrics(broker.admin_url)
        assert figures["velamq_broker_disk_write_failures_total"] == 0  # read-only came before ENOSPC
        with pytest.raises(Exception, match="ProducerBlockedQuotaExceeded"):
            client.create_producer(full)
        assert keep.receive(timeout_millis=10_000).data()[:8] == b"%08d" % min(sends.acked())  # consumers work

        status, _ = http("DELETE", f"{broker.admin_url}/admin/v2/persistent/public/default/ballast?force=true")
        assert status == 204  # admin works while read-only: deleting frees space
        wait_until(lambda: metrics(broker.admin_url)["velamq_broker_disk_read_only"] == 0, what="writable again")
        until_sent(lambda: producer.send(b"%08d" % 99_999_999 + b"after"), "the same producer writing again")
        acked = sends.acked()
        broker.kill()
        broker.start()
        client = make_client(broker.service_url)
        assert read_back(client, full, acked) == acked
    finally:
        broker.stop()


@pytest.mark.parametrize("small_fs", [128], indirect=True)
def test_a_failed_write_turns_the_broker_read_only_and_no_send_hangs(small_fs: Path, make_client: Any) -> None:
    broker = broker_on(small_fs, "16M", 3_600_000)  # no periodic check: the write must fail first
    try:
        client = make_client(broker.service_url)
        full = "persistent://public/default/full"
        sends = sending(client, full, 100)
        producer = sends.producer
        fill_disk(small_fs, MIB)  # the next flush cannot be written
        fill_until(sends, lambda: metrics(broker.admin_url)["velamq_broker_disk_write_failures_total"] > 0)
        sends.check()
        assert metrics(broker.admin_url)["velamq_broker_disk_read_only"] == 1
        acked = sends.acked()

        (small_fs / "filler").unlink()
        wait_until(lambda: metrics(broker.admin_url)["velamq_storage_writable"] == 1, what="storage writes again")
        wait_until(lambda: metrics(broker.admin_url)["velamq_broker_disk_read_only"] == 0, what="broker writable")
        until_sent(lambda: producer.send(b"%08d" % 99_999_999 + b"after"), "the same producer writing again")
        assert metrics(broker.admin_url)["velamq_storage_write_recoveries_total"] >= 1
        broker.kill()
        broker.start()
        client = make_client(broker.service_url)
        assert read_back(client, full, acked) == acked  # nothing acknowledged was lost
    finally:
        broker.stop()


@pytest.mark.parametrize("small_fs", [128], indirect=True)
def test_a_broker_killed_on_a_full_disk_starts_on_it_serves_reads_and_writes_once_space_is_back(
    small_fs: Path, make_client: Any
) -> None:
    broker = broker_on(small_fs, "16M", 500)
    try:
        client = make_client(broker.service_url)
        full = "persistent://public/default/full"
        sends = sending(client, full, 100)
        fill_disk(small_fs, 4 * MIB)
        fill_until(sends, lambda: metrics(broker.admin_url)["velamq_broker_disk_read_only"] == 1)
        sends.check()
        acked = sends.acked()
        try:  # the last byte too
            with open(small_fs / "filler2", "wb", buffering=0) as f:
                while True:
                    f.write(b"\0" * 4096)
        except OSError:
            pass
        broker.kill()
        broker.start()  # on the full disk: it starts, read-only
        figures = metrics(broker.admin_url)
        assert figures["velamq_broker_disk_read_only"] == 1
        assert figures["velamq_storage_ballast_releases_total"] <= 1  # 1 when replay needed its space
        client = make_client(broker.service_url)
        assert read_back(client, full, acked) == acked  # reads and consumers are served
        with pytest.raises(Exception, match="ProducerBlockedQuotaExceeded"):
            client.create_producer(full)
        (small_fs / "filler").unlink()
        (small_fs / "filler2").unlink(missing_ok=True)
        wait_until(lambda: metrics(broker.admin_url)["velamq_broker_disk_read_only"] == 0, timeout_s=60,
                 what="writable once space is back")
        until_sent(lambda: client.create_producer(full).send(b"%08d" % 99_999_999 + b"after"),
                   "the broker taking a producer again")
    finally:
        broker.stop()


class FakeDisk:
    def __init__(self) -> None:
        self.used = 0.5

    def __call__(self, path: Path) -> DiskUsage:
        total = 1 << 40
        return DiskUsage(total, int(total * (1 - self.used)))


def test_with_a_fake_filesystem_callbacks_fire_and_writing_resumes(make_client: Any) -> None:
    disk = FakeDisk()
    config = BrokerConfig(disk_check_interval_ms=100, sync_policy="none")
    with run_broker_in_thread(config=config, disk_stat=disk) as broker:
        client = make_client(broker.service_url)
        topic = "persistent://public/default/fake-full"
        keep = client.subscribe(topic, "keep")
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=send_timeout_ms)
        sends = Sends(producer)
        for _ in range(500):
            sends.send(sends.sent)
        producer.flush()
        disk.used = 0.96
        fill_until(sends, lambda: broker.server.broker.disk_guard.read_only)
        for _ in range(300):
            sends.send(sends.sent)
        kinds = sends.check()
        assert kinds[str(pulsar.Result.ProducerBlockedQuotaExceededException)] > 0
        assert keep.receive(timeout_millis=10_000).data()[:8] == b"00000000"
        disk.used = 0.5
        wait_until(lambda: not broker.server.broker.disk_guard.read_only)
        deadline = time.monotonic() + 90
        while True:
            try:
                producer.send(b"%08d" % 99_999_999)
                break
            except Exception:
                assert time.monotonic() < deadline, "the producer never wrote again"
        assert len(sends.acked()) >= 500
