"""velamq admin storage check and schemas: a schema in use is never reported (BR-9); one no topic
carries (uploaded before its topic was created) is reported, and never deleted."""

from __future__ import annotations

import json
from pathlib import Path

from _storage_testing import run

from velamq.metadata import MetadataStore, SchemaData, SchemaType, Strategy

NS = "persistent://public/default/"
SCHEMA = SchemaData(
    SchemaType.AVRO,
    json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}).encode(),
)


async def build(data_dir: Path) -> None:
    store = MetadataStore(data_dir / "metadata.db")
    await store.start()
    try:
        await store.create_topic(NS + "plain")
        await store.create_partitioned_topic(NS + "parted", 2)  # no partition used yet
        await store.create_topic("non-persistent://public/default/fleeting")
        for name in (NS + "plain", NS + "parted-partition-1", NS + "fleeting", NS + "not-yet"):
            await store.schemas.register(name, SCHEMA, Strategy.FULL)
    finally:
        await store.close()


def test_only_schemas_no_topic_carries_are_reported(tmp_path: Path) -> None:
    from velamq.cli._storage_check import check_storage, delete_findings

    run(build(tmp_path))
    report = check_storage(tmp_path)
    found = [(f.kind, f.detail, f.deletable) for f in report.findings]
    assert found == [("schema without topic", "schemas of public/default/not-yet: no topic carries it", False)]
    assert delete_findings(report) == []

    async def kept() -> list[str]:
        store = MetadataStore(tmp_path / "metadata.db")
        await store.start()
        try:
            return await store.schemas.list_ids("public/default")
        finally:
            await store.close()

    assert run(kept()) == ["public/default/fleeting", "public/default/not-yet", "public/default/parted",
                           "public/default/plain"]
