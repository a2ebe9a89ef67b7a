"""What `sdbench compare` reads of each side: its points keyed by their coordinates (so that
the two sides' points are matched by them), each measured point's summary, the reasons of
its skipped points, the side's own problems (status, contention), its phases' typical CV
across rounds, and whether both sides drew their rounds' orders from one seed."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..wire.contract import (
    MIN_ROUNDS_FOR_NOISE,
    PHASE_MIXED,
    PHASE_PREFILL,
    PHASES,
    REPEAT_ROUNDS,
    STATUS_COMPLETE,
)
from ..wire.model import Artifact, PointSummary
from ..wire.points import Point


def point_key(phase: str, point) -> tuple:
    """A point's coordinates, which match it across the two sides: prefill (batch, new
    tokens, cached prefix); decode (batch, context, K, AL); mixed (its decode batch's batch,
    context, K and AL, then its prefills' batch, new tokens and cached prefix)."""
    if phase == PHASE_PREFILL:
        return (phase, point.batch_size, point.new_tokens, point.cached_prefix_tokens)
    if phase == PHASE_MIXED:
        return (phase, point.decode_batch_size, point.context_tokens, point.draft_depth,
                point.acceptance_length, point.prefill_batch_size, point.prefill_tokens,
                point.cached_prefix_tokens)
    return (phase, point.batch_size, point.context_tokens, point.draft_depth,
            point.acceptance_length)


@dataclass(frozen=True)
class Measured:
    phase: str
    point: Point
    summary: PointSummary


def measured_points(a: Artifact) -> dict[tuple, Measured]:
    """Per point key: the point and the summary of its samples."""
    points = {(p, i): pt for p in PHASES for i, pt in enumerate(getattr(a.grid, p))}
    return {point_key(s.phase, points[(s.phase, s.point_index)]):
            Measured(s.phase, points[(s.phase, s.point_index)], s)
            for s in a.summaries if (s.phase, s.point_index) in points}


def grid_points(a: Artifact) -> dict[tuple, tuple[str, Point]]:
    return {point_key(phase, p): (phase, p) for phase in PHASES for p in getattr(a.grid, phase)}


def skip_reasons(a: Artifact) -> dict[tuple, str]:
    reasons = {}
    for s in a.coverage.skipped_points:
        points = getattr(a.grid, s.phase)
        if 0 <= s.point_index < len(points):
            reasons[point_key(s.phase, points[s.point_index])] = s.reason
    return reasons


def key_order(key: tuple) -> tuple:
    return (PHASES.index(key[0]), tuple(-1 if v is None else v for v in key[1:]))


def side_problems(label: str, a: Artifact) -> list[str]:
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


def typical_cv(a: Artifact, phase: str) -> float | None:
    """A phase's typical CV across rounds: the median over its points with enough rounds
    (None: no such point)."""
    cvs = [s.cv for s in a.summaries if s.phase == phase and s.samples >= MIN_ROUNDS_FOR_NOISE]
    return statistics.median(cvs) if cvs else None



def same_order_seed(base: Artifact, cand: Artifact) -> str | None:
    """A note when both sides drew their rounds' orders from one seed: they measured their
    points in the same order, so a drift over a collection falls on the same points."""
    seeds = [a.measurement_policy.order_seed for a in (base, cand)
             if a.measurement_policy.repeat_order == REPEAT_ROUNDS]
    if len(seeds) == 2 and seeds[0] is not None and seeds[0] == seeds[1]:
        return (f"order: the baseline's seed ({seeds[0]}) too: both sides measured their "
                "points in the same order; collect one with another --order-seed")
    return None
