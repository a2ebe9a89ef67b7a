#!/usr/bin/env python3
"""What a collection's writes and its end cost as it grows, on committed H200 artifacts (a
production grid in rounds, and the planning profile), side by side:

- a checkpoint (run.partial.PartialArtifact): the artifact's text made the first time (every sample
  encoded, ArtifactText) and again (a later checkpoint: the samples' lines reused), and the
  old way, every sample encoded and indented at every write;
- the end (session._check_and_write): parsing the text, the validator, and the published
  JSON Schema in one process and in worker processes (schema.violations).

    python scripts/checkpoint-cost.py [ARTIFACT.json[.gz|.xz] ...]
"""

import json
import os
import sys
import time
from pathlib import Path

from pytest_sdbench.artifact import schema
from pytest_sdbench.artifact.store import ArtifactText, parse_json, read_json
from pytest_sdbench.artifact.validate.report import validate_data
from pytest_sdbench.wire import typed

EVIDENCE = Path(__file__).resolve().parent.parent / "docs/evidence/h200"
DEFAULTS = [EVIDENCE / "repeatability/sdbench-agg-046e3aacf413.json.xz",
            EVIDENCE / "aisimulate/sdbench-agg-k3-7747be92372d.json.xz"]


def timed(work):
    start = time.perf_counter()
    result = work()
    return result, time.perf_counter() - start


def report_on(path: Path, workers: int) -> None:
    report = validate_data(read_json(path))   # a legacy artifact comes back upgraded
    artifact, text = report.artifact, ArtifactText()
    _, old = timed(lambda: json.dumps(typed.encode(artifact), indent=1))
    body, first = timed(lambda: text.text(artifact))
    _, again = timed(lambda: text.text(artifact))
    samples = len(artifact.prefill) + len(artifact.decode)
    print(f"{path.name}: {samples} observations, {len(body) / 1e6:.1f} MB of text")
    print(f"  a checkpoint's text: {again:.2f} s (the first: {first:.2f} s; every sample "
          f"encoded and indented: {old:.2f} s)")
    if report.legacy:   # the published schema is the current version's
        print(f"  (legacy {report.legacy}: no JSON Schema of its own)")
        return
    data, parsed = timed(lambda: parse_json(body))
    _, validated = timed(lambda: validate_data(data))
    one, alone = timed(lambda: schema.violations(data, workers=1))
    many, split = timed(lambda: schema.violations(data, workers=workers))
    assert sorted(one) == sorted(many)
    print(f"  at the end: parse {parsed:.2f} s, the validator {validated:.2f} s, the JSON "
          f"Schema {alone:.2f} s in one process, {split:.2f} s in {workers} "
          f"({len(one)} violations)")


def main() -> None:
    workers = min(schema.MAX_WORKERS, os.cpu_count() or 1)
    for path in [Path(p) for p in sys.argv[1:]] or DEFAULTS:
        report_on(path, workers)


if __name__ == "__main__":
    main()
