"""`sdbench compare`'s output: a Comparison rendered as text, markdown, csv or json, each
stating the rules it applied."""

from __future__ import annotations

import csv
import io
import json
import math

from ..wire.contract import MEDIAN_SE_FACTOR, MIN_ROUNDS_FOR_NOISE, PHASES
from .compare import COLUMNS, HOST_SLOWER, HOST_Z, NOISE_Z, Comparison, PointChange

FORMATS = ("text", "markdown", "csv", "json")
# The header of each column in text and markdown (csv and json use the names).
LABELS = {"phase": "phase", "coordinates": "coordinates", "base_ms": "base ms",
          "cand_ms": "cand ms", "base_samples": "base n", "cand_samples": "cand n",
          "base_cv_pct": "base cv", "cand_cv_pct": "cand cv", "change_pct": "change",
          "noise_pct": "noise", "noise_source": "from", "verdict": "verdict", "note": "note"}


def noise_rule(c: Comparison) -> list[str]:
    """The rules this comparison applied, in words (every format states them)."""
    floor = "" if c.noise_floor_pct is None else (
        f"; --noise-floor {c.noise_floor_pct:g}%: the least noise, and the noise of a point "
        "without enough rounds")
    return [f"noise rule: with >= {MIN_ROUNDS_FOR_NOISE} rounds on both sides, noise = "
            f"z * {MEDIAN_SE_FACTOR:.4f} * sqrt(cv_b^2/n_b + cv_c^2/n_c), z = {NOISE_Z:g} "
            f"(a one-sided normal tail of {_tail(NOISE_Z):.1e} a point: 100 unchanged points "
            f"fail together {100 * (1 - (1 - _tail(NOISE_Z)) ** 100):.1f}% of the time), "
            "each cv the point's CV across rounds, at least its phase's typical CV (median "
            f"over the phase's points){floor}",
            f"verdict rule: regressed when slower than max(noise, --fail-above "
            f"{c.fail_above_pct:g}%) plus the candidate host's slowdown ({HOST_SLOWER} within "
            f"that slowdown); the host ran slower when its canary's median did beyond "
            f"z = {HOST_Z:.2f} by the same rule over the canary's readings"]


def _tail(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def cell(p: PointChange, column: str) -> str:
    """A point's column as text and markdown print it."""
    value = getattr(p, column)
    if value is None:
        return "-"
    if column == "change_pct":
        return f"{value:+.1f}%"
    if column in ("noise_pct", "base_cv_pct", "cand_cv_pct"):
        return f"{value:.1f}%"
    return _fmt(value)


def _typical(c: Comparison, phase: str) -> str:
    cv = c.typical_cv_pct.get(phase, {})
    shown = ", ".join(f"{side} {'-' if v is None else f'{v:.1f}%'}" for side, v in cv.items())
    return f"typical CV across rounds: {shown}"


def render(c: Comparison, fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps({"verdict": "fail" if c.failed else "pass",
                           "baseline": c.baseline, "candidate": c.candidate,
                           "fail_above_pct": c.fail_above_pct,
                           "noise_floor_pct": c.noise_floor_pct, "noise_z": NOISE_Z,
                           "noise_rule": noise_rule(c), "host": c.host.as_dict(),
                           "host_line": c.host.line(), "sides": c.sides,
                           "problems": c.problems,
                           "phases": {p: c.phase_summary(p) for p in PHASES},
                           "points": [{col: getattr(p, col) for col in COLUMNS}
                                      for p in c.points],
                           "verdict_line": c.verdict_line()}, indent=1)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(COLUMNS)
        for p in c.points:
            writer.writerow([_fmt(getattr(p, col)) if col.endswith(("_ms", "_pct"))
                             else getattr(p, col) for col in COLUMNS])
        blank = [""] * (len(COLUMNS) - 3)
        writer.writerow(["host", *blank, HOST_SLOWER if c.host.slowdown_pct > 0
                         else "host", c.host.line()])
        for problem in c.problems:
            writer.writerow(["gate", *blank, "problem", problem])
        return out.getvalue().rstrip("\n")
    md = fmt == "markdown"
    columns = [col for col in COLUMNS if col != "phase"]
    header = [LABELS[col] for col in columns]
    lines = [f"{'## ' if md else ''}sdbench compare: {c.baseline} -> {c.candidate}", ""]
    for side, said in c.sides.items():
        lines += [f"{'- ' if md else ''}{side} {line}" for line in said]
    lines += [f"{'- ' if md else ''}{c.host.line()}", ""]
    for phase in PHASES:
        rows = [p for p in c.points if p.phase == phase]
        if not rows:
            continue
        s = c.phase_summary(phase)
        median = "-" if s["median_change_pct"] is None else f"{s['median_change_pct']:+.1f}%"
        lines.append(f"{'### ' if md else ''}{phase}: {s['compared']}/{s['points']} points "
                     f"compared, median change {median}, {s['regressed']} regressed, "
                     f"{s['improved']} improved, {s['host_slower']} {HOST_SLOWER}, "
                     f"{s['missing']} missing; {_typical(c, phase)}")
        cells = [[cell(p, col) for col in columns] for p in rows]
        if md:
            lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(row) + " |" for row in cells]
        else:
            widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
            for row in [header, *cells]:
                lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths,
                                                                   strict=True)).rstrip())
        lines.append("")
    lines += noise_rule(c)
    for problem in c.problems:
        lines.append(f"{'- ' if md else '  '}problem: {problem}")
    lines.append(("**" if md else "") + c.verdict_line() + ("**" if md else ""))
    return "\n".join(lines)
