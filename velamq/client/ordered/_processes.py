"""The process mode of the ordered consumer: CPU-bound handlers in P processes (the GIL lets threads
run only one Python handler at a time).

    ProcessPool    P handler processes (_child.py), shared by every partition of one
                   ordered consumer. Lane (partition p, worker w) always goes to process
                   (p x N + w) % P, so a key (one lane) always goes to one process, which runs its
                   messages one at a time in the order they were sent: order per key holds.
    ProcessLanes   a partition's side: wake(lane) sends the lane's items to its process in one
                   frame (pickled Messages, detached from their batches) and completes each ticket
                   when its result comes back.

Results and failures come back per message, in order. A handler that raises is retried inside its
process with the consumer's backoff (later messages of that process wait, as later messages of a
lane do in the other modes); after max_attempts the process reports it and the parent dead-letters
it. A process that dies (a crash, os._exit, a signal) is started again and gets everything it had
not reported, in the same order; the message it was running counts as one failed attempt, so a
message that kills its process every time is dead-lettered after max_attempts (with
max_attempts=None it is retried for ever, with backoff, visibly in the metrics and the log).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing.spawn
import os
import pickle
import struct
import sys
from collections import deque
from collections.abc import Callable
from typing import Any

from velamq.client._errors import InvalidConfigurationError
from velamq.client._message import Message
from velamq.client.ordered._failures import RetryPolicy
from velamq.client.ordered._lanes import LaneHost

log = logging.getLogger("velamq.client")

_LEN = struct.Struct("<I")
_OK = struct.Struct("<q")  # a success: the sequence number alone (see _child.py)
# The child runs as a script: it needs nothing of velamq (the handler's own module may import it).
_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child.py")
start_timeout_s = 60.0
respawn_max_backoff_s = 10.0

# One message sent to a process: (sequence number, lanes, lane, ticket, message).
_Sent = tuple[int, "ProcessLanes", int, int, Message]


def _frame(obj: Any) -> bytes:
    data = obj if isinstance(obj, bytes) else pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(data)) + data


class _Slot:
    """One handler process and what it has not reported yet."""

    def __init__(self, pool: ProcessPool, index: int) -> None:
        self.pool = pool
        self.index = index
        self.proc: asyncio.subprocess.Process | None = None
        self.inflight: deque[_Sent] = deque()
        self.alive = False  # its pipe is open: what is sent now reaches it
        self.next_seq = 0
        self.restarts = 0
        self._crash_attempts: dict[int, int] = {}
        self.reader: asyncio.Task[None] | None = None

    async def spawn(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(sys.executable, _CHILD, stdin=asyncio.subprocess.PIPE,
                                                         stdout=asyncio.subprocess.PIPE)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(_frame(self.pool.preparation) + _frame(self.pool.handler_frame))
        try:
            ready = await asyncio.wait_for(_read_frame(self.proc.stdout), start_timeout_s)
        except (asyncio.IncompleteReadError, TimeoutError):
            ready = None
        if ready is None or ready[1] != "ready":
            self.proc.kill()
            await self.proc.wait()
            raise InvalidConfigurationError(
                "the handler process did not start (is the handler importable from its module?)")
        if self.inflight:
            self.proc.stdin.write(_frame([(s[0], s[4]) for s in self.inflight]))
        self.alive = True
        self.reader = asyncio.get_running_loop().create_task(self._read(self.proc),
                                                             name=f"ordered-process-{self.index}")

    def send(self, sent: list[_Sent]) -> None:
        self.inflight.extend(sent)
        proc = self.proc
        if self.alive and proc is not None and proc.stdin is not None:
            proc.stdin.write(_frame([(s[0], s[4]) for s in sent]))
        # else: the restart sends everything in flight

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        buffer = b""
        while True:
            data = await proc.stdout.read(65536)
            if not data:
                self.alive = False
                break
            buffer += data
            while len(buffer) >= 4:
                (size,) = _LEN.unpack_from(buffer)
                if len(buffer) < 4 + size:
                    break
                if size == _OK.size:
                    self._result(_OK.unpack_from(buffer, 4)[0], "ok", None)
                else:
                    self._result(*pickle.loads(buffer[4:4 + size]))
                buffer = buffer[4 + size:]
        await proc.wait()
        if not self.pool.stopping:
            await self._restart(proc.returncode)

    def _result(self, seq: int, outcome: str, text: str | None) -> None:
        head = self.inflight[0]
        if head[0] != seq:
            raise RuntimeError(f"handler process {self.index}: result for {seq}, expected {head[0]}")
        lanes, lane, ticket, message = head[1], head[2], head[3], head[4]
        failures = lanes.host.failures
        if outcome == "failed":
            failures.handler_failures += 1
            failures.retries += 1
            log.warning("%s: handler failed on %s (%s); retrying in its process", failures.topic,
                        message.message_id, text)
            return
        self.inflight.popleft()
        self._crash_attempts.pop(seq, None)
        if outcome == "ok":
            lanes.done(lane, ticket)
            return
        failures.handler_failures += 1
        log.warning("%s: handler failed %s times on %s (%s); dead-lettering it", failures.topic,
                    failures.policy.max_attempts, message.message_id, text)
        asyncio.get_running_loop().create_task(lanes.dead_letter(lane, ticket, message))

    async def _restart(self, returncode: int | None) -> None:
        self.restarts += 1
        if self.inflight:
            seq, lanes, lane, ticket, message = self.inflight[0]
            attempts = self._crash_attempts[seq] = self._crash_attempts.get(seq, 0) + 1
            failures = lanes.host.failures
            failures.handler_failures += 1
            log.warning("%s: handler process %d exited (code %s) while running %s (attempt %d)", failures.topic,
                        self.index, returncode, message.message_id, attempts)
            if failures.policy.gives_up(attempts):
                self.inflight.popleft()
                self._crash_attempts.pop(seq, None)
                asyncio.get_running_loop().create_task(lanes.dead_letter(lane, ticket, message))
            elif not await failures.backoff(failures.policy.backoff_s(attempts)):
                return
            else:
                failures.retries += 1
        else:
            log.warning("handler process %d exited (code %s); starting another", self.index, returncode)
        await self._respawn()

    async def _respawn(self) -> None:
        """Start the process again; if that fails (the handler's module no longer imports), try
        again with backoff: what it holds stays unacknowledged meanwhile, never lost."""
        failures = 0
        while not self.pool.stopping:
            try:
                await self.spawn()
                return
            except Exception as exc:
                failures += 1
                delay_s = min(respawn_max_backoff_s, 0.1 * (1 << min(failures, 10)))
                log.error("handler process %d cannot start (%s); trying again in %.1f s", self.index, exc, delay_s)
                await asyncio.sleep(delay_s)

    async def stop(self, timeout_s: float) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None and proc.stdin is not None:
            proc.stdin.write(b"\x04\x00\x00\x00stop")
        try:
            await asyncio.wait_for(proc.wait(), max(0.0, timeout_s))
        except TimeoutError:
            proc.kill()
            await proc.wait()
        if self.reader is not None:
            await asyncio.gather(self.reader, return_exceptions=True)


class ProcessPool:
    """P handler processes for one ordered consumer."""

    def __init__(self, handler: Callable[[Message], object], processes: int, policy: RetryPolicy) -> None:
        if processes < 1:
            raise InvalidConfigurationError("processes must be >= 1")
        try:
            self.handler_frame = pickle.dumps((handler, (policy.max_attempts, policy.initial_backoff_ms,
                                                         policy.max_backoff_ms)))
        except Exception as exc:
            raise InvalidConfigurationError(
                f"a process handler must be picklable (a function defined at module level): {exc}") from None
        data = multiprocessing.spawn.get_preparation_data("velamq-ordered-handler")
        data.pop("authkey", None)  # not needed, and refused by pickle outside multiprocessing
        self.preparation = pickle.dumps(data)
        self.slots = [_Slot(self, i) for i in range(processes)]
        self.stopping = False
        self._quiesced: asyncio.Task[None] | None = None

    @property
    def restarts(self) -> int:
        return sum(s.restarts for s in self.slots)

    def pids(self) -> list[int]:
        return [s.proc.pid for s in self.slots if s.proc is not None and s.proc.returncode is None]

    async def start(self) -> None:
        results = await asyncio.gather(*(s.spawn() for s in self.slots), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            await self.close(0.0)
            raise failed[0]

    def slot_for(self, partition: int, lane: int, parallelism: int) -> _Slot:
        return self.slots[(partition * parallelism + lane) % len(self.slots)]

    def quiesce(self, timeout_s: float) -> asyncio.Task[None]:
        """Tell every process to exit after the message it runs, and wait (once, for all partitions)."""
        if self._quiesced is None:
            self.stopping = True

            async def stop_all() -> None:
                await asyncio.gather(*(s.stop(timeout_s) for s in self.slots))

            self._quiesced = asyncio.get_running_loop().create_task(stop_all())
        return self._quiesced

    async def close(self, timeout_s: float) -> None:
        await self.quiesce(timeout_s)


class ProcessLanes:
    """A partition's lanes, run by the pool's processes."""

    def __init__(self, host: LaneHost, pool: ProcessPool, partition: int) -> None:
        self.host = host
        self._pool = pool
        self._partition = partition
        self._outstanding = [0] * len(host.lanes)
        self._stopped = False

    def wake(self, lane: int) -> None:
        items = self.host.lanes[lane]
        if self._stopped or not items:
            return
        slot = self._pool.slot_for(self._partition, lane, len(self.host.lanes))
        sent: list[_Sent] = []
        while items:
            ticket, batch, j = items.popleft()
            sent.append((slot.next_seq, self, lane, ticket, self.host.message(batch, j)))
            slot.next_seq += 1
        self._outstanding[lane] += len(sent)
        slot.send(sent)

    def done(self, lane: int, ticket: int) -> None:
        if self._stopped:
            return  # after stop: not acknowledged, delivered again
        self._outstanding[lane] -= 1
        self.host.complete(ticket)
        if not self._outstanding[lane]:
            self.host.lane_idle(lane)

    async def dead_letter(self, lane: int, ticket: int, message: Message) -> None:
        if await self.host.failures.dead_letter(message):
            self.done(lane, ticket)

    async def stop(self, timeout_s: float) -> None:
        await asyncio.shield(self._pool.quiesce(timeout_s))
        self._stopped = True


async def _read_frame(stream: asyncio.StreamReader) -> tuple[int, str, str | None] | None:
    head = await stream.readexactly(4)
    (size,) = _LEN.unpack(head)
    result: tuple[int, str, str | None] = pickle.loads(await stream.readexactly(size))
    return result
