"""An artifact's repeats and host in words, for a person: the one home of the lines and
columns that `sdbench show`, `sdbench plot` and `sdbench compare` print about how a
collection repeated its points (rounds or back to back), how the host's speed moved under
it (the canary) and where its threads ran, and of the columns of a point's summary.

Imports only the wire format, so that every command that reads an artifact can use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..wire.contract import (
    MIN_ROUNDS_FOR_NOISE,
    PHASES,
    PINNED_CONFIDENCE,
    POLICY_DESCRIPTIONS,
    REPEAT_BACK_TO_BACK,
)
from ..wire.model import Artifact, CpuPlacement, Observation, PointSummary
from ..wire.rounds import CanarySpread


def is_legacy(a: Artifact) -> bool:
    """Upgraded from an older schema: no rounds recorded (the only artifacts without)."""
    return not a.rounds


def rounds_taken(a: Artifact) -> int:
    """Rounds over the grid: the recorded rounds (a back-to-back pass records one)."""
    return len(a.rounds)


def policy_line(a: Artifact) -> str:
    """Which steps the artifact retains, each phase's policy said as what it is (a legacy
    steady_step profile retained the first decode step after admission, not a serving step;
    mixed_step, the step that admits a mixed point's prefills beside its decodes); and how
    many of its samples ran while the GPU's clock was capped."""
    policy = a.measurement_policy
    parts = [f"{phase}: {name} ({POLICY_DESCRIPTIONS[name]})"
             for phase in PHASES if (name := getattr(policy, phase))]
    observations: list[Observation] = [o for phase in PHASES for o in getattr(a, phase)]
    clocked = [o.gpu_clock for o in observations if o.gpu_clock is not None]
    if clocked:
        capped = sum(c.capped for c in clocked)
        parts.append(f"GPU clock read around every work item: {capped} of {len(clocked)} "
                     "observations taken while capped (`sdbench show` marks them * in its SM MHz "
                     "column)")
    return "retained steps: " + "; ".join(parts)


def repeat_policy(a: Artifact) -> str:
    """How the collection repeated its points, in one line."""
    policy = a.measurement_policy
    if is_legacy(a):
        return (f"repeats: {policy.repeats} a point, taken back to back (legacy artifact: no "
                "rounds and no host canary recorded)")
    if policy.repeat_order == REPEAT_BACK_TO_BACK:
        return (f"repeats: {policy.repeats} a point, taken back to back right after its "
                "warm-up (their spread shares the host's speed of that moment and understates "
                "its noise)")
    text = (f"repeats: {rounds_taken(a)} round(s) of the grid, each in a fresh order drawn "
            f"from seed {policy.order_seed}; {policy.repeats} fixed round(s)")
    until = policy.until_pinned
    if until is not None:
        text += (f", then until pinned (the {until.confidence:.0%} CI of a point's median "
                 f"within +-{100 * until.max_half_width:g}%, at most {until.max_rounds} "
                 "rounds)")
    return text


def canary_line(canary: CanarySpread | None) -> str:
    """The host canary over the collection: its median and how far it moved."""
    if canary is None:
        return "host canary: none recorded (legacy artifact)"
    text = (f"host canary: python loop {1e3 * canary.python_median_seconds:.3f} ms median "
            f"over {canary.samples} readings, spread {100 * canary.python_spread:.1f}% "
            f"(max-min)/median, CV {100 * canary.python_cv:.1f}%")
    if canary.launch_median_seconds is not None:
        text += (f"; kernel launches {1e3 * canary.launch_median_seconds:.3f} ms median, "
                 f"spread {100 * (canary.launch_spread or 0.0):.1f}%, CV "
                 f"{100 * (canary.launch_cv or 0.0):.1f}%")
    return text


def cpu_list(cpus: Sequence[int]) -> str:
    """(0, 1, 2, 3, 8) -> '0-3,8'."""
    parts: list[str] = []
    ordered = sorted(cpus)
    start = None
    for i, c in enumerate(ordered):
        start = c if start is None else start
        if i + 1 == len(ordered) or ordered[i + 1] != c + 1:
            parts.append(f"{start}-{c}" if c != start else f"{c}")
            start = None
    return ",".join(parts) or "none"


def placement_line(placement: CpuPlacement | None) -> str:
    """Where the engine's threads ran, briefly: the main thread's CPUs, the pinning asked
    for, and how many threads ran on other masks."""
    if placement is None:
        return "CPU placement: not recorded (legacy artifact)"
    main = placement.main_thread_allowed_cpus
    asked = ("no pinning asked" if placement.requested_cpus is None
             else f"pinned to {cpu_list(placement.requested_cpus)}")
    others = sum(t.allowed_cpus != main for t in placement.threads)
    return (f"CPU placement: main thread on CPUs {cpu_list(main)} ({asked}); "
            f"{len(placement.threads)} threads, {others} on another mask")


def noise_judgeable(a: Artifact) -> str | None:
    """Why the dispersion of this artifact's points cannot give their noise, as a predicate
    ("took 1 round"); None: it can (compare needs MIN_ROUNDS_FOR_NOISE rounds, each a fresh
    order)."""
    if is_legacy(a):
        return "is a legacy artifact (repeats taken back to back, no rounds)"
    if a.measurement_policy.repeat_order == REPEAT_BACK_TO_BACK:
        return ("took its repeats back to back (they share the host's speed of a moment and "
                "understate its noise)")
    if rounds_taken(a) < MIN_ROUNDS_FOR_NOISE:
        return f"took {rounds_taken(a)} round(s)"
    return None


# ---- a point's summary as columns (show prints them, plot tables them) ---------------------

@dataclass(frozen=True)
class SummaryColumn:
    label: str
    cell: Callable[[PointSummary], str]


def _pct(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}"


CI_LABEL = f"ci{100 * PINNED_CONFIDENCE:.0f} +-%"
SUMMARY_COLUMNS = (
    SummaryColumn("n", lambda s: str(s.samples)),
    SummaryColumn("median ms", lambda s: f"{1e3 * s.median_seconds:.3f}"),
    SummaryColumn(CI_LABEL, lambda s: _pct(s.median_half_width)),
    # the artifact's cv is 0 for one sample; a spread of one sample is unknown, as its CI
    SummaryColumn("cv %", lambda s: _pct(s.cv if s.samples > 1 else None)),
    SummaryColumn("min ms", lambda s: f"{1e3 * s.min_seconds:.3f}"),
    SummaryColumn("max ms", lambda s: f"{1e3 * s.max_seconds:.3f}"),
    SummaryColumn("stop", lambda s: s.stop),
    SummaryColumn("canary %", lambda s: _pct(s.canary_spread, 1)),
)
SUMMARY_NOTE = (f"{CI_LABEL}: half width of the median's "
                f"{PINNED_CONFIDENCE:.0%} confidence interval, % of the median; cv: across the "
                "point's samples (rounds); stop: why it has n samples; canary: the host "
                "canary's spread (max-min)/median over the point's rounds")
