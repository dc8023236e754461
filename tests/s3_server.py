"""An S3-compatible server for the offload tests: moto's server mode (PyPI moto[server]), started
as a child process on a free port. Chosen over Ceph's radosgw because it installs from PyPI with the
test extras and starts in about a second; it speaks the S3 REST API that pyarrow's S3 filesystem
(the AWS SDK) uses, with path-style addressing (a unique module name)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from wait_helpers import wait_until

from velamq.testing import free_port

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "velamq-test", "AWS_SECRET_ACCESS_KEY": "velamq-test-secret"}
REGION = "us-east-1"
start_timeout_s = 30.0


class S3Server:
    def __init__(self) -> None:
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        proc = self._proc
        wait_until(lambda: proc.poll() is not None or self._accepting(), "moto's S3 server listening",
                   timeout_s=start_timeout_s)
        if proc.poll() is not None:
            raise RuntimeError(f"moto's S3 server exited with code {proc.returncode} before listening")

    def _accepting(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.5).close()
            return True
        except OSError:
            return False

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def create_bucket(self, bucket: str) -> None:
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(endpoint_override=self.endpoint, scheme="http", region=REGION,
                               allow_bucket_creation=True, access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                               secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
        fs.create_dir(bucket)

    def keys(self, bucket: str) -> list[str]:
        """Every object key in the bucket (directory markers left out)."""
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(endpoint_override=self.endpoint, scheme="http", region=REGION,
                               access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                               secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
        infos = fs.get_file_info(pafs.FileSelector(bucket, recursive=True))
        return sorted(i.path.removeprefix(bucket + "/") for i in infos if i.type == pafs.FileType.File)


@contextmanager
def s3_server() -> Iterator[S3Server]:
    server = S3Server()
    server.start()
    try:
        yield server
    finally:
        server.stop()
