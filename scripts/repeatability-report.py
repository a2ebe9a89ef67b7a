#!/usr/bin/env python3
"""Two collections of the same grid (separate engine starts), point by point: how far their
medians agree, the dispersion of each point across rounds, and the host canary of each run.

    python scripts/repeatability-report.py A.json B.json [--min-ms 8]

Per point: agreement = |median_B / median_A - 1|. Printed: the median, p90 and max of the
agreement over points (all, prefill, decode, and points whose median step is >= --min-ms
milliseconds), the across-round CV and the median's CI half width of each run, the host
canary's spread, the consumer's repeatability policy (5 samples, CV <= 5% in each run,
agreement <= 5%), and the widest points. Both artifacts must be valid.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys

from pytest_sdbench.artifact import validate_path
from pytest_sdbench.wire.contract import (
    CONSUMER_MAX_CV,
    CONSUMER_MAX_DISAGREEMENT,
    CONSUMER_REPEATS,
)
from pytest_sdbench.wire.points import point_label


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _line(label: str, values: list[float]) -> str:
    if not values:
        return f"{label}: no point"
    return (f"{label}: n={len(values)} median {100 * statistics.median(values):.2f}%  "
            f"p90 {100 * _pct(values, 0.9):.2f}%  max {100 * max(values):.2f}%")


def _canary(name: str, a) -> str:
    c = a.host_canary
    policy = a.measurement_policy
    head = (f"{name}: {a.run_id[:12]} {a.identity.target.model.value} "
            f"K={a.speculative.draft_depth} "
            f"{policy.repeat_order} x{policy.repeats}, {len(a.rounds)} rounds, collection "
            f"{a.elapsed_seconds:.1f} s, {a.coverage.completed}/{a.coverage.expected} points, "
            f"status {a.status}")
    if c is None:
        return head + "; no host canary (legacy)"
    launch = (f"; launch median {c.launch_median_seconds * 1e6:.0f} us spread "
              f"{100 * c.launch_spread:.1f}% CV {100 * c.launch_cv:.1f}%"
              if c.launch_median_seconds is not None else "")
    return (head + f"\n  host canary ({c.samples} readings): python median "
            f"{c.python_median_seconds * 1e3:.3f} ms spread {100 * c.python_spread:.1f}% CV "
            f"{100 * c.python_cv:.1f}%{launch}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--min-ms", type=float, default=8.0)
    args = parser.parse_args(argv)
    runs = []
    for path in (args.first, args.second):
        report = validate_path(path)
        if not report.ok:
            print(f"{path}: INVALID: {report.errors[:3]}", file=sys.stderr)
            return 2
        runs.append(report.artifact)
    a, b = runs
    print(_canary("A", a))
    print(_canary("B", b))
    sa = {(s.phase, s.point_index): s for s in a.summaries}
    sb = {(s.phase, s.point_index): s for s in b.summaries}
    points = {(p, i): pt for p in ("prefill", "decode")
              for i, pt in enumerate(getattr(a.grid, p))}
    rows = []
    for key in sorted(sa.keys() & sb.keys()):
        x, y = sa[key], sb[key]
        rows.append((key, x, y, abs(y.median_seconds / x.median_seconds - 1)))
    print(f"points measured in both: {len(rows)} of {len(points)}")
    agree = [r[3] for r in rows]
    print(_line("agreement |medB/medA-1|, all", agree))
    for phase in ("prefill", "decode"):
        print(_line(f"  {phase}", [r[3] for r in rows if r[0][0] == phase]))
    slow = [r[3] for r in rows
            if min(r[1].median_seconds, r[2].median_seconds) * 1e3 >= args.min_ms]
    print(_line(f"  points whose median step >= {args.min_ms:g} ms", slow))
    for name, run, artifact in (("A", 1, a), ("B", 2, b)):
        # a legacy artifact's samples are back-to-back repeats, not rounds: say which
        across = "rounds" if artifact.rounds else "back-to-back repeats"
        print(_line(f"CV across {across}, {name}", [r[run].cv for r in rows]))
        widths = [r[run].median_half_width for r in rows if r[run].median_half_width is not None]
        print(_line(f"median's 95% CI half width, {name}", widths))
    covered = [r for r in rows if r[1].median_half_width is not None and
               r[2].median_half_width is not None and
               r[3] <= math.hypot(r[1].median_half_width, r[2].median_half_width)]
    for name, own, other in (("A", 1, 2), ("B", 2, 1)):
        # each start's stated interval (its artifact's rule) against the other's median
        held = [r for r in rows if r[own].median_half_width is not None and
                abs(r[other].median_seconds / r[own].median_seconds - 1) <=
                r[own].median_half_width]
        print(f"{name}'s stated 95% interval holds the other start's median: "
              f"{len(held)}/{len(rows)} points")
    print(f"disagreement within the two medians' combined 95% CI half width "
          f"(sqrt(hA^2 + hB^2)): {len(covered)}/{len(rows)} points")
    passing = [r for r in rows if all(s.samples >= CONSUMER_REPEATS and s.cv <= CONSUMER_MAX_CV
                                      for s in (r[1], r[2])) and r[3] <= CONSUMER_MAX_DISAGREEMENT]
    print(f"consumer policy (>= {CONSUMER_REPEATS} samples and CV <= {CONSUMER_MAX_CV:.0%} in "
          f"each, agreement <= {CONSUMER_MAX_DISAGREEMENT:.0%}): {len(passing)}/{len(rows)}")
    print("widest points:")
    for key, x, y, d in sorted(rows, key=lambda r: -r[3])[:8]:
        print(f"  {key[0]}[{key[1]}] {point_label(points[key])}: "
              f"{x.median_seconds * 1e3:.3f} vs {y.median_seconds * 1e3:.3f} ms ({d:+.1%}), "
              f"CV {x.cv:.1%} / {y.cv:.1%}, canary spread {x.canary_spread or 0:.1%} / "
              f"{y.canary_spread or 0:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
