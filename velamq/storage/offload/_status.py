"""What the offload reports: a topic's offload as the admin API shows it (Pulsar's
OffloadProcessStatus), and the storage checker's findings among offloaded files (_check)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OffloadState = Literal["NOT_RUN", "RUNNING", "SUCCESS", "ERROR"]


@dataclass(frozen=True, slots=True)
class OffloadStatus:
    """status: NOT_RUN (never asked since the broker started), RUNNING, SUCCESS or ERROR;
    last_error: why the last offload failed ("" otherwise); first_unoffloaded: the first entry
    not offloaded, as (ledger id, entry id), (-1, -1) before the first offload."""

    status: OffloadState = "NOT_RUN"
    last_error: str = ""
    first_unoffloaded: tuple[int, int] = (-1, -1)


@dataclass(frozen=True, slots=True)
class OffloadFinding:
    kind: str
    path: str  # in the store
    detail: str
    bytes: int = 0
    deletable: bool = True
