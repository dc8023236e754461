"""Storage format 1 (a directory per topic, a file per ledger): migrated at start. Placeholder."""

from __future__ import annotations

from pathlib import Path


def migrate_if_format_1(data_dir: Path, *, sync: bool, log_bytes_max: int) -> bool:
    return False
