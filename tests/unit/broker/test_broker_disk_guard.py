"""The disk guard on a fake filesystem (the fault injected at the filesystem boundary): thresholds,
hysteresis, the reserve for small disks, early checks, write failures and their hold-off; and the
broker's answer to producers and consumers while read-only, over a recording transport."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from broker_testing import T, broker, command, connect, entry, until_reply
from wait_helpers import until

from velamq._clock import ManualClock
from velamq._errors import StorageError
from velamq._log_limit import RateLimitedLog
from velamq.broker import DiskUsage
from velamq.broker.guards._disk import DiskGuard, DiskState, DiskThresholds
from velamq.protocol import encode_command, encode_payload_command, pb

MIB = 1 << 20
TOPIC = "persistent://public/default/t"


class FakeDisk:
    """A filesystem whose usage the test sets; counts how often it was asked."""

    def __init__(self, total_bytes: int = 1000 * MIB, used: float = 0.5) -> None:
        self.total_bytes = total_bytes
        self.used = used
        self.reads = 0

    def __call__(self, path: Path) -> DiskUsage:
        self.reads += 1
        return DiskUsage(self.total_bytes, int(self.total_bytes * (1 - self.used)))


class Storage:
    def __init__(self) -> None:
        self.writable = True


def guard(
    disk: FakeDisk, clock: ManualClock, storage: Storage | None = None, **kwargs: float
) -> tuple[DiskGuard, list[str]]:
    refusals: list[str] = []
    g = DiskGuard(
        Path("/data"), DiskThresholds(**kwargs), clock, storage or Storage(), refusals.append,
        RateLimitedLog(logging.getLogger("test.disk"), clock), disk,
    )
    return g, refusals


def test_thresholds_with_hysteresis(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    disk = FakeDisk()
    g, refusals = guard(disk, clock)
    readings = [(0.50, DiskState.WRITABLE), (0.91, DiskState.WARN), (0.95, DiskState.READ_ONLY),
                (0.92, DiskState.READ_ONLY), (0.901, DiskState.READ_ONLY),  # above the low-water mark
                (0.89, DiskState.WRITABLE), (0.93, DiskState.WARN), (0.97, DiskState.READ_ONLY)]
    with caplog.at_level(logging.WARNING):
        for used, state in readings:
            disk.used = used
            g.apply(disk(g.path))
            assert g.state is state, used
    assert len(refusals) == 2 and "95%" in refusals[0]
    assert g.read_only_total == 2


def test_a_small_disk_keeps_the_memory_budget_free() -> None:
    disk = FakeDisk(total_bytes=256 * MIB)
    g, refusals = guard(disk, ManualClock())
    g.min_free_bytes = 64 * MIB
    disk.used = 0.74  # 66 MiB free: above the 64 MiB reserve, though far from 95 %
    g.apply(disk(g.path))
    assert not g.read_only
    disk.used = 0.76
    g.apply(disk(g.path))
    assert g.read_only and "64 MiB kept free" in refusals[0]
    disk.used = 0.72  # the hysteresis gap (5 % of the disk) counts from the reserve
    g.apply(disk(g.path))
    assert g.read_only
    disk.used = 0.70
    g.apply(disk(g.path))
    assert not g.read_only


def test_periodic_and_early_checks_run_off_the_loop() -> None:
    async def main() -> None:
        clock = ManualClock()
        disk = FakeDisk(total_bytes=1000 * MIB, used=0.5)
        g, refusals = guard(disk, clock, check_interval_s=10)
        await g.start()
        assert disk.reads == 1
        await until(lambda: clock.sleepers == 1)
        clock.advance(10)
        await until(lambda: disk.reads == 2)
        # 450 MiB of headroom below the threshold: a check once appends could have used a quarter
        # of it (each appended byte counted twice, journal and entry log).
        g.note_appended(56 * MIB)
        assert disk.reads == 2
        disk.used = 0.96
        g.note_appended(1 * MIB)
        await until(lambda: g.read_only)
        assert disk.reads == 3 and refusals
        await g.close()

    asyncio.run(main())


def test_a_write_failure_holds_read_only_until_storage_writes_again() -> None:
    async def main() -> None:
        clock = ManualClock()
        disk = FakeDisk(used=0.3)
        storage = Storage()
        g, refusals = guard(disk, clock, storage, check_interval_s=60)
        await g.start()
        storage.writable = False
        g.write_failed(StorageError("journal write failed: [Errno 28] No space left on device"))
        assert g.read_only and "No space left" in refusals[0]
        await g.check_now()  # a check inside the hold-off changes nothing
        assert g.read_only
        await until(lambda: clock.sleepers == 2)  # the periodic check and the hold-off timer
        clock.advance(5)
        await until(lambda: disk.reads == 3)
        assert g.read_only  # storage still refuses appends
        storage.writable = True
        clock.advance(55)  # the next periodic check
        await until(lambda: not g.read_only)
        assert g.write_failures_total == 1
        await g.close()

    asyncio.run(main())


def test_storage_that_does_not_write_turns_the_broker_read_only_without_a_failed_append() -> None:
    """A failed flush fails no append (appends wait in the write cache): the check sees it."""

    async def main() -> None:
        clock = ManualClock()
        disk = FakeDisk(used=0.3)
        storage = Storage()
        g, refusals = guard(disk, clock, storage, check_interval_s=10)
        await g.start()
        assert not g.read_only
        storage.writable = False
        await g.check_now()
        assert g.read_only and "storage does not write" in refusals[0]
        await g.check_now()
        assert g.read_only and len(refusals) == 1
        storage.writable = True
        await g.check_now()
        assert not g.read_only
        await g.close()

    asyncio.run(main())


# ---- the broker while read-only, over a recording transport --------------------------------------


def producer_command(producer_id: int, request_id: int) -> bytes:
    return command(T.PRODUCER, "producer", topic=TOPIC, producer_id=producer_id, request_id=request_id)


def send_frame(producer_id: int, sequence_id: int, clock: ManualClock) -> bytes:
    send = pb.BaseCommand(type=T.SEND)
    send.send.producer_id, send.send.sequence_id = producer_id, sequence_id
    return encode_payload_command(send, entry(b"m%d" % sequence_id, publish_time=clock.now_ms()))


def test_read_only_refuses_producers_and_keeps_consumers(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        disk = FakeDisk(total_bytes=100_000 * MIB, used=0.5)  # the broker keeps 1 GiB free
        async with broker(tmp_path, clock, disk) as service:
            connection, transport = connect(service)
            connection.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
            connection.data_received(producer_command(1, 1))
            await until_reply(transport, T.PRODUCER_SUCCESS)
            connection.data_received(send_frame(1, 0, clock))
            await until_reply(transport, T.SEND_RECEIPT)
            connection.data_received(command(T.SUBSCRIBE, "subscribe", topic=TOPIC, subscription="s", subType=0,
                                             consumer_id=7, request_id=2, initialPosition=pb.CommandSubscribe.Earliest))
            await until_reply(transport, T.SUCCESS)

            disk.used = 0.96
            await service.disk_guard.check_now()
            (closed,) = await until_reply(transport, T.CLOSE_PRODUCER)
            assert closed.close_producer.producer_id == 1
            connection.data_received(send_frame(1, 1, clock))  # sent before the client saw the close
            connection.data_received(producer_command(1, 3))  # the client's reconnect
            (refused,) = await until_reply(transport, T.ERROR)
            assert refused.error.error == pb.ProducerBlockedQuotaExceededException
            assert "read-only" in refused.error.message
            assert not transport.closed and len(transport.of_type(T.SEND_RECEIPT)) == 1
            topic = service.loaded_topic(TOPIC)
            assert topic is not None and topic.producers == {}

            connection.data_received(command(T.FLOW, "flow", consumer_id=7, messagePermits=10))
            (message,) = await until_reply(transport, T.MESSAGE)  # consumers keep working
            ack = pb.BaseCommand(type=T.ACK)
            ack.ack.consumer_id, ack.ack.ack_type = 7, pb.CommandAck.Individual
            ack.ack.message_id.add().CopyFrom(message.message.message_id)
            connection.data_received(encode_command(ack))
            await until(lambda: topic.subscriptions["s"].backlog == 0)

            disk.used = 0.5
            await service.disk_guard.check_now()
            connection.data_received(producer_command(1, 4))
            await until_reply(transport, T.PRODUCER_SUCCESS, 2)
            connection.data_received(send_frame(1, 1, clock))
            await until_reply(transport, T.SEND_RECEIPT, 2)

    asyncio.run(main())


def test_a_failed_append_turns_the_broker_read_only(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        disk = FakeDisk(total_bytes=100_000 * MIB, used=0.5)  # the broker keeps 1 GiB free
        async with broker(tmp_path, clock, disk) as service:
            connection, transport = connect(service)
            connection.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
            connection.data_received(producer_command(1, 1))
            await until_reply(transport, T.PRODUCER_SUCCESS)
            topic = service.loaded_topic(TOPIC)
            assert topic is not None
            await topic.ledger.close()  # storage refuses this ledger's appends from now on
            connection.data_received(send_frame(1, 0, clock))
            await until_reply(transport, T.CLOSE_PRODUCER)
            assert service.disk_guard.read_only and service.disk_guard.write_failures_total == 1
            assert transport.of_type(T.SEND_ERROR) == []  # the official client would resend forever
            assert not transport.closed

    asyncio.run(main())
