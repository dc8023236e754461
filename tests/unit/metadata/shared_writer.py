"""What one process does to a metadata file another process writes at the same time
(test_metadata_shared.py runs it in spawned processes; a module of its own so the child can import
it by name). Every write here is a read-modify-write somewhere: a topic row checked then inserted,
a namespace's policies read then rewritten, a partition count read then raised."""

from __future__ import annotations

import asyncio
import contextlib
from multiprocessing.synchronize import Barrier
from pathlib import Path

from velamq._errors import AlreadyExistsError
from velamq.metadata import MetadataStore

NS = "public/shared"
TOPICS_EACH = 200  # topics only this process creates
COMMON_TOPICS = 100  # topics both processes create (open_topic with create=True)
PARTITIONED_EACH = 20
POLICY_KEYS_EACH = 40  # policies of one namespace, a key per process and index
INCREMENTS_EACH = 40  # update_policy increments of one shared counter


def topic(name: str) -> str:
    return f"persistent://{NS}/{name}"


async def _work(path: Path, me: int, barrier: Barrier) -> None:
    # Both processes open a file that does not exist yet: creating its tables, the defaults and the
    # namespace are races too.
    store = MetadataStore(path, shared=True, watch_interval_s=0.01)
    await store.start()
    try:
        with contextlib.suppress(AlreadyExistsError):
            await store.create_namespace(NS)
        await asyncio.to_thread(barrier.wait, 60)
        jobs = [store.open_topic(topic(f"t-{me}-{i}"), create=True) for i in range(TOPICS_EACH)]
        jobs += [store.open_topic(topic(f"common-{i}"), create=True) for i in range(COMMON_TOPICS)]
        jobs += [store.create_partitioned_topic(topic(f"p-{me}-{i}"), 2) for i in range(PARTITIONED_EACH)]
        jobs += [store.set_policy(NS, f"key-{me}-{i}", i) for i in range(POLICY_KEYS_EACH)]
        jobs += [store.update_policy(NS, "counter", lambda v: (v or 0) + 1) for _ in range(INCREMENTS_EACH)]
        await asyncio.gather(*jobs)
        await asyncio.to_thread(barrier.wait, 60)  # both processes' partitioned topics exist now
        # Both processes raise every partitioned topic to 4 partitions: whichever comes second finds
        # 4 already there (a no-op), as when two admins do the same at once.
        await asyncio.gather(*(
            store.update_partitions(topic(f"p-{owner}-{i}"), 4)
            for owner in (0, 1) for i in range(PARTITIONED_EACH)
        ))
    finally:
        await store.close()


def write_concurrently(path: str, me: int, barrier: Barrier) -> None:
    """A process's body: the exit code says whether every operation succeeded."""
    asyncio.run(_work(Path(path), me, barrier))
