"""A `velamq standalone` child process on free ports, started and stopped like a real deployment."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from velamq.broker import BrokerConfig

READY_MARKER = "velamq standalone ready"
_WORKER_READY = re.compile(r"velamq worker (\d+) of \d+ ready: pid=(\d+)")
PORT_TAKEN_MARKER = "[Errno 98]"  # `velamq: cannot start: [Errno 98] Address already in use`
start_timeout_s = 30.0
port_attempts = 3  # a first start whose free port was taken meanwhile tries new ones


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """One broker process. Ports and data dir stay the same across stop/kill and start."""

    def __init__(
        self,
        data_dir: Path,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
        *,
        fd_limit: int | None = None,
        config_file: Path | None = None,
        workers: int = 1,
    ) -> None:
        """workers: `--workers` (several broker processes under a supervisor: the process this
        object runs is the supervisor; `worker_pids` names the workers). fd_limit: RLIMIT_NOFILE
        (soft and hard) of the broker process, as `ulimit -n` would set it.
        config_file: a Pulsar-style config (`--config`); its plain ports are replaced by free ones,
        its TLS port (brokerServicePortTls, e.g. a free_port() written by the test) is kept."""
        self.data_dir = data_dir
        self.fd_limit = fd_limit
        self.broker_port = free_port()
        self.http_port = free_port()
        self.broker_port_tls: int | None = None
        self.extra_args = list(extra_args)
        self.workers = workers
        if workers != 1:
            self.extra_args += ["--workers", str(workers)]
        if config_file is not None:
            self.broker_port_tls = BrokerConfig.from_file(config_file).security.broker_port_tls
            self.extra_args = ["--config", str(config_file), *self.extra_args]
        self.log_path = log_path or (data_dir.parent / f"{data_dir.name}.log")
        self._proc: subprocess.Popen[str] | None = None
        self._lines: list[str] = []
        self._started = False  # once started, the ports are known to clients and stay

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.broker_port}"

    @property
    def service_url_tls(self) -> str | None:
        if self.broker_port_tls is None:
            return None
        return f"pulsar+ssl://localhost:{self.broker_port_tls}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def worker_pids(self) -> dict[int, int]:
        """The pid of each worker as it last said it was ready (a restarted worker's new pid)."""
        pids: dict[int, int] = {}
        for line in list(self._lines):
            found = _WORKER_READY.search(line)
            if found is not None:
                pids[int(found.group(1))] = int(found.group(2))
        return pids

    def worker_lines(self) -> list[str]:
        """The start lines of the workers (what each owns and where it listens), oldest first."""
        return [line for line in list(self._lines) if _WORKER_READY.search(line)]

    @property
    def output(self) -> str:
        """Everything the broker printed so far (stdout and stderr)."""
        return "".join(self._lines)

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            raise RuntimeError("broker already running")
        for attempt in range(1, port_attempts + 1):
            if self._start_once():
                self._started = True
                return
            # free_port() only says the port was free when asked: another process (a parallel test
            # run, a client's outgoing connection) may bind it before the broker does. Before the
            # first start nothing knows our ports yet, so other free ones do as well.
            if self._started or attempt == port_attempts:
                raise RuntimeError(f"broker did not start:\n{self.output[-4000:]}")
            self.broker_port, self.http_port = free_port(), free_port()

    def _start_once(self) -> bool:
        """Start the process and wait until it is ready: True; False if a port was in use."""
        first_line = len(self._lines)  # this attempt's output starts here
        cmd = [
            sys.executable, "-m", "velamq", "standalone",
            "--data-dir", str(self.data_dir),
            "--broker-port", str(self.broker_port),
            "--http-port", str(self.http_port),
            "--advertised-address", "127.0.0.1",
            *self.extra_args,
        ]
        fd_limit = self.fd_limit

        def limit_fds() -> None:
            if fd_limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))

        self._proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=limit_fds if fd_limit is not None else None,
        )
        ready = threading.Event()
        proc = self._proc

        def pump() -> None:
            assert proc.stdout is not None
            with open(self.log_path, "a") as log:
                for line in proc.stdout:
                    self._lines.append(line)
                    log.write(line)
                    log.flush()
                    if READY_MARKER in line:
                        ready.set()

        pumping = threading.Thread(target=pump, daemon=True, name="broker-output")
        pumping.start()
        deadline = time.monotonic() + start_timeout_s
        while not ready.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pumping.join(5)  # the last lines, which say why it exited
                if PORT_TAKEN_MARKER in "".join(self._lines[first_line:]):
                    return False
                raise RuntimeError(f"broker did not start:\n{self.output[-4000:]}")
        return True

    def stop(self, timeout_s: float = 15.0) -> int:
        """SIGTERM and wait: a clean shutdown. Returns the exit code."""
        proc = self._proc
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._proc = None
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash would: nothing is flushed."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        self._proc = None


@contextlib.contextmanager
def run_broker(
    data_dir: str | Path | None = None,
    extra_args: Sequence[str] = (),
    *,
    fd_limit: int | None = None,
    config_file: Path | None = None,
    workers: int = 1,
) -> Iterator[BrokerProcess]:
    """Start a broker on free ports; stop it (SIGTERM) and remove a temporary data dir on exit.
    fd_limit: the broker process's RLIMIT_NOFILE (`ulimit -n`); config_file, workers: see
    BrokerProcess."""
    tmp = None
    if data_dir is None:
        tmp = tempfile.mkdtemp(prefix="velamq-test-")
        data_dir = Path(tmp) / "data"
    broker = BrokerProcess(Path(data_dir), extra_args, fd_limit=fd_limit, config_file=config_file, workers=workers)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
