"""What the offload reports and what it is told: a topic's offload as the admin API shows it
(Pulsar's OffloadProcessStatus), the storage checker's findings among offloaded files (_check), and
a topic's offload policy (the thresholds and the lag in force for it: the broker resolves them from
namespace policies, storage applies them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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


@dataclass(frozen=True, slots=True)
class OffloadPolicy:
    """When a topic's sealed ledgers are offloaded, and when their local copies go.

    threshold_bytes: offload the oldest sealed ledgers while the ledgers not offloaded hold more
    than this (0: every sealed ledger; negative: never by size). threshold_s: offload every sealed
    ledger sealed longer ago than this (negative: never by age). deletion_lag_ms: delete the local
    copy of a ledger offloaded at least this long ago (negative: keep it)."""

    threshold_bytes: int = -1
    threshold_s: int = -1
    deletion_lag_ms: int = 0

    @property
    def automatic(self) -> bool:
        return self.threshold_bytes >= 0 or self.threshold_s >= 0


# The policies of a page of managed ledgers by name, as the broker resolves them; a name left out
# gets the broker-wide one (OffloadConfig's thresholds and lag).
PolicySource = Callable[[list[str]], Awaitable[dict[str, OffloadPolicy]]]
