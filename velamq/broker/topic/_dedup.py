"""Producer deduplication by producer name and sequence id (CO-6, effectively-once publish).

When enabled for a topic (namespace policy `deduplicationEnabled`), the broker remembers for each
producer name the highest sequence id it has accepted ("pushed") and the highest that is durable
("persisted"). A send whose sequence id is not above the pushed one is a duplicate: it is
acknowledged at once with message id (-1, -1) and not stored, as Pulsar does. PRODUCER_SUCCESS
tells a (re)connecting producer the persisted figure, so it resumes after it.

Chunks of one message share a sequence id; only the last chunk moves the figures, so no chunk is
ever dropped as a duplicate of its siblings.

State is rebuilt when the topic loads by reading the producer name and sequence ids of every
stored entry. That costs one pass over the log; a snapshot to bound it is future work.

A message that came from another cluster (replicated_from set, sent by a geo-replicator) counts
under "<origin cluster>/<producer name>" (`origin_name`): the replicator's resends after a restart
are dropped, and a producer that failed over to this cluster and goes on with the same name and
sequence ids does not make the primary's messages replicated later look like duplicates.
"""

from __future__ import annotations

from velamq.protocol import parse_entry_metadata, pb
from velamq.storage import ManagedLedger, Position

scan_batch_entries = 1000


def origin_name(metadata: pb.MessageMetadata) -> str:
    """The deduplication key of a stored message: its producer's name, prefixed by the cluster it
    was replicated from if it was."""
    if metadata.HasField("replicated_from"):
        return f"{metadata.replicated_from}/{metadata.producer_name}"
    return metadata.producer_name


class Deduplication:
    """The deduplication state of one topic: per producer name, the highest sequence id accepted
    ("pushed") and the highest durable one ("persisted")."""

    def __init__(self) -> None:
        self.pushed: dict[str, int] = {}
        self.persisted: dict[str, int] = {}
        self.ready = False

    async def recover(self, ledger: ManagedLedger) -> None:
        """Rebuild the figures from the stored entries."""
        self.pushed.clear()
        self.persisted.clear()
        position = ledger.first_position
        last = ledger.last_confirmed
        while position is not None and last is not None and position <= last:
            entries = await ledger.read_entries(position, scan_batch_entries)
            if not entries:
                break
            for entry in entries:
                metadata = parse_entry_metadata(entry.data)
                if metadata.HasField("num_chunks_from_msg") and metadata.chunk_id != metadata.num_chunks_from_msg - 1:
                    continue
                seq = max(metadata.sequence_id, metadata.highest_sequence_id)
                name = origin_name(metadata)
                if seq > self.persisted.get(name, -1):
                    self.persisted[name] = seq
            position = ledger.next_position(entries[-1].position)
        self.pushed.update(self.persisted)
        self.ready = True

    def last_sequence_id(self, producer_name: str) -> int:
        return self.persisted.get(producer_name, -1)

    def is_duplicate(self, producer_name: str, sequence_id: int, highest_sequence_id: int) -> bool:
        """Check a send and, if it is new, record it as pushed."""
        seq = max(sequence_id, highest_sequence_id)
        if sequence_id <= self.pushed.get(producer_name, -1):
            return True
        self.pushed[producer_name] = seq
        return False

    def persisted_up_to(self, producer_name: str, sequence_id: int) -> None:
        if sequence_id > self.persisted.get(producer_name, -1):
            self.persisted[producer_name] = sequence_id

    def failed(self, producer_name: str) -> None:
        """An append failed: later sends with the same ids must be accepted again."""
        self.pushed[producer_name] = self.persisted.get(producer_name, -1)


DUPLICATE_POSITION = Position(-1, -1)
