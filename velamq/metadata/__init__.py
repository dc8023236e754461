"""The metadata store: tenants, namespaces, policies and topics, in SQLite (tier 1).

    store = MetadataStore(data_dir / "metadata.db")
    await store.start()            # schema + cluster "standalone", tenant "public", "public/default"
    await store.create_partitioned_topic("persistent://public/default/t", 3)
    await store.get_partitions("persistent://public/default/t")   # 3 (cached for lookups)
    await store.set_topic_policy("persistent://public/default/t", "messageTTLInSeconds", 60)
    resolve_policies(await store.get_policies("public/default"),
                     await store.get_topic_policies("persistent://public/default/t"), Policies())
    await store.close()

`get_policies` gives a fresh dict each time; `namespace_policies` the same policies read-only, one
shared object until they change (for readers on every topic load).

Errors: NotFoundError, AlreadyExistsError, PreconditionFailedError, MetadataError (velamq._errors),
and InvalidTopicNameError for names that do not parse.

Schemas (docs/schemas.md): `store.schemas`, a `SchemaRegistry`, keeps every topic's versions in the
same SQLite file and decides, with Pulsar's compatibility strategies, which version a producer or
consumer schema gets (SchemaCompatibilityError, InvalidSchemaDataError); deleting a topic deletes
its schemas.

    await store.schemas.register("persistent://public/default/t", schema, Strategy.FULL)  # (0, True)

Several worker processes share one file (docs/workers.md): each opens its own store with
`shared=True`, which watches for the others' commits (`PRAGMA data_version`, every ~100 ms), drops
its caches when one came and awaits the callbacks given to `on_external_change`. Every write takes
the file's write lock before it reads (BEGIN IMMEDIATE), so no update is lost between processes;
`update_policy` / `update_topic_policy` change one policy from its current value in one step.
Namespace bundles (`get_namespace_bundles`, their `bundles` policy set at creation from
`default_bundles_count`), the workers' rows (`register_worker`, `list_workers`, WorkerInfo) and
explicit bundle owners (`set_bundle_owner`, `get_bundle_owners`) are in _store_cluster.py.
"""

from velamq.metadata._ownership_ops import WorkerInfo
from velamq.metadata._policies import BacklogQuota, Policies, resolve_policies
from velamq.metadata._schema import DEFAULT_CLUSTER, DEFAULT_NAMESPACE, DEFAULT_TENANT
from velamq.metadata._schema_info import (
    InvalidSchemaDataError,
    SchemaCompatibilityError,
    SchemaData,
    SchemaType,
    StoredSchema,
    Strategy,
    allow_auto_update,
    decode_version,
    effective_strategy,
    encode_version,
    schema_id,
    validation_enforced,
)
from velamq.metadata._schema_json import get_schema_response, schema_from_payload
from velamq.metadata._schema_registry import SchemaRegistry
from velamq.metadata._store import MetadataStore, TopicOpen, partitions_max
from velamq.metadata._topic_pages import TopicListing

__all__ = [
    "DEFAULT_CLUSTER",
    "DEFAULT_NAMESPACE",
    "DEFAULT_TENANT",
    "BacklogQuota",
    "InvalidSchemaDataError",
    "MetadataStore",
    "Policies",
    "SchemaCompatibilityError",
    "SchemaData",
    "SchemaRegistry",
    "SchemaType",
    "StoredSchema",
    "Strategy",
    "TopicListing",
    "TopicOpen",
    "WorkerInfo",
    "allow_auto_update",
    "decode_version",
    "effective_strategy",
    "encode_version",
    "get_schema_response",
    "partitions_max",
    "resolve_policies",
    "schema_from_payload",
    "schema_id",
    "validation_enforced",
]
