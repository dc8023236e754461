"""Replication from a velamq node toward a broker that is not velamq (RP-2): the replicator is an
ordinary Pulsar producer, so any broker that speaks Pulsar's binary protocol can be the remote.

    python benchmarks/replication_interop.py --pulsar-lite [BINARY]
    python benchmarks/replication_interop.py --remote-url pulsar://pulsar-host:6650 --remote-name central

--pulsar-lite starts pulsar-lite (`pip install pulsar-lite`: a Rust broker speaking Pulsar's
protocol, not Apache Pulsar) on a free port as the remote; BINARY defaults to the one the
pulsar_lite package ships. --remote-url uses a broker already running, an Apache Pulsar cluster
for instance: its tenant and namespace (--namespace, default public/geo) must exist there and
accept the velamq cluster's messages (docs/replication.md, "velamq → Apache Pulsar").

A velamq node (cluster "velamq") registers the remote and replicates the namespace to it;
--messages messages (batched, as a client would send them) are published on velamq. Printed: the
replicator's stats (every message receipted by the remote, backlog 0, and how long that took), and
what a reader on the remote (the official client) reads back, beside the same messages published
straight on the remote by the official client, so that what the remote's own reads lose or repeat
is told apart from the replicator. Exit code 0 when the remote receipted every message.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pulsar
from _machine import machine_facts

from velamq.client import AdminClient
from velamq.testing import BrokerProcess, free_port

LOCAL = "velamq"


def _pulsar_lite_binary(given: str) -> str:
    if given:
        return given
    spec = importlib.util.find_spec("pulsar_lite")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("pulsar-lite is not installed: pip install pulsar-lite, or give the binary's path")
    return str(Path(next(iter(spec.submodule_search_locations))) / "bin" / "pulsar-lite")


def _start_pulsar_lite(binary: str, root: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = open(root / "pulsar-lite.log", "wb")  # noqa: SIM115 - open as long as the process runs
    process = subprocess.Popen([binary, "--addr", f"127.0.0.1:{port}", "--db-path", str(root / "pulsar-lite"),
                                "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT, cwd=root)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return process, f"pulsar://127.0.0.1:{port}"
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"pulsar-lite did not start: {(root / 'pulsar-lite.log').read_text()[-2000:]}")
            time.sleep(0.1)


def _replicate(local: BrokerProcess, remote_name: str, remote_url: str, namespace: str) -> None:
    admin = AdminClient(local.admin_url)
    tenant = namespace.split("/")[0]
    admin.request("PUT", AdminClient.path("clusters", remote_name),
                  {"serviceUrl": "http://127.0.0.1:1", "brokerServiceUrl": remote_url})
    admin.request("POST", AdminClient.path("tenants", tenant),
                  {"adminRoles": [], "allowedClusters": [LOCAL, remote_name]})
    admin.request("PUT", AdminClient.namespace_path(namespace), {})
    admin.request("POST", AdminClient.namespace_path(namespace, "replication"), [LOCAL, remote_name])


def _read_back(client: Any, topic: str, n: int) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got: list[bytes] = []
    deadline = time.monotonic() + 120
    quiet_since = time.monotonic()
    while len(got) < n and time.monotonic() < deadline and time.monotonic() - quiet_since < 20:
        try:
            got.append(reader.read_next(2000).data())
            quiet_since = time.monotonic()
        except pulsar.Timeout:
            continue
    reader.close()
    return got


def _publish(client: Any, topic: str, payloads: list[bytes]) -> None:
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5,
                                      block_if_queue_full=True)
    for payload in payloads:
        producer.send_async(payload, None)
    producer.flush()
    producer.close()


def _summary(got: list[bytes], expected: list[bytes]) -> dict[str, Any]:
    return {"arrived": len(got), "distinct": len(set(got)), "in_order": got == expected}


def _run(local: BrokerProcess, remote_name: str, remote_url: str, namespace: str, n: int) -> dict[str, Any]:
    """Through the replicator, and, side by side, published straight on the remote by the official
    client (what the remote's own reads give back, without velamq in the path)."""
    quiet = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    remote_client = pulsar.Client(remote_url, logger=quiet)
    local_client = pulsar.Client(local.service_url, logger=quiet)
    expected = [f"m-{i:06d}".encode() for i in range(n)]
    try:
        topic = f"persistent://{namespace}/interop-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        _publish(local_client, topic, expected)
        admin = AdminClient(local.admin_url)

        def replicator() -> dict[str, Any]:
            stats = admin.request("GET", AdminClient.topic_path(topic, "stats"))["replication"]
            return dict(stats.get(remote_name, {}))

        while replicator().get("replicationBacklog", 1) and time.monotonic() - started < 120:
            time.sleep(0.1)
        receipted_s = time.monotonic() - started
        replicated = _summary(_read_back(remote_client, topic, n), expected)
        direct_topic = f"persistent://{namespace}/direct-{uuid.uuid4().hex[:8]}"
        _publish(remote_client, direct_topic, expected)
        direct = _summary(_read_back(remote_client, direct_topic, n), expected)
        return {"replicated": replicated, "direct": direct, "replicator": replicator(), "receipted_s": receipted_s}
    finally:
        remote_client.close()
        local_client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--pulsar-lite", nargs="?", const="", metavar="BINARY")
    where.add_argument("--remote-url")
    parser.add_argument("--remote-name", default="remote")
    parser.add_argument("--namespace", default="public/geo")
    parser.add_argument("--messages", type=int, default=1000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="velamq-interop-"))
    remote: subprocess.Popen[bytes] | None = None
    local = BrokerProcess(root / LOCAL, ["--cluster-name", LOCAL])
    try:
        if args.remote_url:
            remote_url, remote_kind = args.remote_url, "given broker"
        else:
            remote, remote_url = _start_pulsar_lite(_pulsar_lite_binary(args.pulsar_lite), root)
            remote_kind = "pulsar-lite"
        local.start()
        _replicate(local, args.remote_name, remote_url, args.namespace)
        result = _run(local, args.remote_name, remote_url, args.namespace, args.messages)
    finally:
        local.stop()
        if remote is not None:
            remote.terminate()
            remote.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    for name, value in machine_facts(["pulsar-client", "pulsar-lite"]):
        print(f"{name}: {value}")
    print(f"load average: {os.getloadavg()[0]:.2f}")
    replicator = result["replicator"]
    print(f"\nthe replicator: connected {replicator.get('connected')}, backlog {replicator.get('replicationBacklog')}, "
          f"{replicator.get('msgOutCount')} messages receipted by the remote, the last {result['receipted_s']:.2f} s "
          "after the first publish")
    print("\n| path to the remote | published | read back | distinct | in order |")
    print("|---|---|---|---|---|")
    for path, key in ((f"velamq -> replicator -> {remote_kind}", "replicated"),
                      (f"official client -> {remote_kind} (baseline)", "direct")):
        r = result[key]
        print(f"| {path} | {args.messages} | {r['arrived']} | {r['distinct']} | {r['in_order']} |")
    receipted = replicator.get("msgOutCount") == args.messages and replicator.get("replicationBacklog") == 0
    sys.exit(0 if receipted else 1)

if __name__ == "__main__":
    main()
