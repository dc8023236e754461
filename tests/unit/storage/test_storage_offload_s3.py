"""The aws-s3 offload driver against a real S3-compatible server (moto's server mode, started by
the test): offload, reads of offloaded ledgers once the local copies are gone, retention deleting
the objects; with the server down, offloading fails and says so while appends and local reads go
on (TS-6)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _offload_entries import mixed_entries, offloading
from _storage_testing import TOPIC, read_everything, run
from s3_server import CREDENTIALS, REGION, s3_server
from wait_helpers import until

from velamq.storage import OffloadConfig

BUCKET = "velamq-offload"


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)


def s3_config(endpoint: str, **kwargs: object) -> OffloadConfig:
    return OffloadConfig("aws-s3", bucket=BUCKET, endpoint=endpoint, region=REGION, check_interval_s=3600.0,
                         **kwargs)  # type: ignore[arg-type]


def test_offload_to_s3_and_read_back(tmp_path: Path) -> None:
    entries = mixed_entries(30)

    async def main(endpoint: str) -> list[str]:
        async with offloading(tmp_path, ledger_entries_max=10, offload=s3_config(endpoint, deletion_lag_ms=0)) as st:
            ml = await st.open_ledger(TOPIC)
            positions = [await ml.append(e) for e in entries]
            assert st.request_offload(ml, positions[-1])
            await until(lambda: st.offload_status(TOPIC).status != "RUNNING")
            assert st.offload_status(TOPIC).status == "SUCCESS", st.offload_status(TOPIC)
            await st.flush()
            await st.check_offload()
            assert [i.local for i in ml.ledgers()] == [False, False, True]
            st.read_cache.clear()
            assert await read_everything(st, TOPIC) == list(zip(positions, entries, strict=True))
            keys = server.keys(BUCKET)
            await ml.trim(positions[9])
            await until(lambda: len(server.keys(BUCKET)) == len(keys) - 2)
            return keys

    with s3_server() as server:
        server.create_bucket(BUCKET)
        keys = run(main(server.endpoint))
    assert len(keys) == 4 and sum(k.endswith(".parquet") for k in keys) == 2
    assert all(k.startswith("persistent/public/default/t/") for k in keys)


def test_a_store_that_is_down_delays_offload_and_blocks_nothing(tmp_path: Path) -> None:
    entries = mixed_entries(20)

    async def main(endpoint: str, stop: object) -> None:
        async with offloading(tmp_path, ledger_entries_max=5, offload=s3_config(endpoint)) as st:
            ml = await st.open_ledger(TOPIC)
            positions = [await ml.append(e) for e in entries]
            stop()  # type: ignore[operator]
            assert st.request_offload(ml, positions[-1])
            # While the offload waits on the store, appends and local reads go on.
            more = [await ml.append(b"during-%d" % i) for i in range(5)]
            assert [d for _, d in await read_everything(st, TOPIC)] == [*entries, *(b"during-%d" % i for i in range(5))]
            await until(lambda: st.offload_status(TOPIC).status == "ERROR", timeout_s=120)
            assert st.offload_status(TOPIC).last_error
            assert st.metrics()["velamq_storage_offload_errors_total"] == 1
            assert all(i.offloaded_ms is None for i in ml.ledgers()) and more

    with s3_server() as server:
        server.create_bucket(BUCKET)
        run(main(server.endpoint, server.stop))
