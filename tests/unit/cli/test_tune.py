"""`velamq tune` prints vivo's producer tuning template (PR-12) as ProducerConfig.tuned derives it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from velamq._limits import MIB
from velamq.cli._main import main
from velamq.cli._tune import derive, human_bytes, parse_size_bytes
from velamq.client import ProducerConfig

ARGS = ["tune", "--message-bytes", "1024", "--partitions", "8", "--memory", "512M", "--max-delay-ms", "10"]


def test_table_shows_every_setting_with_its_formula(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(ARGS) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert rows["max_pending_messages"][2] == "2000"
    assert rows["max_pending_messages_across_partitions"][2] == "16000"
    assert rows["memory_limit_bytes"][3] == str(2000 * 8 * 1024)
    assert rows["batching_max_messages"][2] == "1000"
    assert rows["batching_max_bytes"][2] == str(min(2000 * 8 * 1024 // 8 // 2, MIB))
    assert rows["batching_max_publish_delay_ms"][1:3] == ["batchingMaxPublishDelayMicros=10000", "10"]
    assert rows["batching_partition_switch_frequency_by_publish_delay"][2] == "1"
    assert "maxPendingMessages / 2" in out and "min(memoryLimit / partitions / 2, 1 MiB)" in out
    assert "ProducerConfig.tuned(1024, 8, 536870912, 10)" in out
    assert "warning" not in out


def test_json_is_the_same_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    tuned = ProducerConfig.tuned(1024, 8, 512 * MIB, 10)
    assert result["inputs"] == {"message_bytes": 1024, "partitions": 8, "memory_budget_bytes": 512 * MIB,
                                "max_delay_ms": 10}
    for name, value in result["producer"].items():
        assert getattr(tuned, name) == value, name
    assert result["client"]["memory_limit_bytes"] == tuned.memory_limit_bytes
    assert result["java"]["batchingMaxPublishDelayMicros"] == 10_000
    assert result["java"]["messageRoutingMode"] == "RoundRobinPartition"


def test_a_small_budget_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "--message-bytes", "4096", "--partitions", "64", "--memory", "64M",
                 "--max-delay-ms", "500", "--compression", "lz4"]) == 0
    out = capsys.readouterr().out
    assert "warning: only 256 pending messages" in out
    assert "compression_type" in out and " 100 " in out  # the delay is clamped to 100 ms
    assert derive(4096, 64, 64 * MIB, 500, "lz4")["producer"]["compression_type"] == "lz4"


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "--message-bytes", "1024", "--partitions", "8", "--memory", "lots"]) == 2
    assert main(["tune", "--message-bytes", "0", "--partitions", "8", "--memory", "1G"]) == 2
    assert "velamq tune:" in capsys.readouterr().err


def test_sizes() -> None:
    assert parse_size_bytes("512M") == 512 * MIB == parse_size_bytes("512MiB") == parse_size_bytes("512 mb")
    assert parse_size_bytes("4096") == 4096 and parse_size_bytes("1.5K") == 1536
    assert parse_size_bytes("2g") == 2048 * MIB
    with pytest.raises(ValueError):
        parse_size_bytes("12 parsecs")
    assert human_bytes(16_384_000) == "15.6 MiB" and human_bytes(10) == "10 B"


def test_the_console_script_has_the_subcommand() -> None:
    out = subprocess.run([sys.executable, "-m", "velamq", *ARGS, "--json"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert json.loads(out)["producer"]["max_pending_messages"] == 2000
