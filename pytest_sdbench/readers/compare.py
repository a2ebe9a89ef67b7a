"""`sdbench compare`: a gate between a baseline and a candidate artifact.

Points are matched by their coordinates (prefill: batch, new tokens, cached prefix; decode:
batch, context, K, acceptance length; mixed: the decode batch's batch, context, K and
acceptance length, and its prefills' batch, new tokens and cached prefix). For each point
the change is that of the medians of its samples, judged against the point's noise, which
comes from its dispersion across rounds (each round measures the whole grid once in a fresh
order, so that a point's samples are spread over the collection and their spread is the
host's noise, not a moment's):

- both sides took at least MIN_ROUNDS_FOR_NOISE rounds: a point's noise, in percent of its
  median, is NOISE_Z * MEDIAN_SE_FACTOR * sqrt(cv_b^2/n_b + cv_c^2/n_c): the normal bound
  of the difference of two medians of n_b and n_c samples (MEDIAN_SE_FACTOR: the median's
  standard error over the mean's), each cv the point's CV across its rounds, raised to its
  phase's typical CV on that side (the median over the phase's points), so that a point
  whose few samples happened to agree is not judged by a noise no other point shows;
- NOISE_Z = 4: a one-sided normal tail of 3.2e-5 a point, so that 100 points of unchanged
  code fail together 0.3% of the time were the noise normal and its CV known (Bonferroni's
  z for 1% over 100 points is 3.72); the margin pays for CVs estimated from a few rounds
  and for the drift between two collections that no within-collection spread shows;
- fewer rounds on either side, back-to-back repeats, or a legacy artifact: the noise
  cannot be judged, and the gate fails saying how many rounds it needs, unless
  --noise-floor states the noise: then those points are judged against that floor (with
  rounds, --noise-floor is the least noise assumed).

The host: each side's host canary (a fixed host workload read before and after every
round) says how fast the host ran. When the candidate's canary is slower than the
baseline's beyond the canary's own noise (HOST_Z, the same rule over its readings), a point
slower than its bound by no more than the host's slowdown is ``host_slower``: told apart
from a regression and not failing the gate; a point slower beyond that is regressed. A side
whose canary readings vary beyond HOST_STEADY_CV changed speed within its collection (its
medians may agree with the other side's while its points' medians sit in either speed):
the host line says so beside the verdicts; it does not change them.

A point is regressed when it is slower than max(noise, --fail-above), plus the host's
slowdown. The gate fails, naming each cause, on a regressed point, on noise it cannot
judge, on a point missing from either side (skipped or outside its grid), on a side whose
status is not complete, on a different mode, device, K or acceptance control, and on a side
that ran contended (or whose run environment is unknown). Each phase (prefill, decode,
mixed) is summarised apart, and a mixed point is judged as the others are; a mixed point on
one side only is missing on the other (an agg collection without mixed points against one
with them fails the gate naming each).

What compare reads of each side is compare_sides.py's; its output, compare_render.py's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from ..wire.contract import (
    MEDIAN_SE_FACTOR,
    MIN_ROUNDS_FOR_NOISE,
    PHASES,
    PINNED_Z,
)
from ..wire.model import Artifact, PointSummary
from ..wire.points import point_label
from ..wire.rounds import CanarySpread
from .compare_sides import (
    Measured,
    grid_points,
    key_order,
    measured_points,
    same_order_seed,
    side_problems,
    skip_reasons,
    typical_cv,
)
from .describe import canary_line, noise_judgeable, policy_line, repeat_policy

# z of a point's noise bound (the module's docstring says why 4), and of the host canary's
# (one comparison, not one a point: the two-sided 95% z).
NOISE_Z = 4.0
HOST_Z = PINNED_Z
# A side's canary CV over its readings beyond which its host changed speed within the
# collection: 2-5% on a steady 2-core CI host; 22% was seen beside a same-code point +55%
# whose canary medians agreed (-1.1%).
HOST_STEADY_CV = 0.10

OK, REGRESSED, IMPROVED = "within_noise", "regressed", "improved"
HOST_SLOWER, NOISE_UNKNOWN = "host_slower", "noise_unknown"
MISSING_IN_BASELINE, MISSING_IN_CANDIDATE = "missing_in_baseline", "missing_in_candidate"
VERDICTS = (OK, REGRESSED, IMPROVED, HOST_SLOWER, NOISE_UNKNOWN, MISSING_IN_BASELINE,
            MISSING_IN_CANDIDATE)
# Where a point's noise came from: its rounds, the stated floor, or nowhere.
SOURCE_ROUNDS, SOURCE_FLOOR, SOURCE_NONE = "rounds", "floor", "none"


@dataclass(frozen=True)
class PointChange:
    """One point of the comparison; its fields are the columns of every output format."""
    phase: str
    coordinates: str
    base_ms: float | None          # median of the point's samples
    cand_ms: float | None
    base_samples: int
    cand_samples: int
    base_cv_pct: float | None      # CV across the point's samples (rounds)
    cand_cv_pct: float | None
    change_pct: float | None
    noise_pct: float | None
    noise_source: str              # SOURCE_ROUNDS, SOURCE_FLOOR or SOURCE_NONE
    verdict: str
    note: str = ""


COLUMNS = tuple(f.name for f in fields(PointChange))


@dataclass(frozen=True)
class HostWorkload:
    """One canary workload on both sides: medians, the change and its noise."""
    workload: str
    base_ms: float
    cand_ms: float
    change_pct: float
    noise_pct: float

    @property
    def slower(self) -> bool:
        return self.change_pct > self.noise_pct

    @property
    def faster(self) -> bool:
        return self.change_pct < -self.noise_pct


@dataclass(frozen=True)
class HostComparison:
    """The two hosts' canaries compared; slowdown_pct > 0 when the candidate's ran slower
    beyond the canary's noise (the largest such workload's change)."""
    workloads: tuple[HostWorkload, ...]
    missing: str | None            # why the hosts could not be compared (no canary)
    unsteady: tuple[str, ...] = ()  # each side whose canary varied beyond HOST_STEADY_CV

    @property
    def slowdown_pct(self) -> float:
        return max((w.change_pct for w in self.workloads if w.slower), default=0.0)

    def line(self) -> str:
        if self.missing is not None:
            return f"host: not compared: {self.missing}"
        parts = [f"{w.workload} {w.base_ms:.3f} -> {w.cand_ms:.3f} ms ({w.change_pct:+.1f}%, "
                 f"noise {w.noise_pct:.1f}%)" for w in self.workloads]
        if self.slowdown_pct > 0:
            verdict = (f"the candidate's host ran slower by {self.slowdown_pct:.1f}%: a point "
                       f"slower within its bound plus {self.slowdown_pct:.1f}% is "
                       f"{HOST_SLOWER}, not a regression")
        elif any(w.faster for w in self.workloads):
            verdict = ("the candidate's host ran faster: a regression smaller than its "
                       "speed-up may hide")
        else:
            verdict = "the hosts ran alike (within the canary's noise)"
        if self.unsteady:
            verdict += ("; but the host changed speed within a collection ("
                        f"{'; '.join(self.unsteady)}): its points' medians may sit in "
                        "either speed")
        return f"host canary, baseline -> candidate: {'; '.join(parts)}: {verdict}"

    def as_dict(self) -> dict:
        return {"slowdown_pct": round(self.slowdown_pct, 2), "missing": self.missing,
                "workloads": [{"workload": w.workload, "base_ms": w.base_ms,
                               "cand_ms": w.cand_ms, "change_pct": round(w.change_pct, 2),
                               "noise_pct": round(w.noise_pct, 2), "slower": w.slower}
                              for w in self.workloads],
                "unsteady": list(self.unsteady)}


@dataclass
class Comparison:
    baseline: str
    candidate: str
    fail_above_pct: float
    noise_floor_pct: float | None = None
    host: HostComparison = field(default_factory=lambda: HostComparison((), "not read"))
    typical_cv_pct: dict[str, dict[str, float | None]] = field(default_factory=dict)
    sides: dict[str, list[str]] = field(default_factory=dict)   # each side's repeats, canary
    points: list[PointChange] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> list[PointChange]:
        return [p for p in self.points if p.verdict == REGRESSED]

    @property
    def host_slower(self) -> list[PointChange]:
        return [p for p in self.points if p.verdict == HOST_SLOWER]

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
                "host_slower": sum(p.verdict == HOST_SLOWER for p in mine),
                "missing": sum(p.verdict in (MISSING_IN_BASELINE, MISSING_IN_CANDIDATE)
                               for p in mine),
                "typical_cv_pct": self.typical_cv_pct.get(phase, {})}

    def verdict_line(self) -> str:
        host = ""
        if self.host_slower:
            host = (f"; {len(self.host_slower)} point(s) {HOST_SLOWER}: slower only within "
                    f"the candidate host's slowdown of {self.host.slowdown_pct:.1f}%")
        if not self.failed:
            return (f"PASS: no point slower beyond its noise and {self.fail_above_pct:g}% "
                    f"({len(self.points)} points){host}")
        parts = []
        if self.regressed:
            named = ", ".join(f"{p.phase} {p.coordinates} {p.change_pct:+.1f}%"
                              for p in self.regressed[:5])
            more = f", and {len(self.regressed) - 5} more" if len(self.regressed) > 5 else ""
            parts.append(f"{len(self.regressed)} point(s) regressed ({named}{more})")
        if self.problems:
            shown = "; ".join(self.problems[:3])
            more = f"; and {len(self.problems) - 3} more" if len(self.problems) > 3 else ""
            parts.append(f"{len(self.problems)} problem(s): {shown}{more}")
        return "FAIL: " + "; ".join(parts) + host


def median_noise(z: float, cv_b: float, n_b: int, cv_c: float, n_c: int) -> float:
    """The bound, relative to the median, of the change of two medians of n_b and n_c
    samples whose CVs are cv_b and cv_c: z * MEDIAN_SE_FACTOR * sqrt(cv_b^2/n_b +
    cv_c^2/n_c)."""
    return z * MEDIAN_SE_FACTOR * math.sqrt(cv_b ** 2 / n_b + cv_c ** 2 / n_c)


def compare_hosts(base: CanarySpread | None, cand: CanarySpread | None) -> HostComparison:
    """The two hosts' canaries: per workload the change of the median and its noise."""
    if base is None or cand is None:
        side = " and ".join(name for name, c in (("baseline", base), ("candidate", cand))
                            if c is None)
        return HostComparison((), f"no host canary in the {side} (legacy)")
    workloads = [("python loop", base.python_median_seconds, base.python_cv,
                  cand.python_median_seconds, cand.python_cv)]
    if base.launch_median_seconds is not None and cand.launch_median_seconds is not None:
        workloads.append(("kernel launches", base.launch_median_seconds, base.launch_cv or 0.0,
                          cand.launch_median_seconds, cand.launch_cv or 0.0))
    unsteady = tuple(f"{side}'s canary CV {100 * c.python_cv:.1f}% over {c.samples} readings "
                     f"> {100 * HOST_STEADY_CV:.0f}%"
                     for side, c in (("baseline", base), ("candidate", cand))
                     if c.python_cv > HOST_STEADY_CV)
    return HostComparison(tuple(
        HostWorkload(name, 1e3 * mb, 1e3 * mc, 100 * (mc / mb - 1),
                     100 * median_noise(HOST_Z, cvb, base.samples, cvc, cand.samples))
        for name, mb, cvb, mc, cvc in workloads), None, unsteady)


def compare(base: Artifact, cand: Artifact, fail_above_pct: float = 0.0,
            noise_floor_pct: float | None = None, base_name: str = "baseline",
            cand_name: str = "candidate",
            recollect: Callable[[Artifact, int], str] | None = None) -> Comparison:
    """The verdicts point by point. `recollect(artifact, rounds)`: the command that collects
    a side again with more rounds, named where its noise cannot be judged (the caller's:
    run.recollect.collect_command reads the presets' configs, which a reader never does)."""
    result = Comparison(base_name, cand_name, fail_above_pct, noise_floor_pct,
                        compare_hosts(base.host_canary, cand.host_canary))
    sides = (("baseline", base), ("candidate", cand))
    result.problems += side_problems("baseline", base) + side_problems("candidate", cand)
    result.sides = {side: [repeat_policy(a), policy_line(a), canary_line(a.host_canary)]
                    for side, a in sides}
    same_order = same_order_seed(base, cand)
    if same_order:
        result.sides["candidate"].append(same_order)
    for name, b, c in (("mode", base.mode, cand.mode), ("device", base.device, cand.device),
                       ("draft depth K", base.speculative.draft_depth,
                        cand.speculative.draft_depth),
                       ("acceptance control", base.speculative.acceptance_control,
                        cand.speculative.acceptance_control)):
        if b != c:
            result.problems.append(f"{name} differs: baseline {b}, candidate {c}")
    unjudged = {side: why for side, a in sides if (why := noise_judgeable(a)) is not None}
    if unjudged and noise_floor_pct is None:
        result.problems.append(_cannot_judge(unjudged, dict(sides), recollect))
    typical = {phase: {side: typical_cv(a, phase) for side, a in sides} for phase in PHASES}
    result.typical_cv_pct = {phase: {side: None if cv is None else round(100 * cv, 2)
                                     for side, cv in by_side.items()}
                             for phase, by_side in typical.items()}
    rule = _Rule(fail_above_pct, noise_floor_pct, not unjudged, result.host.slowdown_pct)
    measured_b, measured_c = measured_points(base), measured_points(cand)
    grid = {**grid_points(cand), **grid_points(base)}
    skipped = {"baseline": skip_reasons(base), "candidate": skip_reasons(cand)}
    for key in sorted(set(grid) | set(measured_b) | set(measured_c), key=key_order):
        mb, mc = measured_b.get(key), measured_c.get(key)
        phase, point = grid.get(key) or next((m.phase, m.point) for m in (mb, mc) if m)
        label = point_label(point)
        if mb is None or mc is None:
            side = "baseline" if mb is None else "candidate"
            why = skipped[side].get(key, "not in its grid")
            result.points.append(_missing(phase, label, mb, mc, why))
            result.problems.append(f"{phase} {label}: missing in the {side} ({why})")
            continue
        floors = (typical[phase]["baseline"] or 0.0, typical[phase]["candidate"] or 0.0)
        change = _judged(phase, label, mb.summary, mc.summary, floors, rule)
        if change.verdict == NOISE_UNKNOWN and rule.judgeable:
            result.problems.append(f"{phase} {label}: cannot judge its noise: {change.note}")
        result.points.append(change)
    return result


@dataclass(frozen=True)
class _Rule:
    fail_above_pct: float
    noise_floor_pct: float | None
    judgeable: bool         # both sides took the rounds that judge noise
    host_slack_pct: float   # the candidate host's slowdown (0: not slower)


def _missing(phase: str, label: str, mb: Measured | None, mc: Measured | None,
             why: str) -> PointChange:
    """A point measured on one side only."""
    def ms(m: Measured | None) -> float | None:
        return None if m is None else 1e3 * m.summary.median_seconds
    return PointChange(phase, label, ms(mb), ms(mc), 0 if mb is None else mb.summary.samples,
                       0 if mc is None else mc.summary.samples, None, None, None, None,
                       SOURCE_NONE, MISSING_IN_BASELINE if mb is None else MISSING_IN_CANDIDATE,
                       note=why)


def _judged(phase: str, label: str, sb: PointSummary, sc: PointSummary,
            floors: tuple[float, float], rule: _Rule) -> PointChange:
    """A point measured on both sides, judged by the rule."""
    change = 100.0 * (sc.median_seconds / sb.median_seconds - 1.0)
    noise: float | None = None
    source, note = SOURCE_NONE, ""
    if rule.judgeable and min(sb.samples, sc.samples) >= MIN_ROUNDS_FOR_NOISE:
        noise, source = 100.0 * median_noise(NOISE_Z, max(sb.cv, floors[0]), sb.samples,
                                             max(sc.cv, floors[1]), sc.samples), SOURCE_ROUNDS
        if rule.noise_floor_pct is not None and rule.noise_floor_pct > noise:
            noise, source = rule.noise_floor_pct, SOURCE_FLOOR
    elif rule.noise_floor_pct is not None:
        noise, source = rule.noise_floor_pct, SOURCE_FLOOR
    elif rule.judgeable:   # the artifacts have the rounds; this point does not
        note = (f"{min(sb.samples, sc.samples)} sample(s), fewer than the "
                f"{MIN_ROUNDS_FOR_NOISE} rounds that judge noise")
    return PointChange(phase, label, 1e3 * sb.median_seconds, 1e3 * sc.median_seconds,
                       sb.samples, sc.samples, _cv_pct(sb), _cv_pct(sc), round(change, 2),
                       None if noise is None else round(noise, 2), source,
                       _verdict(change, noise, rule.fail_above_pct, rule.host_slack_pct), note)


def _cv_pct(s: PointSummary) -> float | None:
    """A point's CV across its samples, percent (None for one sample: no spread)."""
    return round(100 * s.cv, 2) if s.samples > 1 else None


def _verdict(change: float, noise: float | None, fail_above_pct: float, slack: float) -> str:
    """A point's verdict from its change and noise (percent), the --fail-above bar and the
    candidate host's slowdown."""
    if noise is None:
        return NOISE_UNKNOWN
    bound = max(noise, fail_above_pct)
    if change < -bound:
        return IMPROVED
    if change <= bound:
        return OK
    return HOST_SLOWER if change <= bound + slack else REGRESSED


def _cannot_judge(unjudged: dict[str, str], artifacts: dict[str, Artifact],
                  recollect: Callable[[Artifact, int], str] | None) -> str:
    sides = "; ".join(f"the {side} {why}" for side, why in unjudged.items())
    again = "`sdbench collect ... --repeats 3`"
    if recollect is not None:
        commands = {side: recollect(artifacts[side], MIN_ROUNDS_FOR_NOISE) for side in unjudged}
        again = (f"`{next(iter(commands.values()))}`" if len(set(commands.values())) == 1 else
                 ", ".join(f"the {side}: `{command}`" for side, command in commands.items()))
    return (f"cannot judge noise: {sides}. A point's noise is its dispersion across at least "
            f"{MIN_ROUNDS_FOR_NOISE} rounds on both sides: collect each with --repeats "
            f"{MIN_ROUNDS_FOR_NOISE} or more (rounds, the default order), e.g. {again} (with "
            "the --grid it was collected with, if any); or state the noise with --noise-floor "
            "PCT")
