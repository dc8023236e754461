"""What does a schema decision cost? (issue 14: PRODUCER / SUBSCRIBE with a schema)

Rows:
  match, parsed         a producer's schema equals a live version (the usual reconnect); parses cached
  match, first parse    the same, but the schemas were never parsed (a broker just restarted)
  new version FULL      a compatible new version checked against the latest of 10
  new version FULL_T.   the same checked against all 10 (FULL_TRANSITIVE)
  register via SQLite   SchemaRegistry.register of an existing version, through the metadata thread

    python benchmarks/schema_registry.py [--seconds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _machine import machine_facts

from velamq.metadata._schema import connect
from velamq.metadata._schema_compat import _canonical_text, _parsed, decide_producer
from velamq.metadata._schema_info import SchemaData, SchemaType, StoredSchema, Strategy
from velamq.metadata._schema_registry import SchemaRegistry
from velamq.metadata._worker import SqliteWorker

FIELD_TYPES = ["int", "long", "string", "double", "boolean", ["null", "string"], {"type": "array", "items": "long"}]


def version(n: int) -> SchemaData:
    """A 20-field record; version n adds n optional fields with defaults (each one FULL-compatible)."""
    fields: list[dict[str, Any]] = [{"name": f"f{i}", "type": FIELD_TYPES[i % len(FIELD_TYPES)]} for i in range(20)]
    fields += [{"name": f"extra{i}", "type": ["null", "string"], "default": None} for i in range(n)]
    return SchemaData(SchemaType.AVRO, json.dumps({"type": "record", "name": "Event", "fields": fields}).encode())


def rate(fn: Callable[[], object], seconds: float, before_each: Callable[[], object] | None = None) -> float:
    """Calls per second of `fn` (time of `before_each` excluded)."""
    done, spent = 0, 0.0
    while spent < seconds:
        if before_each is not None:
            before_each()
        start = time.perf_counter()
        fn()
        spent += time.perf_counter() - start
        done += 1
    return done / spent


async def registry_rate(seconds: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        worker = SqliteWorker(functools.partial(connect, Path(tmp) / "metadata.db"))
        await worker.start()
        registry = SchemaRegistry(worker.run)
        for n in range(10):
            await registry.register("bench", version(n), Strategy.FULL)
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            await asyncio.gather(*(registry.register("bench", version(9), Strategy.FULL) for _ in range(100)))
            done += 100
        elapsed = time.perf_counter() - start
        await worker.close()
        return done / elapsed


def clear_caches() -> None:
    _parsed.cache_clear()
    _canonical_text.cache_clear()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per row")
    args = parser.parse_args(argv)
    history = [StoredSchema(n, version(n), 0) for n in range(10)]
    new = version(10)
    rows = [
        ("match, parsed", rate(lambda: decide_producer(history, version(9), Strategy.FULL), args.seconds)),
        ("match, first parse", rate(lambda: decide_producer(history, version(9), Strategy.FULL), args.seconds,
                                    before_each=clear_caches)),
        ("new version FULL", rate(lambda: decide_producer(history, new, Strategy.FULL), args.seconds)),
        ("new version FULL_T.", rate(lambda: decide_producer(history, new, Strategy.FULL_TRANSITIVE), args.seconds)),
        ("register via SQLite", asyncio.run(registry_rate(args.seconds))),
    ]
    print(__doc__.split("\n")[0])
    for name, value in machine_facts(["fastavro"]):
        print(f"  {name}: {value}")
    print(f"\n  {'decision':<22}{'per second':>12}{'us each':>10}")
    for name, per_s in rows:
        print(f"  {name:<22}{per_s:>12,.0f}{1e6 / per_s:>10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
