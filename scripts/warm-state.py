#!/usr/bin/env python3
"""Which coordinates share warm state (issue 35), read from what a collection recorded.

Under the until_stable warm-up every point runs in grid order until two passes agree
(WARMUP_TOLERANCE), and each observation keeps its point's `warmup_passes`: a point that
settled in the minimum two passes was warm at its first run. The first table splits the
points by whether an earlier point of the warm-up ran the same compiled shape
(wire.points.compiled_shape: phase, graph mode, token count padded to the capture size).

Under the by_shape warm-up a point of a settled shape takes one pass. The second table
asks whether that left it colder than a point that warmed up itself: each work item's
sample (its steps' lower median) over its point's median, by round, for the two groups.

    python scripts/warm-state.py [ARTIFACT.json[.gz|.xz] ...]
    (default: the committed H200 profiles on the consumer's grid, qwen3-0.6b and qwen3-8b)
"""

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from pytest_sdbench.artifact.store import read_json  # plain, gzip or xz, within the caps
from pytest_sdbench.wire.contract import WARMUP_MIN_PASSES, WARMUP_SHAPE_RULES
from pytest_sdbench.wire.points import DecodePoint, PrefillPoint, compiled_shape

EVIDENCE = Path(__file__).resolve().parent.parent / "docs/evidence/h200"
DEFAULT = (EVIDENCE / "aisimulate/sdbench-agg-k3-7747be92372d.json.xz",
           EVIDENCE / "served-aisimulate/sdbench-agg-k3-893a0f15199c.json.xz")
PHASES = ("prefill", "decode")


def first_runs(data: dict, phase: str) -> list[dict]:
    """One observation a point (its first), in grid order: the warm-up pass's order."""
    first: dict[int, dict] = {}
    for o in data[phase]:
        first.setdefault(o["point_index"], o)
    return [first[i] for i in sorted(first)]


def shape(o: dict, sizes: list[int]) -> tuple:
    p = o["point"]
    point = DecodePoint(**p) if "context_tokens" in p else PrefillPoint(**p)
    return compiled_shape(point, o["graph_mode"], sizes)


def shared_shapes(data: dict, sizes: list[int]) -> None:
    print(f"  {'phase':8}{'its shape':14}{'points':>7}{'warm at run 1':>15}{'passes median':>15}"
          f"{'mean':>6}")
    for phase in PHASES:
        seen: set[tuple] = set()
        groups: dict[str, list[int]] = {"first": [], "seen before": []}
        for o in first_runs(data, phase):
            s = shape(o, sizes)
            groups["seen before" if s in seen else "first"].append(o["warmup_passes"])
            seen.add(s)
        for label, passes in groups.items():
            if not passes:
                continue
            warm = sum(n == WARMUP_MIN_PASSES for n in passes)
            share = 100 * warm / len(passes)
            print(f"  {phase:8}{label:14}{len(passes):7d}{warm:8d} ({share:3.0f}%)"
                  f"{statistics.median(passes):15.1f}{statistics.mean(passes):6.2f}")


def by_round(data: dict) -> None:
    """Samples over their point's median, by round: points warmed by their shape (one
    pass) against points that warmed up themselves."""
    rounds = len(data["rounds"])
    print(f"  {'phase':8}{'warm-up':14}{'points':>7}  sample / point median by round "
          f"(median; share over 1.05)")
    for phase in PHASES:
        items: dict[tuple[int, int], list[float]] = defaultdict(list)
        passes: dict[int, int] = {}
        for o in data[phase]:
            items[(o["point_index"], o["round"])].append(o["timing"]["seconds"])
            passes[o["point_index"]] = o["warmup_passes"]
        sample = {k: sorted(v)[(len(v) - 1) // 2] for k, v in items.items()}
        per_point: dict[int, list[float]] = defaultdict(list)
        for (point, _), seconds in sample.items():
            per_point[point].append(seconds)
        median = {p: statistics.median(v) for p, v in per_point.items()}
        for label, own in (("one pass", False), ("its own", True)):
            ratios: dict[int, list[float]] = defaultdict(list)
            for (point, r), seconds in sample.items():
                if (passes[point] >= WARMUP_MIN_PASSES) == own:
                    ratios[r].append(seconds / median[point])
            if not ratios:
                continue
            cells = "  ".join(f"{statistics.median(ratios[r]):.3f} "
                              f"({sum(x > 1.05 for x in ratios[r]) / len(ratios[r]):.2f})"
                              for r in range(rounds))
            print(f"  {phase:8}{label:14}{len(ratios[0]):7d}  {cells}")


def report(path: Path) -> None:
    data = read_json(path)
    sizes = sorted(data["identity"]["settings"].get("cudagraph_capture_sizes", {})
                   .get("value") or [])
    model = Path(data["identity"]["target"]["model"]["value"]).parent.name
    rule = data["measurement_policy"]["warmup"]["rule"]
    print(f"{path.name}: {model}, K={data['speculative']['draft_depth']}, "
          f"{len(data['grid']['prefill'])} prefill and {len(data['grid']['decode'])} decode "
          f"points, warm-up {rule}")
    shared_shapes(data, sizes)
    if rule in WARMUP_SHAPE_RULES:
        by_round(data)


def main() -> None:
    for path in [Path(p) for p in sys.argv[1:]] or DEFAULT:
        report(path)


if __name__ == "__main__":
    main()
