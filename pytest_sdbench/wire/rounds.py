"""Rounds: how a point's samples are spread over a collection, and the rules that say when a
point has enough of them. One home for each rule; the collector applies them while it
measures, the validator recomputes them from what an artifact states, `compare` reads them.

- Each round measures its points once, in the order ``round_order`` draws from the run's
  seed and the round's index: prefill points first, then decode points (a measured batch
  never mixes the two), each phase shuffled. The order is a pure function of (seed, round,
  points), so a reader recomputes it and refuses a recorded order that differs.
- Until pinned: after the fixed rounds, a point takes more rounds until the half width of
  its median's confidence interval, relative to the median, is within the stated width
  (``median_half_width``), or it reaches the cap of rounds.
- The host canary is measured before and after every round; ``canary_spread`` summarises
  its samples over the collection.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .contract import (
    DEFAULT_ORDER_SEED,
    DEFAULT_REPEATS,
    MEDIAN_INTERVAL,
    MEDIAN_NORMAL_Z,
    MEDIAN_SE_FACTOR,
    MIN_PINNED_ROUNDS,
    PHASES,
    PINNED_CONFIDENCE,
    PINNED_Z,
    REPEAT_BACK_TO_BACK,
    REPEAT_ORDERS,
    REPEAT_ROUNDS,
    STOP_FIXED,
    STOP_NOT_FINISHED,
    STOP_PINNED,
    STOP_ROUND_CAP,
    STUDENT_T_95,
    MedianInterval,
    Phase,
    RepeatOrder,
    StopRule,
)


@dataclass(frozen=True)
class PointRef:
    """A point of the grid by phase and index; sorts in grid order (prefill before decode,
    then by index)."""
    phase: Phase
    point_index: int

    def __lt__(self, other: PointRef) -> bool:
        return (_phase_rank(self.phase), self.point_index) < \
            (_phase_rank(other.phase), other.point_index)


@dataclass(frozen=True)
class CanarySample:
    """One reading of the host's speed (each value the median of CANARY_REPS runs)."""
    python_seconds: float           # the fixed pure-Python loop
    launch_seconds: float | None    # CUDA: host time to enqueue CANARY_KERNELS kernels; None on CPU


@dataclass(frozen=True)
class Round:
    """One round: the points it measured, in order, bracketed by two canary readings."""
    index: int
    order: tuple[PointRef, ...]
    canary_before: CanarySample
    canary_after: CanarySample | None   # null only in the last round of a partial artifact


@dataclass(frozen=True)
class UntilPinned:
    """More rounds for a point until its median is pinned, up to a cap."""
    max_half_width: float     # relative half width of the median's CI that pins it
    confidence: float         # of that interval (contract.PINNED_CONFIDENCE)
    max_rounds: int           # no point takes more rounds than this


class PlanError(ValueError):
    """A repeat plan that cannot run; .field names the plan's field (repeats, order,
    until_pinned, max_rounds), so that a caller names its own option without reading the
    message; str() is 'field words: why'."""

    def __init__(self, field: str, why: str):
        super().__init__(f"{field.replace('_', ' ')}: {why}")
        self.field, self.why = field, why


@dataclass(frozen=True)
class RepeatPlan:
    """How a collection repeats its points (not itself part of the artifact: its
    measurement_policy records it). Checked on construction; errors (PlanError) name the
    field."""
    repeats: int = DEFAULT_REPEATS      # rounds: the fixed rounds; back_to_back: per point
    order: RepeatOrder = REPEAT_ROUNDS
    seed: int = DEFAULT_ORDER_SEED
    until_pinned: UntilPinned | None = None

    def __post_init__(self):
        if type(self.repeats) is not int or self.repeats < 1:
            raise PlanError("repeats", f"must be an integer >= 1, got {self.repeats!r}")
        if self.order not in REPEAT_ORDERS:
            raise PlanError("repeat_order", f"expected one of {REPEAT_ORDERS}, got "
                            f"{self.order!r}")
        until = self.until_pinned
        if until is None:
            return
        if self.order == REPEAT_BACK_TO_BACK:
            raise PlanError("until_pinned", "takes rounds (each round a fresh order); "
                            "back-to-back repeats cannot be extended")
        if not 0 < until.max_half_width < 1:
            raise PlanError("until_pinned", f"the median's relative half width must lie in "
                            f"(0, 1), got {until.max_half_width}")
        if until.max_rounds < max(self.repeats, MIN_PINNED_ROUNDS):
            raise PlanError("max_rounds", f"{until.max_rounds} is fewer than the "
                            f"{max(self.repeats, MIN_PINNED_ROUNDS)} rounds a point takes "
                            f"before it can be pinned")


# One measurement of each point: what a collection takes when no plan is given.
ONE_ROUND = RepeatPlan(repeats=1)


@dataclass(frozen=True)
class CanarySpread:
    """The host canary over a whole collection: every reading, summarised."""
    workload: str
    samples: int
    python_median_seconds: float
    python_spread: float               # (max - min) / median
    python_cv: float
    launch_median_seconds: float | None
    launch_spread: float | None
    launch_cv: float | None


def _phase_rank(phase: str) -> int:
    return PHASES.index(phase)


def round_order(refs: Iterable[PointRef], seed: int, round_index: int) -> tuple[PointRef, ...]:
    """The order of round `round_index` over `refs`: prefill points, then decode points, then
    mixed points (contract.PHASES' order), each phase shuffled by a generator seeded with
    (seed, round_index). Deterministic across Python versions and machines (random.Random
    with a str seed hashes it with sha512)."""
    rng = random.Random(f"sdbench-round:{seed}:{round_index}")
    out: list[PointRef] = []
    for phase in PHASES:
        mine = sorted(r for r in set(refs) if r.phase == phase)
        rng.shuffle(mine)
        out.extend(mine)
    return tuple(out)


def interval_quantile(n: int, rule: MedianInterval = MEDIAN_INTERVAL) -> float:
    """The quantile of the median's 95% interval from n samples, under the rule."""
    if rule == MEDIAN_NORMAL_Z:
        return PINNED_Z
    df = n - 1
    if df <= len(STUDENT_T_95):
        return STUDENT_T_95[df - 1]
    return PINNED_Z + (PINNED_Z ** 3 + PINNED_Z) / (4 * df)


def median_half_width(seconds: Sequence[float],
                      rule: MedianInterval = MEDIAN_INTERVAL) -> float | None:
    """The half width of a 95% confidence interval of the median, relative to it:
    q * MEDIAN_SE_FACTOR * stdev / sqrt(n) / median, q of the rule (interval_quantile).
    None for fewer than 2 samples (no spread to estimate) or a median of 0."""
    if len(seconds) < 2:
        return None
    median = statistics.median(seconds)
    if not median > 0:
        return None
    return interval_quantile(len(seconds), rule) * MEDIAN_SE_FACTOR * \
        statistics.stdev(seconds) / math.sqrt(len(seconds)) / median


def median_interval_rank(n: int, confidence: float = PINNED_CONFIDENCE) -> int | None:
    """The distribution-free confidence interval of a median of n samples: [x_(k),
    x_(n+1-k)] of the sorted samples covers the true median with probability 1 - 2 P(B <
    k), B ~ Binomial(n, 1/2), whatever the noise's distribution. The largest k whose
    coverage is at least `confidence`; None when n is too few for any (at 95%: n < 6)."""
    tail, below, k = (1 - confidence) / 2, 0.0, 0
    while k < n:
        below += math.comb(n, k) / 2 ** n     # P(B <= k)
        if below > tail:
            break
        k += 1
    return k if k >= 1 else None


def order_statistic_half_width(seconds: Sequence[float],
                               confidence: float = PINNED_CONFIDENCE) -> float | None:
    """The half width of the median's order-statistic interval (median_interval_rank),
    relative to the median: its farther end from the median, so that the interval lies
    within +-width of it. None for too few samples or a median of 0."""
    k = median_interval_rank(len(seconds), confidence)
    if k is None:
        return None
    ranked = sorted(seconds)
    median = statistics.median(ranked)
    if not median > 0:
        return None
    return max(median - ranked[k - 1], ranked[len(ranked) - k] - median) / median


def is_pinned(seconds: Sequence[float], max_half_width: float,
              rule: MedianInterval = MEDIAN_INTERVAL) -> bool:
    """At least MIN_PINNED_ROUNDS samples, and the median's relative half width within
    max_half_width."""
    width = median_half_width(seconds, rule)
    return len(seconds) >= MIN_PINNED_ROUNDS and width is not None and width <= max_half_width


def needs_another_round(seconds: Sequence[float], fixed_rounds: int,
                        until: UntilPinned | None,
                        rule: MedianInterval = MEDIAN_INTERVAL) -> bool:
    """Whether a point with these samples (in round order) takes part in the next round."""
    if len(seconds) < fixed_rounds:
        return True
    if until is None or len(seconds) >= until.max_rounds:
        return False
    return not is_pinned(seconds, until.max_half_width, rule)


def final_stop(seconds: Sequence[float], until: UntilPinned,
               rule: MedianInterval = MEDIAN_INTERVAL) -> StopRule | None:
    """Why an until-pinned point stopped after these samples: pinned, the cap, or None (it
    would have taken another round)."""
    if is_pinned(seconds, until.max_half_width, rule):
        return STOP_PINNED
    if len(seconds) >= until.max_rounds:
        return STOP_ROUND_CAP
    return None


def stop_rule(seconds: list[float], repeats: int, until: UntilPinned | None,
              rule: MedianInterval = MEDIAN_INTERVAL) -> StopRule:
    """Why a point has these samples (taken in this order): the one rule, applied by the
    builder and recomputed by the validator."""
    if needs_another_round(seconds, repeats, until, rule):
        return STOP_NOT_FINISHED
    if until is None:
        return STOP_FIXED
    stop = final_stop(seconds, until, rule)
    assert stop is not None   # no further round needed: pinned or at the cap
    return stop


@dataclass(frozen=True)
class Sample:
    """One sample of a point: the observations one work item retained (one step, or under
    settled_steps several consecutive steps of one run, which are not independent of each
    other). Its time is their lower median: an observed step's time, never a mean."""
    repeat: int
    round: int
    observations: tuple

    @property
    def seconds(self) -> float:
        ranked = sorted(o.timing.seconds for o in self.observations)
        return ranked[(len(ranked) - 1) // 2]


def samples_by_point(observations) -> dict[int, list[Sample]]:
    """A phase's observations by point and sample (repeat), each point's samples in the order
    they were taken, each sample's observations in step order."""
    by_item: dict[tuple[int, int, int], list] = {}
    for o in observations:
        by_item.setdefault((o.point_index, o.round, o.repeat), []).append(o)
    by_point: dict[int, list[Sample]] = {}
    for (index, round_, repeat), obs in sorted(by_item.items()):
        steps = tuple(sorted(obs, key=lambda o: getattr(o, "step_index", 0)))
        by_point.setdefault(index, []).append(Sample(repeat, round_, steps))
    return by_point


def _spread(values: Sequence[float]) -> tuple[float, float, float]:
    median = statistics.median(values)
    spread = (max(values) - min(values)) / median if median > 0 else 0.0
    mean = statistics.fmean(values)
    cv = statistics.stdev(values) / mean if len(values) > 1 and mean > 0 else 0.0
    return median, spread, cv


def canary_spread(workload: str, samples: Sequence[CanarySample]) -> CanarySpread | None:
    """Every canary reading of a collection, summarised (None: no reading)."""
    if not samples:
        return None
    py = _spread([s.python_seconds for s in samples])
    launches = [s.launch_seconds for s in samples if s.launch_seconds is not None]
    launch = _spread(launches) if launches else (None, None, None)
    return CanarySpread(workload=workload, samples=len(samples), python_median_seconds=py[0],
                        python_spread=py[1], python_cv=py[2], launch_median_seconds=launch[0],
                        launch_spread=launch[1], launch_cv=launch[2])


def canary_readings(rounds: Sequence[Round]) -> list[CanarySample]:
    """The canary readings of a collection in time order: before and after each round."""
    return [s for r in rounds for s in (r.canary_before, r.canary_after) if s is not None]


def point_canary_spread(rounds: Sequence[Round], round_indices: Iterable[int]) -> float | None:
    """The relative range (max - min) / median of the python canary over the rounds a
    point's samples were taken in (both readings of each): how much the host's speed moved
    under that point. None without a reading."""
    by_index = {r.index: r for r in rounds}
    values = [s.python_seconds for i in sorted(set(round_indices)) if i in by_index
              for s in (by_index[i].canary_before, by_index[i].canary_after) if s is not None]
    if not values:
        return None
    return _spread(values)[1]
