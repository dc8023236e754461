"""What machine a benchmark ran on: printed with every table so figures can be compared."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
from collections.abc import Sequence


def machine_facts(packages: Sequence[str] = ()) -> list[tuple[str, str]]:
    """CPU model, cores, RAM, OS, Python, and the versions of the given packages."""
    cpu = platform.processor() or "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram = "unknown"
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    facts = [
        ("CPU", cpu),
        ("cores", str(os.cpu_count())),
        ("RAM", ram),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("Python", platform.python_version()),
    ]
    for package in packages:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            facts.append((package, importlib.metadata.version(package)))
    return facts


def facts_and_load(facts: Sequence[tuple[str, str]], load_before: Sequence[float],
                   load_after: Sequence[float]) -> str:
    """The Markdown list a report opens with: the machine's facts, then the load average (1, 5,
    15 min) before and after the runs."""
    def loads(values: Sequence[float]) -> str:
        return " ".join(f"{x:.2f}" for x in values)

    lines = [f"- {k}: {v}" for k, v in facts]
    lines.append(f"- load average (1, 5, 15 min): before {loads(load_before)}, after {loads(load_after)}")
    return "\n".join(lines)
