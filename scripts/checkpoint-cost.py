#!/usr/bin/env python3
"""What one checkpoint write costs as a collection grows: encode and write an artifact's
samples (committed H200 artifacts: a production grid in rounds, and the planning profile),
the work session.Checkpoint repeats while a collection runs.

    python scripts/checkpoint-cost.py [ARTIFACT.json[.gz|.xz] ...]
"""

import sys
import tempfile
import time
from pathlib import Path

from pytest_sdbench.artifact.store import read_json, write_artifact  # plain, gzip or xz
from pytest_sdbench.wire import typed
from pytest_sdbench.wire.model import Artifact

EVIDENCE = Path(__file__).resolve().parent.parent / "docs/evidence/h200"
DEFAULTS = [EVIDENCE / "repeatability/sdbench-agg-046e3aacf413.json.xz",
            EVIDENCE / "aisimulate/sdbench-agg-k3-7747be92372d.json.xz"]


def main() -> None:
    for path in [Path(p) for p in sys.argv[1:]] or DEFAULTS:
        artifact = typed.decode(Artifact, read_json(path))
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            written = write_artifact(artifact, Path(folder) / "checkpoint.json")
            seconds = time.perf_counter() - start
            size = written.stat().st_size
        samples = len(artifact.prefill) + len(artifact.decode)
        print(f"{path.name}: {samples} observations, {size / 1e6:.1f} MB written in "
              f"{1000 * seconds:.0f} ms")


if __name__ == "__main__":
    main()
