"""The one thread that owns the SQLite connection, fed by a queue (docs/architecture.md, "Who owns what").

The event loop never touches SQLite: `run(fn)` adds `fn` to the operations of this turn of the loop,
handed to the thread's queue together once the turn is over (one wake-up of the thread per turn, not
one per operation), and awaits a future that the thread settles through `loop.call_soon_threadsafe`.
The thread drains whatever is queued (up to `batch_ops_max`) and runs it in ONE transaction, each
operation inside its own SAVEPOINT (one alone in its transaction needs none), and hands the batch's
answers to the loop in one call, so that:

- an operation that fails (NotFoundError, ...) rolls back only its own changes;
- many concurrent writes cost one fsync (group commit, like the journal's), not one each;
- no caller hears "done" before the COMMIT that made its change durable has returned.

Several processes may share the file (worker processes, docs/workers.md). A batch that carries a
write starts with BEGIN IMMEDIATE: it takes the file's write lock before its first read, so each
read-modify-write sees the latest commit of every process and none is lost; a process that finds
the lock taken waits (busy_timeout, _schema.py). A batch of reads only (`run(fn, write=False)`)
starts a deferred transaction and never waits for another process's writer.

The number of operations queued or running is bounded by `ops_in_flight_max` through a semaphore on
the loop side, so a burst of callers waits (backpressure) instead of growing the queue without end.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from velamq._errors import MetadataError, VelamqError

T = TypeVar("T")

# Operations one transaction carries at most; bounds the latency a long batch adds to its first caller.
batch_ops_max: Final = 256
# Operations queued or running at once; further callers wait on the loop.
ops_in_flight_max_default: Final = 1024


@dataclass(slots=True)
class _Job:
    fn: Callable[[sqlite3.Connection], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    write: bool


class _Stop:
    """Queue sentinel: finish what came before, close the connection, end the thread."""


_STOP: Final = _Stop()


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    # Runs on the loop. The caller may have given up (timeout, cancellation) meanwhile.
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _settle_all(outcomes: list[tuple[_Job, Any, BaseException | None]]) -> None:
    for job, result, error in outcomes:
        _settle(job.future, result, error)


def _translate(exc: BaseException) -> BaseException:
    """Foreign exceptions become MetadataError here, the store's one boundary with sqlite3."""
    if isinstance(exc, VelamqError):
        return exc
    if isinstance(exc, sqlite3.Error):
        err = MetadataError(f"metadata store: {type(exc).__name__}: {exc}")
        err.__cause__ = exc
        return err
    return exc  # a bug in an operation: let it surface as itself


class SqliteWorker:
    """Runs callables against one SQLite connection in one dedicated thread."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        *,
        name: str = "velamq-metadata",
        ops_in_flight_max: int = ops_in_flight_max_default,
    ) -> None:
        self._connect = connect
        self._name = name
        # Each item: the operations asked for in one turn of the loop (handed over together,
        # one wake-up of the thread per turn), or the stop sentinel.
        self._queue: queue.SimpleQueue[list[_Job] | _Stop] = queue.SimpleQueue()
        self._this_turn: list[_Job] = []
        self._in_flight = asyncio.Semaphore(ops_in_flight_max)
        self._thread: threading.Thread | None = None
        self._closing = False
        self._stopped: asyncio.Future[None] | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._closing

    async def start(self) -> None:
        if self._thread is not None:
            raise MetadataError("metadata store already started")
        loop = asyncio.get_running_loop()
        opened: asyncio.Future[None] = loop.create_future()
        self._stopped = loop.create_future()
        self._thread = threading.Thread(
            target=self._main, args=(loop, opened, self._stopped), name=self._name, daemon=True
        )
        self._thread.start()
        try:
            await opened
        except BaseException:
            self._closing = True
            raise

    async def run(self, fn: Callable[[sqlite3.Connection], T], *, write: bool = True) -> T:
        """Run `fn(conn)` in the store's thread, inside a transaction; return its result.
        write=False promises that `fn` only reads (its batch need not take the write lock)."""
        async with self._in_flight:
            if self._thread is None or self._closing:
                raise MetadataError("metadata store is not running")
            loop = asyncio.get_running_loop()
            future: asyncio.Future[T] = loop.create_future()
            this_turn = self._this_turn
            this_turn.append(_Job(fn, loop, future, write))
            if len(this_turn) == 1:
                loop.call_soon(self._hand_over)
            return await future

    def _hand_over(self) -> None:
        """The operations asked for in the turn of the loop that just ran, to the thread at once."""
        this_turn, self._this_turn = self._this_turn, []
        if this_turn:
            self._queue.put(this_turn)

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """run(fn, write=False)."""
        return await self.run(fn, write=False)

    async def close(self) -> None:
        if self._thread is None or self._stopped is None:
            return
        if not self._closing:
            self._closing = True
            self._hand_over()  # what was asked before the close runs before it
            self._queue.put(_STOP)
        # The thread settles `_stopped` after closing the connection; it only returns after that.
        await asyncio.shield(self._stopped)

    # ----------------------------------------------------------------- the thread

    def _main(
        self, loop: asyncio.AbstractEventLoop, opened: asyncio.Future[None], stopped: asyncio.Future[None]
    ) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            self._deliver(loop, opened, None, _translate(exc))
            self._deliver(loop, stopped, None, None)
            return
        self._deliver(loop, opened, None, None)
        try:
            self._serve(conn)
        finally:
            conn.close()
            self._deliver(loop, stopped, None, None)

    def _serve(self, conn: sqlite3.Connection) -> None:
        """Run what is queued, up to batch_ops_max operations per transaction, until the stop
        sentinel (everything queued before it runs first)."""
        jobs: list[_Job] = []
        got: list[_Job] | _Stop | None = None
        stopping = False
        while jobs or not stopping:
            if not jobs:
                got = self._queue.get()
                if isinstance(got, _Stop):
                    return
                jobs = got
            while len(jobs) < batch_ops_max and not stopping:
                try:
                    got = self._queue.get_nowait()
                except queue.Empty:
                    break
                if isinstance(got, _Stop):
                    stopping = True
                else:
                    jobs += got
            self._execute(conn, jobs[:batch_ops_max])
            jobs = jobs[batch_ops_max:]
            # Hold nothing of a batch while waiting for the next: objects that outlive their use
            # pin the allocator's arenas, and memory freed around them is not given back.
            got = None

    def _execute(self, conn: sqlite3.Connection, jobs: list[_Job]) -> None:
        outcomes: list[tuple[_Job, Any, BaseException | None]] = []
        try:
            # IMMEDIATE: the write lock before the first read (see the module docstring).
            conn.execute("BEGIN IMMEDIATE" if any(job.write for job in jobs) else "BEGIN")
            if len(jobs) == 1:
                # Alone in its transaction, a job needs no savepoint: its failure rolls back
                # the transaction, which holds only its own changes.
                outcome = self._run_alone(conn, jobs[0])
                outcomes.append(outcome)
                if outcome[2] is not None:
                    conn.execute("ROLLBACK")
                    self._deliver_all(outcomes)
                    return
            else:
                for job in jobs:
                    outcomes.append(self._run_one(conn, job))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            # The transaction itself failed (disk full, I/O error): nothing of the batch is stored,
            # so every job fails, including those whose own part had gone well.
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            batch_error = _translate(exc)
            self._deliver_all([(job, None, batch_error) for job in jobs])
            return
        self._deliver_all(outcomes)

    @staticmethod
    def _run_alone(conn: sqlite3.Connection, job: _Job) -> tuple[_Job, Any, BaseException | None]:
        try:
            return job, job.fn(conn), None
        except Exception as exc:
            return job, None, _translate(exc)

    @staticmethod
    def _run_one(conn: sqlite3.Connection, job: _Job) -> tuple[_Job, Any, BaseException | None]:
        conn.execute("SAVEPOINT job")
        try:
            result = job.fn(conn)
        except Exception as exc:
            # Undo this job's partial changes only; the batch goes on. Errors of the savepoint
            # machinery itself propagate to _execute and fail the batch.
            conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
            return job, None, _translate(exc)
        conn.execute("RELEASE job")
        return job, result, None

    @classmethod
    def _deliver_all(cls, outcomes: list[tuple[_Job, Any, BaseException | None]]) -> None:
        """Every answer of a batch in one call to its loop (one wake-up of the loop per batch, not
        one per job); answers for another loop (a store used from two loops) go there."""
        if not outcomes:
            return
        loop = outcomes[0][0].loop
        if all(job.loop is loop for job, _, _ in outcomes):
            try:
                loop.call_soon_threadsafe(_settle_all, outcomes)
            except RuntimeError:
                pass  # that loop is closed: nobody is waiting any more
            return
        for job, result, error in outcomes:
            cls._deliver(job.loop, job.future, result, error)

    @staticmethod
    def _deliver(
        loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], result: Any, error: BaseException | None
    ) -> None:
        try:
            loop.call_soon_threadsafe(_settle, future, result, error)
        except RuntimeError:
            pass  # that loop is closed: nobody is waiting any more
