"""The metadata a broker of several worker processes shares about itself (docs/workers.md):

    await store.register_worker(WorkerInfo(0, "pulsar://h:6651", None, "http://h:8081", None, pid, now_ms))
    await store.list_workers()                       # (WorkerInfo(0, ...), ...) by id
    await store.forget_workers_from(2)               # the broker now runs 2 workers: rows 2.. go
    await store.get_namespace_bundles("public/default")            # NamespaceBundles (cached)
    await store.set_bundle_owner("public/default", "0x00000000_0x40000000", 1)
    await store.get_bundle_owners("public/default")  # {"0x00000000_0x40000000": 1} (cached)
    await store.clear_bundle_owners("public/default")

The answers asked on every lookup (bundles, owners, workers) are cached on the loop; a shared
store's watcher drops them when another worker commits, so a move written by one worker is seen by
every other within about one watch interval.
"""

from __future__ import annotations

from velamq._bundles import BundleError, NamespaceBundles, parse_bundle
from velamq._errors import PreconditionFailedError
from velamq.metadata import _ops
from velamq.metadata import _ownership_ops as _own
from velamq.metadata._names import check_namespace
from velamq.metadata._ownership_ops import BUNDLES_KEY, WorkerInfo
from velamq.metadata._store_core import WHOLE, StoreCore


def _check_worker_id(worker: int) -> int:
    if isinstance(worker, bool) or not isinstance(worker, int) or worker < 0:
        raise PreconditionFailedError(f"a worker id is an integer >= 0, not {worker!r}")
    return worker


class ClusterMetadata(StoreCore):
    """Workers, namespace bundles and bundle owners (see the module docstring)."""

    # ------------------------------------------------------------------------ workers

    async def register_worker(self, info: WorkerInfo) -> None:
        """Record a worker's URLs, replacing whatever row its id had (a restarted worker)."""
        if not isinstance(info, WorkerInfo):
            raise TypeError("register_worker takes a WorkerInfo")
        _check_worker_id(info.id)
        await self._write((self._workers,), WHOLE, _own.register_worker, info=info)

    async def list_workers(self) -> tuple[WorkerInfo, ...]:
        """Every registered worker, by id (cached)."""
        return await self._cached(self._workers, WHOLE, _own.list_workers)

    async def forget_workers_from(self, first: int) -> int:
        """Remove the rows of workers `first` and above; how many there were."""
        return await self._write((self._workers,), WHOLE, _own.forget_workers_from, first=_check_worker_id(first))

    # ------------------------------------------------------------------------ bundles

    async def get_namespace_bundles(self, ns: str) -> NamespaceBundles:
        """The namespace's bundles, from its `bundles` policy (the default count if it has none).
        NotFoundError if there is no such namespace."""
        ns, _ = check_namespace(ns)
        hit = self._bundles.get(ns)
        if hit is not None:
            return hit
        generation = self._bundles.generation
        policies = await self._cached(self._policies, ns, _ops.get_policies_stored, ns=ns)
        stored = policies.view.get(BUNDLES_KEY)
        try:
            bundles = NamespaceBundles.from_policy(stored, self.default_bundles_count)
        except BundleError as exc:
            raise PreconditionFailedError(f"namespace {ns} has malformed bundles: {exc}") from None
        self._bundles.put_if_current(ns, bundles, generation)
        return bundles

    async def set_bundle_owner(self, ns: str, bundle: str, worker: int) -> None:
        """Record that `worker` owns the bundle (name "0x..._0x...", one of the namespace's)."""
        ns, _ = check_namespace(ns)
        _check_worker_id(worker)
        try:
            bundle_range = parse_bundle(bundle)
            (await self.get_namespace_bundles(ns)).index_of_range(bundle_range)
        except BundleError as exc:
            raise PreconditionFailedError(str(exc)) from None
        await self._write(
            (self._owners,), ns, _own.set_bundle_owner, ns=ns, bundle=bundle_range.name, worker=worker
        )

    async def get_bundle_owners(self, ns: str, fresh: bool = False) -> dict[str, int]:
        """The explicit owners of the namespace's bundles, {bundle name: worker id} (cached; a fresh
        dict each time; `fresh`: read again, whatever the cache holds). Bundles without one have
        their default owner."""
        ns, _ = check_namespace(ns)
        if fresh:
            self._owners.invalidate(ns)
        owners = await self._cached(self._owners, ns, _own.get_bundle_owners, ns=ns)
        return dict(owners)

    async def clear_bundle_owners(self, ns: str) -> int:
        """Forget the namespace's explicit owners (every bundle back to its default owner)."""
        ns, _ = check_namespace(ns)
        return await self._write((self._owners,), ns, _own.clear_bundle_owners, ns=ns)
