#!/usr/bin/env python3
"""Which coordinates share warm state (issue 35), read from what a collection recorded: the
warm-up pass runs every point in grid order until two passes agree (WARMUP_TOLERANCE), and
each observation keeps its point's `warmup_passes`. A point that settled in the minimum two
passes was warm at its first run: something before it had warmed what it runs. Points are
split by whether an earlier point of the warm-up ran the same compiled shape (graph mode and
padded token count: decode (K+1) x B tokens, prefill B x new tokens, each padded up to the
next capture size when it ran in a graph).

    python scripts/warm-state.py [ARTIFACT.json[.gz|.xz] ...]
    (default: the two H200 profiles on the consumer's grid, qwen3-0.6b and qwen3-8b)
"""

import bisect
import statistics
import sys
from pathlib import Path

from pytest_sdbench.artifact.store import read_json  # plain, gzip or xz, within the caps
from pytest_sdbench.wire.contract import WARMUP_MIN_PASSES

EVIDENCE = Path(__file__).resolve().parent.parent / "docs/evidence/h200"
DEFAULT = (EVIDENCE / "aisimulate/sdbench-agg-k3-cd95baa72c35.json.xz",
           EVIDENCE / "served-aisimulate/sdbench-agg-k3-893a0f15199c.json.xz")


def padded(tokens: int, mode: str, sizes: list[int]) -> int:
    """The token count a step of `tokens` runs at: the next capture size in a graph."""
    if mode == "eager" or not sizes or tokens > sizes[-1]:
        return tokens
    return sizes[bisect.bisect_left(sizes, tokens)]


def first_runs(data: dict, phase: str) -> list[dict]:
    """One observation a point (its first), in grid order: the warm-up pass's order."""
    first: dict[int, dict] = {}
    for o in data[phase]:
        first.setdefault(o["point_index"], o)
    return [first[i] for i in sorted(first)]


def shape(o: dict, k: int, sizes: list[int]) -> tuple:
    p = o["point"]
    tokens = (k + 1) * p["batch_size"] if "context_tokens" in p else \
        p["batch_size"] * p["new_tokens"]
    return o["graph_mode"], padded(tokens, o["graph_mode"], sizes)


def report(path: Path) -> None:
    data = read_json(path)
    k = data["speculative"]["draft_depth"]
    sizes = sorted(data["identity"]["settings"].get("cudagraph_capture_sizes", {})
                   .get("value") or [])
    model = Path(data["identity"]["target"]["model"]["value"]).parent.name
    print(f"{path.name}: {model}, K={k}, "
          f"{len(data['grid']['prefill'])} prefill and {len(data['grid']['decode'])} decode "
          f"points")
    print(f"  {'phase':8}{'its shape':14}{'points':>7}{'warm at run 1':>15}{'passes median':>15}"
          f"{'mean':>6}")
    for phase in ("prefill", "decode"):
        seen: set[tuple] = set()
        groups: dict[str, list[int]] = {"first": [], "seen before": []}
        for o in first_runs(data, phase):
            s = shape(o, k, sizes)
            groups["seen before" if s in seen else "first"].append(o["warmup_passes"])
            seen.add(s)
        for label, passes in groups.items():
            if not passes:
                continue
            warm = sum(n == WARMUP_MIN_PASSES for n in passes)
            share = 100 * warm / len(passes)
            print(f"  {phase:8}{label:14}{len(passes):7d}{warm:8d} ({share:3.0f}%)"
                  f"{statistics.median(passes):15.1f}{statistics.mean(passes):6.2f}")


def main() -> None:
    for path in [Path(p) for p in sys.argv[1:]] or DEFAULT:
        report(path)


if __name__ == "__main__":
    main()
