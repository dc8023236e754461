"""AutoClusterFailover's rules (RP-11), over real TCP listeners standing in for clusters (its probe
is a TCP connect) and a ManualClock: thresholds count probes in a row, delays count time, a failing
secondary hands over to the primary or to another secondary, and the primary is taken back only
after enough good probes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from wait_helpers import until

from velamq._clock import ManualClock
from velamq.client import AutoClusterFailover, ServiceInfo


class _Cluster:
    """A port that accepts connections while `up`."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.port = 0

    async def up(self) -> None:
        self.server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def info(self) -> ServiceInfo:
        return ServiceInfo(f"pulsar://127.0.0.1:{self.port}")


def _run(scenario: Callable[[list[_Cluster], ManualClock], Awaitable[None]]) -> None:
    async def main() -> None:
        clusters = [_Cluster() for _ in range(3)]
        for cluster in clusters:
            await cluster.up()
        try:
            await scenario(clusters, ManualClock())
        finally:
            for cluster in clusters:
                if cluster.server is not None and cluster.server.is_serving():
                    await cluster.down()

    asyncio.run(main())


async def _check(failover: AutoClusterFailover, clock: ManualClock, seconds: float = 1.0) -> None:
    """Let exactly one more check run."""
    done = failover.checks
    await until(lambda: clock.sleepers == 1, "the failover waiting for its next check")
    clock.advance(seconds)
    await until(lambda: failover.checks == done + 1, "the failover's next check")


def test_thresholds_and_delays_then_the_chain_of_secondaries_and_back() -> None:
    async def scenario(clusters: list[_Cluster], clock: ManualClock) -> None:
        primary, first, _ = clusters
        infos = [c.info for c in clusters]
        failover = AutoClusterFailover(infos[0], infos[1:], check_interval_ms=1000, failover_threshold=2,
                                       failover_delay_ms=2000, switch_back_threshold=3, clock=clock)
        switches: list[ServiceInfo] = []
        failover.initialize(switches.append)
        try:
            await primary.down()
            for _ in range(2):  # two failed probes, but only 1 s apart: under the 2 s delay
                await _check(failover, clock)
            assert switches == []
            await _check(failover, clock)  # three failures over 2 s: both conditions hold
            assert switches == [infos[1]]
            await first.down()  # the secondary fails as often and as long, the primary is still down
            for _ in range(2):
                await _check(failover, clock)
            assert switches == [infos[1]]
            await _check(failover, clock)
            assert switches == [infos[1], infos[2]]  # to the other secondary
            await primary.up()
            for _ in range(2):
                await _check(failover, clock)
            assert failover.current is infos[2]  # two good probes of the primary: three needed
            await _check(failover, clock)
            assert switches == [infos[1], infos[2], infos[0]]
        finally:
            await failover.close()

    _run(scenario)


def test_a_failing_secondary_goes_back_to_a_primary_that_answers() -> None:
    async def scenario(clusters: list[_Cluster], clock: ManualClock) -> None:
        primary, first, _ = clusters
        infos = [c.info for c in clusters]
        failover = AutoClusterFailover(infos[0], infos[1:2], check_interval_ms=500,
                                       switch_back_threshold=100, clock=clock)
        switches: list[ServiceInfo] = []
        failover.initialize(switches.append)
        try:
            await primary.down()
            await _check(failover, clock)
            assert switches == [infos[1]]
            await primary.up()
            await _check(failover, clock)  # the primary answers, but far from 100 times: stay
            assert switches == [infos[1]]
            await first.down()
            await _check(failover, clock)  # the secondary is gone: the primary at once
            assert switches == [infos[1], infos[0]]
        finally:
            await failover.close()

    _run(scenario)
