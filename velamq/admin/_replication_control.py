"""What the admin tier asks of the server's geo-replication (velamq.replication.ReplicationService
implements it; velamq/server.py hands it to the AdminServer). Without it (a broker run without the
composition root) topic stats show an empty replication map and cluster changes reach nobody.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol


class ReplicatorFigures(Protocol):
    """One replicator's figures (velamq.replication's ReplicatorStats has them)."""

    @property
    def connected(self) -> bool: ...
    @property
    def replication_backlog(self) -> int: ...
    @property
    def msg_rate_out(self) -> float: ...
    @property
    def msg_throughput_out(self) -> float: ...
    @property
    def replication_delay_s(self) -> float: ...
    @property
    def msg_out_total(self) -> int: ...
    @property
    def bytes_out_total(self) -> int: ...
    @property
    def producer_name(self) -> str: ...
    @property
    def outbound_connection(self) -> str: ...


class ReplicationControl(Protocol):
    """What the admin tier asks of the server's replication (velamq.replication.ReplicationService)."""

    def topic_stats(self, topic: str) -> Mapping[str, ReplicatorFigures]: ...

    def all_stats(self) -> Iterable[tuple[str, str, ReplicatorFigures]]:
        """(topic, remote cluster, figures) of every replicator."""
        ...

    async def clusters_changed(self, cluster: str) -> None: ...
