"""What a collection produces and the checks made before it runs: the result (observations,
rounds, times), a point's state across rounds, the failures of a point, the fit of a grid to
an engine, the warm-up rule, the paused garbage collector."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field, replace

from ..engine.surface import Engine
from ..wire.contract import (
    DEFAULT_ORDER_SEED,
    PHASES,
    REPEAT_ROUNDS,
    WARMUP_MIN_PASSES,
    WARMUP_TOLERANCE,
    RepeatOrder,
)
from ..wire.model import DecodeObservation, MixedObservation, PrefillObservation, SkippedPoint
from ..wire.points import Grid, GridError, Point, fit_errors
from ..wire.rounds import CanarySample, PointRef, Round, UntilPinned
from .prompt_pool import TimeBreakdown


class PointFailed(RuntimeError):
    """A point whose retained step could not be identified exactly."""


class CacheMiss(PointFailed):
    """A run's admission missed the prefix cache: its prompts were evicted since their seed.
    The run is discarded (never retained); a second miss in a row fails the point."""


@dataclass
class CollectionResult:
    mode: str
    grid: Grid
    repeats: int = 1
    repeat_order: RepeatOrder = REPEAT_ROUNDS
    order_seed: int | None = DEFAULT_ORDER_SEED
    until_pinned: UntilPinned | None = None
    prefill: list[PrefillObservation] = field(default_factory=list)
    decode: list[DecodeObservation] = field(default_factory=list)
    mixed: list[MixedObservation] = field(default_factory=list)
    skipped: list[SkippedPoint] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)   # the last one may be in progress
    sampling: dict = field(default_factory=dict)
    started_at: str = ""
    elapsed_seconds: float = 0.0
    measured_seconds: float = 0.0      # retained steps
    timed_seconds: float = 0.0         # every timed step: seeds, warm-ups, measured runs
    breakdown: TimeBreakdown = field(default_factory=TimeBreakdown)   # host wall, by section

    @property
    def completed(self) -> int:
        """Points with retained observations."""
        return sum(len({o.point_index for o in getattr(self, phase)}) for phase in PHASES)

    def begin_round(self, index: int, order: tuple[PointRef, ...],
                    canary: CanarySample) -> int:
        """Record a round about to run (its closing canary reading still missing)."""
        self.rounds.append(Round(index=index, order=order, canary_before=canary,
                                 canary_after=None))
        return len(self.rounds) - 1

    def end_round(self, position: int, canary: CanarySample) -> None:
        self.rounds[position] = replace(self.rounds[position], canary_after=canary)


def check_grid_fits(grid: Grid, engine: Engine, decode_tokens: int | None = None) -> None:
    """Reject, before anything runs, points this engine cannot run exactly: the fit rules of
    the wire format (the validator re-applies them on read), and a decode point's K and
    requested AL must be the engine's."""
    errors = fit_errors(grid, engine.limits, decode_tokens)
    synthetic = engine.spec.synthetic_acceptance_length is not None
    drafting = [(f"decode[{i}]", d) for i, d in enumerate(grid.decode)] + \
        [(f"mixed[{i}]", m) for i, m in enumerate(grid.mixed)]
    for where, d in drafting:
        if d.draft_depth != engine.spec.draft_depth:
            errors.append(f"{where}.draft_depth: the engine verifies K={engine.spec.draft_depth} "
                          f"drafts per step, got {d.draft_depth}")
        if synthetic != (d.acceptance_length is not None):
            errors.append(f"{where}.acceptance_length: the engine's acceptance is "
                          f"{engine.acceptance_control}, so it must be "
                          f"{'a number' if synthetic else 'null'}, got {d.acceptance_length}")
    if errors:
        raise GridError("grid does not fit the engine: " + "; ".join(errors))


def settled(times: list[float], tolerance: float = WARMUP_TOLERANCE,
            min_passes: int = WARMUP_MIN_PASSES) -> bool:
    """The warm-up rule: at least min_passes passes, and the last within `tolerance` of the
    one before it."""
    return len(times) >= min_passes and abs(times[-1] / times[-2] - 1.0) <= tolerance


def paused_gc(work):
    """Run work() with the garbage collector paused, so that its pauses do not land inside
    measured steps. Only the young generations are collected first: a full collection
    scans every object the collection keeps alive, so its cost grows with the observations,
    on every pass (scripts/gc-cost.py: 3.4 ms with none alive, 13.7 ms with 524). Python
    collects the old generation itself between points, once it has grown by a quarter."""
    gc.collect(1)
    gc.disable()
    try:
        return work()
    finally:
        gc.enable()


@dataclass
class PointState:
    """A point's prepared prompts and its samples so far, across rounds."""
    phase: str
    point: Point
    shared: list[int] = field(default_factory=list)      # prefill, mixed: the cached prefix
    prompts: list[list[int]] = field(default_factory=list)  # decode, mixed: the seeded batch
    pooled: bool = False   # its prompts or prefix are the pool's: seeded again on a miss only
    warmup: tuple[int, bool] = (0, False)
    seconds: list[float] = field(default_factory=list)

    @property
    def shape_unchecked(self) -> bool:
        """Warmed by its seed alone (no pass), and no sample yet: its first run's shape is
        still to be checked."""
        return self.warmup[0] == 0 and not self.seconds
