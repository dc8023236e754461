"""Where and when ledgers are offloaded: Pulsar's broker keys, as one value (docs/offload.md).

    managedLedgerOffloadDriver              driver: "filesystem" or "aws-s3" (also "s3")
    fileSystemURI                           uri: the root directory (a path or file:// URI) of the
                                            filesystem driver; default <dataDir>/offloaded
    s3ManagedLedgerOffloadBucket            bucket
    s3ManagedLedgerOffloadServiceEndpoint   endpoint (an S3-compatible server; empty: AWS)
    s3ManagedLedgerOffloadRegion            region
    managedLedgerOffloadThresholdInBytes    threshold_bytes: a topic whose local (not yet
                                            offloaded) ledgers hold more is offloaded, oldest
                                            sealed ledgers first; negative: only when asked
    managedLedgerOffloadDeletionLagMs       deletion_lag_ms: how long the local copy of an
                                            offloaded ledger is kept (Pulsar's default, 4 hours)

S3 credentials are found as Pulsar (and the AWS SDK) finds them: AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY in the environment, then the shared credentials file, then the instance's
role. Nothing here imports pyarrow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DRIVERS = ("filesystem", "aws-s3", "s3")
deletion_lag_ms_default = 4 * 3600 * 1000
OFFLOADED_DIR = "offloaded"  # the filesystem driver's root under the data directory, by default


@dataclass(frozen=True, slots=True)
class OffloadConfig:
    driver: str = "filesystem"
    uri: str = ""  # fileSystemURI; "" means <data_dir>/offloaded
    bucket: str = ""
    endpoint: str = ""
    region: str = ""
    threshold_bytes: int = -1
    deletion_lag_ms: int = deletion_lag_ms_default
    check_interval_s: float = 60.0  # how often loaded topics are checked against the threshold and lag
    row_group_rows: int = 65536  # a row group is the unit a read fetches and caches
    row_group_bytes: int = 16 << 20
    compression: str = "zstd"  # the Parquet files' codec

    def __post_init__(self) -> None:
        if self.driver not in DRIVERS:
            raise ValueError(f"managedLedgerOffloadDriver must be one of {', '.join(DRIVERS)}, not {self.driver!r}")
        if self.is_s3 and not self.bucket:
            raise ValueError("the aws-s3 offload driver needs s3ManagedLedgerOffloadBucket")
        if self.deletion_lag_ms < 0:
            raise ValueError("managedLedgerOffloadDeletionLagMs must not be negative")
        if self.check_interval_s <= 0:
            raise ValueError("the offload check interval must be positive")
        if self.row_group_rows < 1 or self.row_group_bytes < 1:
            raise ValueError("row groups must hold at least one row and one byte")

    @property
    def is_s3(self) -> bool:
        return self.driver in ("aws-s3", "s3")

    def root_dir(self, data_dir: Path) -> str:
        """The filesystem driver's root directory, absolute."""
        uri = self.uri
        if uri.startswith("file://"):
            uri = uri[len("file://") :]
        return str((Path(uri) if uri else Path(data_dir) / OFFLOADED_DIR).absolute())

    def describe(self, data_dir: Path) -> str:
        """Where offloaded ledgers go, for logs and errors."""
        if self.is_s3:
            return f"s3://{self.bucket}" + (f" at {self.endpoint}" if self.endpoint else "")
        return self.root_dir(data_dir)
