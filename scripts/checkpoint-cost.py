#!/usr/bin/env python3
"""What one checkpoint write costs as a collection grows: encode and write an artifact's
samples (committed H200 artifacts: a production grid in rounds, and the planning profile),
the work session.Checkpoint repeats while a collection runs; and what the end of a
collection adds before the artifact is written (session._check_and_write): the validator
and the published JSON Schema over the same samples.

    python scripts/checkpoint-cost.py [ARTIFACT.json[.gz|.xz] ...]
"""

import sys
import tempfile
import time
from pathlib import Path

import jsonschema

from pytest_sdbench.artifact import schema
from pytest_sdbench.artifact.store import read_json, write_artifact  # plain, gzip or xz
from pytest_sdbench.artifact.validate.report import validate_data

EVIDENCE = Path(__file__).resolve().parent.parent / "docs/evidence/h200"
DEFAULTS = [EVIDENCE / "repeatability/sdbench-agg-046e3aacf413.json.xz",
            EVIDENCE / "aisimulate/sdbench-agg-k3-7747be92372d.json.xz"]


def main() -> None:
    for path in [Path(p) for p in sys.argv[1:]] or DEFAULTS:
        data = read_json(path)
        start = time.perf_counter()
        report = validate_data(data)   # a legacy artifact comes back upgraded
        validated = time.perf_counter() - start
        artifact = report.artifact
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            written = write_artifact(artifact, Path(folder) / "checkpoint.json")
            seconds = time.perf_counter() - start
            size = written.stat().st_size
        samples = len(artifact.prefill) + len(artifact.decode)
        print(f"{path.name}: {samples} observations, {size / 1e6:.1f} MB written in "
              f"{1000 * seconds:.0f} ms")
        if report.legacy:   # the published schema is the current version's
            print(f"  at the end also: the validator {1000 * validated:.0f} ms (legacy "
                  f"{report.legacy}: no JSON Schema of its own)")
            continue
        start = time.perf_counter()
        errors = list(jsonschema.Draft202012Validator(schema.load()).iter_errors(data))
        print(f"  at the end also: the validator {1000 * validated:.0f} ms "
              f"(valid: {report.ok}), the JSON Schema {1000 * (time.perf_counter() - start):.0f}"
              f" ms ({len(errors)} errors)")


if __name__ == "__main__":
    main()
