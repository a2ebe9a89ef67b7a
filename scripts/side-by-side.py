#!/usr/bin/env python3
"""Two collections of one grid, point by point: each point's median step time in A and in B,
their ratio B/A and each side's CV, then the median ratio per phase. For a comparison the
gate does not judge (another TP size, real weights against dummy ones), where `sdbench
compare` refuses a candidate whose identity differs. Each side is an artifact, or a folder
holding one complete agg artifact (a lease stage's folder: scripts/plans/tp.txt,
real-checkpoint.txt).

    python scripts/side-by-side.py A.json[.gz]|DIR B.json[.gz]|DIR"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from pytest_sdbench.artifact import validate_path
from pytest_sdbench.wire.points import point_label


def _artifact_path(given: str) -> Path:
    path = Path(given)
    if not path.is_dir():
        return path
    found = [p for p in sorted(path.glob("sdbench-agg-*.json*"))
             if ".partial." not in p.name and ".unchecked." not in p.name]
    if len(found) != 1:
        sys.exit(f"{path}: want one complete sdbench-agg-*.json, found {len(found)}")
    return found[0]


def _load(given: str):
    path = _artifact_path(given)
    report = validate_path(path)
    if not report.ok or report.artifact is None:
        sys.exit(f"{path}: not a valid artifact ({'; '.join(report.errors[:3])})")
    return path, report.artifact


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        sys.exit(__doc__)
    (path_a, a), (path_b, b) = _load(argv[0]), _load(argv[1])
    if a.integrity.grid_digest != b.integrity.grid_digest:
        sys.exit("the two artifacts measured different grids (integrity.grid_digest)")
    for side, path, art in (("A", path_a, a), ("B", path_b, b)):
        ident = art.identity
        print(f"{side}: {path} ({ident.device_name.value}; TP={ident.tensor_parallel_size.value}; "
              f"load_format {ident.target.load_format.value}; "
              f"{art.coverage.completed}/{art.coverage.expected} points; median of "
              f"{art.measurement_policy.repeats} repeats)")
    summaries = [{(s.phase, s.point_index): s for s in art.summaries} for art in (a, b)]
    print()
    print("| point | coordinates | A ms | B ms | B/A | CV A / B % |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    ratios: dict[str, list[float]] = {}
    for phase in ("prefill", "decode"):
        for i, point in enumerate(getattr(a.grid, phase)):
            key = (phase, i)
            if key not in summaries[0] or key not in summaries[1]:
                continue
            one, two = summaries[0][key], summaries[1][key]
            ratio = two.median_seconds / one.median_seconds
            ratios.setdefault(phase, []).append(ratio)
            print(f"| {phase}[{i}] | {point_label(point)} | "
                  f"{one.median_seconds * 1e3:.3f} | {two.median_seconds * 1e3:.3f} | "
                  f"{ratio:.3f} | {one.cv * 100:.1f} / {two.cv * 100:.1f} |")
    print()
    for phase, values in ratios.items():
        print(f"{phase}: median ratio B/A {statistics.median(values):.3f} (range "
              f"{min(values):.3f}-{max(values):.3f}, {len(values)} points)")


if __name__ == "__main__":
    main(sys.argv[1:])
