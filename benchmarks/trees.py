"""Does a change cost anything? One benchmark run against two source trees, side by side.

Runs a benchmark script of this directory against a `before` tree and an `after` tree (each a
checkout of velamq: a git worktree of an older commit, say), alternating before/after for
`--rounds` rounds so that the machine's load falls on both alike, and prints the median of every
number of the benchmark's first table for each tree, with the ratio after / before. The benchmark
itself is the after tree's copy, run with PYTHONPATH pointing at each tree in turn, so both trees
are measured by the same code.

    git worktree add --detach /tmp/before HEAD~3
    .venv/bin/python benchmarks/trees.py --before /tmp/before --after . --rounds 3 -- \\
        benchmarks/produce_consume.py --loops asyncio --batched 200000 --unbatched 50000

Text columns of a row name it (loop, mode, ...); numeric columns are compared. A figure is the
median of the rounds, never the best one; the load average before and after each run is printed.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

Row = tuple[str, ...]
Table = tuple[list[str], dict[Row, list[float | None]]]

_NUMBER = re.compile(r"^-?[\d,]*\.?\d+x?$")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _number(cell: str) -> float | None:
    cell = cell.replace(",", "").rstrip("x")
    try:
        return float(cell)
    except ValueError:
        return None


def first_table(output: str) -> Table:
    """The first markdown table of a benchmark's output: its header, and each row's numbers by the
    row's leading text cells (its name). A cell "a / b" (two figures side by side) gives two
    columns, "<header> (1)" and "<header> (2)"."""
    lines = [line for line in output.splitlines() if line.strip().startswith("|")]
    if len(lines) < 3:
        raise ValueError("the benchmark printed no table")
    header = _cells(lines[0])
    columns: list[str] = []
    rows: dict[Row, list[float | None]] = {}
    for line in lines[2:]:
        cells = _cells(line)
        if len(cells) != len(header) or set(line.replace("|", "").strip()) <= {"-", " "}:
            break  # a second table starts
        name_cells = 0
        while name_cells < len(cells) and not _is_figure(cells[name_cells]):
            name_cells += 1
        values: list[float | None] = []
        names: list[str] = []
        for title, cell in zip(header[name_cells:], cells[name_cells:], strict=True):
            parts = [p.strip() for p in cell.split("/")] if "/" in cell else [cell]
            for i, part in enumerate(parts, 1):
                names.append(f"{title} ({i})" if len(parts) > 1 else title)
                values.append(_number(part))
        columns = columns if len(columns) >= len(names) else names
        rows[tuple(cells[:name_cells])] = values
    return columns, rows


def _is_figure(cell: str) -> bool:
    return cell == "-" or any(_NUMBER.match(part.strip().replace(" ", "")) for part in cell.split("/"))


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def run_once(tree: Path, command: list[str]) -> str:
    # Run from the tree's root: a broker started with `python -m velamq` (velamq.testing) imports
    # from its working directory before PYTHONPATH, so a broker started elsewhere runs another tree.
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    script, *args = command
    command = [str(Path(script).resolve()), *args]
    result = subprocess.run(
        [sys.executable, *command], capture_output=True, text=True, env=env, timeout=3600, cwd=tree.resolve()
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} against {tree} exited {result.returncode}:\n{result.stderr[-2000:]}")
    return result.stdout


def compare(before: list[Table], after: list[Table]) -> list[str]:
    columns = before[0][0]
    lines = [
        "| row | column | before (median) | after (median) | after / before |",
        "|---|---|---|---|---|",
    ]
    for key in before[0][1]:
        for i, title in enumerate(columns):
            b = [v for t in before if key in t[1] and i < len(t[1][key]) and (v := t[1][key][i]) is not None]
            a = [v for t in after if key in t[1] and i < len(t[1][key]) and (v := t[1][key][i]) is not None]
            if not b or not a:
                continue
            mb, ma = statistics.median(b), statistics.median(a)
            ratio = f"{ma / mb:.2f}x" if mb else "-"
            lines.append(f"| {' / '.join(key)} | {title} | {mb:,.2f} | {ma:,.2f} | {ratio} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="the tree before the change")
    ap.add_argument("--after", type=Path, default=Path("."), help="the tree after it (default: this one)")
    ap.add_argument("--rounds", type=int, default=3, help="before/after pairs, alternating (median of them)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- benchmark script and its arguments")
    args = ap.parse_args()
    command = [c for c in args.command if c != "--"]
    if not command:
        ap.error("give the benchmark after --")
    before: list[Table] = []
    after: list[Table] = []
    for round_number in range(1, args.rounds + 1):
        for label, tree, into in (("before", args.before, before), ("after", args.after, after)):
            load = _loadavg()
            into.append(first_table(run_once(tree, command)))
            print(f"round {round_number} {label}: load average {load} -> {_loadavg()}", flush=True)
    print()
    print(f"{' '.join(command)}: {args.rounds} rounds, before = {args.before}, after = {args.after}")
    print()
    print("\n".join(compare(before, after)))


if __name__ == "__main__":
    main()
