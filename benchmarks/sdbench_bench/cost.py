"""Collection cost: wall time and duty cycle of each collection of the pair the
repeatability measurement takes (the default grid unless --grid), and, with --suite, the
wall time of a test-suite command run in a subprocess."""

from __future__ import annotations

import subprocess
import time

from pytest_sdbench.run.collect import describe_time

from .goals import COLLECTION_WALL, DUTY_CYCLE
from .repeatability import collection_pair


def run(bench) -> None:
    grid = "the --grid" if bench.grid else "default"
    for name, collection in zip(("first", "second"), collection_pair(bench), strict=True):
        result = collection.result
        wall, points = result.elapsed_seconds, collection.artifact.coverage.expected
        repeats = f", {result.repeats} repeats each" if result.repeats > 1 else ""
        bench.table.row(f"collection cost, {grid} {bench.mode} grid ({name})",
                        f"{wall:.1f} s wall for {points} points{repeats}; duty cycle "
                        f"{result.timed_seconds / wall:.2f} (all timed steps) / "
                        f"{result.measured_seconds / wall:.3f} (retained steps only)",
                        (COLLECTION_WALL, wall), (DUTY_CYCLE, result.timed_seconds / wall))
        # issue 35: where an item's time goes, and wall : retained steps (lower is better)
        bench.table.row(f"collection wall time by section ({name})", describe_time(result))


def suite_cost(bench, command: list[str]) -> None:
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    tail = (result.stdout.strip().splitlines() or ["?"])[-1]
    bench.table.row(f"suite cost: {' '.join(command)}",
                    f"{wall:.1f} s wall, exit {result.returncode}: {tail}")
