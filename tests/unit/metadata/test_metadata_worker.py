"""The metadata store's SQLite thread (_worker.py): a batch's answers, each to its own caller, in one
hand-off to the loop; a lone operation without a savepoint; durability once answered (WC-4)."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from velamq._errors import MetadataError, NotFoundError
from velamq.metadata import MetadataStore
from velamq.metadata._schema import connect
from velamq.metadata._worker import SqliteWorker, batch_ops_max


@asynccontextmanager
async def _running(worker: SqliteWorker) -> AsyncIterator[SqliteWorker]:
    await worker.start()
    try:
        yield worker
    finally:
        await worker.close()


def _worker(path: Path) -> AbstractAsyncContextManager[SqliteWorker]:
    return _running(SqliteWorker(functools.partial(connect, path)))


def _insert_then(name: str, error: Exception | None, conn: sqlite3.Connection) -> str:
    conn.execute("INSERT INTO clusters(name, data) VALUES (?, '{}')", (name,))
    if error is not None:
        raise error
    return name


def _clusters(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {row[0] for row in conn.execute("SELECT name FROM clusters")}
    finally:
        conn.close()


def test_a_lone_failing_operation_leaves_nothing_and_the_next_one_commits(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"

    async def main() -> None:
        async with _worker(path) as worker:
            # Alone in its batch (nothing else queued): no savepoint, the transaction rolls back.
            with pytest.raises(NotFoundError, match="on purpose"):
                await worker.run(functools.partial(_insert_then, "lost", NotFoundError("on purpose")))
            assert await worker.run(functools.partial(_insert_then, "kept", None)) == "kept"
            # A bug in an operation surfaces as itself, and also undoes its own write.
            with pytest.raises(ZeroDivisionError):
                await worker.run(functools.partial(_insert_then, "bug", ZeroDivisionError()))

    asyncio.run(main())
    assert _clusters(path) == {"kept"}


def test_every_caller_of_a_batch_gets_its_own_answer(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    names = [f"c{i}" for i in range(600)]  # more than one batch (batch_ops_max)

    async def main() -> list[object]:
        async with _worker(path) as worker:
            calls = [
                worker.run(functools.partial(_insert_then, name, NotFoundError(name) if i % 7 == 3 else None))
                for i, name in enumerate(names)
            ]
            return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(main())
    for i, (name, result) in enumerate(zip(names, results, strict=True)):
        if i % 7 == 3:
            assert isinstance(result, NotFoundError) and str(result) == name
        else:
            assert result == name
    # Each failure undid only its own insert, in whichever batch it ran.
    assert _clusters(path) == {name for i, name in enumerate(names) if i % 7 != 3}


def test_the_operations_of_one_turn_of_the_loop_share_their_transactions(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    statements: list[str] = []

    def traced() -> sqlite3.Connection:
        conn = connect(path)
        conn.set_trace_callback(statements.append)
        return conn

    async def main() -> None:
        async with _running(SqliteWorker(traced)) as worker:
            # 300 operations asked in one turn: one hand-over, two transactions (batch_ops_max).
            names = [f"t{i}" for i in range(300)]
            answers = await asyncio.gather(*(worker.run(functools.partial(_insert_then, n, None)) for n in names))
            assert answers == names

    asyncio.run(main())
    assert batch_ops_max < 300 <= 2 * batch_ops_max
    assert statements.count("COMMIT") == 2 and statements.count("BEGIN IMMEDIATE") == 2
    assert _clusters(path) == {f"t{i}" for i in range(300)}


def test_a_failed_commit_fails_every_caller_of_the_batch(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"

    def insert_and_break(name: str, conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO clusters(name, data) VALUES (?, '{}')", (name,))
        # Ends the batch's transaction from inside: its COMMIT then fails (no transaction),
        # as a COMMIT that hits a full disk would, after this job's part went well.
        conn.execute("COMMIT")
        return name

    async def main() -> None:
        async with _worker(path) as worker:
            with pytest.raises(MetadataError, match="metadata store"):
                await worker.run(functools.partial(insert_and_break, "alone"))
            assert await worker.run(functools.partial(_insert_then, "after", None)) == "after"

    asyncio.run(main())


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from velamq.metadata import MetadataStore

    async def main() -> None:
        store = MetadataStore(Path(sys.argv[1]))
        await store.start()
        await asyncio.gather(*(store.create_topic(f"k{i}") for i in range(300)))
        await store.create_topic("last")
        print("replied", flush=True)
        await asyncio.Event().wait()  # killed here

    asyncio.run(main())
    """
)


def test_what_was_answered_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "replied"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)

    async def main() -> list[str]:
        store = MetadataStore(path)
        await store.start()
        try:
            return await store.list_topics("public/default")
        finally:
            await store.close()

    topics = asyncio.run(main())
    expected = {f"persistent://public/default/k{i}" for i in range(300)} | {"persistent://public/default/last"}
    assert set(topics) == expected
