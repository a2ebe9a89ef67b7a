"""`sdbench compare`: a gate between a baseline and a candidate artifact.

Points are matched by their coordinates (prefill: batch, new tokens, cached prefix; decode:
batch, context, K, acceptance length). For each point the change is that of the medians of
its retained steps (its repeats), judged against the point's noise:

- both sides measured the point at least twice: the noise is the larger relative spread
  (max - min) / median of the two sides' repeats, measured;
- otherwise a stated floor: --noise-floor, or by device NOISE_FLOOR_PCT (single steps of
  unchanged code were seen to differ by -34..+33% per point on an idle 2-core CPU, and the
  same grid re-collected on an H200 by 12-22% median per point).

A point is regressed when it is slower by more than both its noise and --fail-above. The
gate fails, naming each cause, on a regressed point, on a point missing from either side
(skipped or outside its grid), on a side whose status is not complete, on a different
mode, device, K or acceptance control, and on a side that ran contended (or whose run
environment is unknown). Prefill and decode are summarised separately.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from dataclasses import asdict, dataclass, field

from .wire.contract import PHASE_DECODE, PHASE_PREFILL, PHASES, STATUS_COMPLETE
from .wire.model import Artifact

# The noise floor of a point measured once on either side, percent, by device.
NOISE_FLOOR_PCT = {"cpu": 35.0, "cuda": 20.0}
FORMATS = ("text", "markdown", "csv", "json")

OK, REGRESSED, IMPROVED = "within_noise", "regressed", "improved"
MISSING_IN_BASELINE, MISSING_IN_CANDIDATE = "missing_in_baseline", "missing_in_candidate"


@dataclass(frozen=True)
class PointChange:
    phase: str
    coordinates: str
    base_ms: float | None          # median of the point's retained steps
    cand_ms: float | None
    base_samples: int
    cand_samples: int
    change_pct: float | None
    noise_pct: float | None
    noise_source: str              # "repeats" (measured spread) or "floor" (stated)
    verdict: str
    note: str = ""


@dataclass
class Comparison:
    baseline: str
    candidate: str
    fail_above_pct: float
    points: list[PointChange] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> list[PointChange]:
        return [p for p in self.points if p.verdict == REGRESSED]

    @property
    def failed(self) -> bool:
        return bool(self.problems or self.regressed)

    def phase_summary(self, phase: str) -> dict:
        mine = [p for p in self.points if p.phase == phase]
        changes = [p.change_pct for p in mine if p.change_pct is not None]
        return {"points": len(mine), "compared": len(changes),
                "median_change_pct": round(statistics.median(changes), 2) if changes else None,
                "regressed": sum(p.verdict == REGRESSED for p in mine),
                "improved": sum(p.verdict == IMPROVED for p in mine),
                "missing": sum(p.verdict in (MISSING_IN_BASELINE, MISSING_IN_CANDIDATE)
                               for p in mine)}

    def verdict_line(self) -> str:
        if not self.failed:
            return (f"PASS: no point slower beyond its noise and {self.fail_above_pct:g}% "
                    f"({len(self.points)} points)")
        parts = []
        if self.regressed:
            parts.append(f"{len(self.regressed)} point(s) regressed")
        if self.problems:
            shown = "; ".join(self.problems[:3])
            more = f"; and {len(self.problems) - 3} more" if len(self.problems) > 3 else ""
            parts.append(f"{len(self.problems)} problem(s): {shown}{more}")
        return "FAIL: " + "; ".join(parts)


def _key(phase: str, point) -> tuple:
    if phase == PHASE_PREFILL:
        return (phase, point.batch_size, point.new_tokens, point.cached_prefix_tokens)
    return (phase, point.batch_size, point.context_tokens, point.draft_depth,
            point.acceptance_length)


def coordinates(phase: str, point) -> str:
    if phase == PHASE_PREFILL:
        return f"B={point.batch_size} new={point.new_tokens} prefix={point.cached_prefix_tokens}"
    al = "natural" if point.acceptance_length is None else f"{point.acceptance_length:g}"
    return f"B={point.batch_size} ctx={point.context_tokens} K={point.draft_depth} AL={al}"


def _measured(a: Artifact) -> dict[tuple, tuple[str, object, list[float]]]:
    """Per point key: (phase, point, seconds of its retained steps)."""
    out: dict[tuple, tuple[str, object, list[float]]] = {}
    for phase in PHASES:
        for o in getattr(a, phase):
            entry = out.setdefault(_key(phase, o.point), (phase, o.point, []))
            entry[2].append(o.timing.seconds)
    return out


def _grid_points(a: Artifact) -> dict[tuple, tuple[str, object]]:
    return {_key(phase, p): (phase, p) for phase in PHASES for p in getattr(a.grid, phase)}


def _skip_reasons(a: Artifact) -> dict[tuple, str]:
    reasons = {}
    for s in a.coverage.skipped_points:
        points = getattr(a.grid, s.phase)
        if 0 <= s.point_index < len(points):
            reasons[_key(s.phase, points[s.point_index])] = s.reason
    return reasons


def _spread(seconds: list[float]) -> float:
    """The relative range of a point's repeats: (max - min) / median."""
    median = statistics.median(seconds)
    return (max(seconds) - min(seconds)) / median if median > 0 else 0.0


def _order(key: tuple) -> tuple:
    return (PHASES.index(key[0]), tuple(-1 if v is None else v for v in key[1:]))


def _side_problems(label: str, a: Artifact) -> list[str]:
    problems = []
    if a.status != STATUS_COMPLETE:
        problems.append(f"{label}: status {a.status} ({a.coverage.completed}/"
                        f"{a.coverage.expected} points measured)")
    env = a.environment
    if env is None:
        problems.append(f"{label}: no run environment recorded (legacy artifact), so "
                        "contention is unknown")
    elif env.contended:
        problems.append(f"{label}: ran contended ({env.reason})")
    return problems


def compare(base: Artifact, cand: Artifact, fail_above_pct: float = 0.0,
            noise_floor_pct: float | None = None, base_name: str = "baseline",
            cand_name: str = "candidate") -> Comparison:
    result = Comparison(base_name, cand_name, fail_above_pct)
    result.problems += _side_problems("baseline", base) + _side_problems("candidate", cand)
    for name, b, c in (("mode", base.mode, cand.mode), ("device", base.device, cand.device),
                       ("draft depth K", base.speculative.draft_depth,
                        cand.speculative.draft_depth),
                       ("acceptance control", base.speculative.acceptance_control,
                        cand.speculative.acceptance_control)):
        if b != c:
            result.problems.append(f"{name} differs: baseline {b}, candidate {c}")
    floor = noise_floor_pct if noise_floor_pct is not None else \
        NOISE_FLOOR_PCT.get(cand.device, max(NOISE_FLOOR_PCT.values()))
    measured_b, measured_c = _measured(base), _measured(cand)
    grid = {**_grid_points(cand), **_grid_points(base)}
    skipped = {"baseline": _skip_reasons(base), "candidate": _skip_reasons(cand)}
    for key in sorted(set(grid) | set(measured_b) | set(measured_c), key=_order):
        known = grid.get(key) or measured_b.get(key) or measured_c.get(key)
        assert known is not None  # the key came from one of the three
        phase, point = known[:2]
        label = coordinates(phase, point)
        sb, sc = measured_b.get(key, (None, None, []))[2], measured_c.get(key, (None, None, []))[2]
        if not sb or not sc:
            side = "baseline" if not sb else "candidate"
            why = skipped[side].get(key, "not in its grid")
            result.points.append(PointChange(
                phase, label, _median_ms(sb), _median_ms(sc), len(sb), len(sc), None, None, "",
                MISSING_IN_BASELINE if not sb else MISSING_IN_CANDIDATE, note=why))
            result.problems.append(f"{phase} {label}: missing in the {side} ({why})")
            continue
        mb, mc = statistics.median(sb), statistics.median(sc)
        change = 100.0 * (mc / mb - 1.0)
        if len(sb) > 1 and len(sc) > 1:
            noise, source = 100.0 * max(_spread(sb), _spread(sc)), "repeats"
            if noise_floor_pct is not None:
                noise = max(noise, noise_floor_pct)
        else:
            noise, source = floor, "floor"
        bound = max(noise, fail_above_pct)
        verdict = REGRESSED if change > bound else IMPROVED if change < -bound else OK
        result.points.append(PointChange(phase, label, mb * 1e3, mc * 1e3, len(sb), len(sc),
                                         round(change, 2), round(noise, 2), source, verdict))
    return result


def _median_ms(seconds: list[float]) -> float | None:
    return statistics.median(seconds) * 1e3 if seconds else None


# ---- output ---------------------------------------------------------------------------

COLUMNS = ("phase", "coordinates", "base_ms", "cand_ms", "base_samples", "cand_samples",
           "change_pct", "noise_pct", "noise_source", "verdict", "note")


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _rule(c: Comparison) -> str:
    return (f"noise rule: a point measured at least twice on both sides is judged against "
            f"the larger (max-min)/median of its repeats; a point measured once against the "
            f"stated floor; regressed when slower than max(noise, --fail-above "
            f"{c.fail_above_pct:g}%)")


def render(c: Comparison, fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps({"verdict": "fail" if c.failed else "pass",
                           "baseline": c.baseline, "candidate": c.candidate,
                           "fail_above_pct": c.fail_above_pct, "noise_rule": _rule(c),
                           "problems": c.problems,
                           "phases": {p: c.phase_summary(p) for p in (PHASE_PREFILL,
                                                                       PHASE_DECODE)},
                           "points": [asdict(p) for p in c.points]}, indent=1)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(COLUMNS)
        for p in c.points:
            writer.writerow([_fmt(getattr(p, col)) if col.endswith(("_ms", "_pct"))
                             else getattr(p, col) for col in COLUMNS])
        for problem in c.problems:
            writer.writerow(["gate", "", "", "", "", "", "", "", "", "problem", problem])
        return out.getvalue().rstrip("\n")
    md = fmt == "markdown"
    lines = [f"{'## ' if md else ''}sdbench compare: {c.baseline} -> {c.candidate}", ""]
    for phase in (PHASE_PREFILL, PHASE_DECODE):
        rows = [p for p in c.points if p.phase == phase]
        if not rows:
            continue
        s = c.phase_summary(phase)
        median = "-" if s["median_change_pct"] is None else f"{s['median_change_pct']:+.1f}%"
        lines.append(f"{'### ' if md else ''}{phase}: {s['compared']}/{s['points']} points "
                     f"compared, median change {median}, {s['regressed']} regressed, "
                     f"{s['improved']} improved, {s['missing']} missing")
        header = ("coordinates", "base ms", "cand ms", "n", "change", "noise", "verdict")
        cells = [(p.coordinates, _fmt(p.base_ms), _fmt(p.cand_ms),
                  f"{p.base_samples}/{p.cand_samples}",
                  "-" if p.change_pct is None else f"{p.change_pct:+.1f}%",
                  "-" if p.noise_pct is None else f"{p.noise_pct:.1f}% ({p.noise_source})",
                  p.verdict + (f": {p.note}" if p.note else "")) for p in rows]
        if md:
            lines += ["", "| " + " | ".join(header) + " |",
                      "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(row) + " |" for row in cells]
        else:
            widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header) - 1)]
            for row in [header, *cells]:
                padded = (v.ljust(w) for v, w in zip(row, widths, strict=False))
                lines.append("  ".join(padded) + "  " + row[-1])
        lines.append("")
    lines.append(_rule(c))
    for problem in c.problems:
        lines.append(f"{'- ' if md else '  '}problem: {problem}")
    lines.append(("**" if md else "") + c.verdict_line() + ("**" if md else ""))
    return "\n".join(lines)
