"""Collection: every point of the grid is warmed up unbooked (warmup.ShapeWarmup), then
measured booked in the schedule its repeat plan names (schedules.Rounds or BackToBack),
each run by its phase's runner (prefill.PrefillRunner, decode.DecodeRunner,
mixed.MixedRunner), which retains the steps its measurement policy names (agg: prefill
points, then decode points, then mixed points in every pass; a prefill and a decode point
never share a measured batch, and a mixed point's step is one asked for as such).

Decode points are seeded: an unbooked run computes the point's prompts (chunked over as
many steps as the engine's token budget needs), so that the measured run of the same
prompts is admitted in one step from the prefix cache and reaches the settled steps with
exactly the point's context (limited by the KV capacity, not one step's budget). Where the
KV cache holds them, the prompts come from one pool (prompt_pool.py), and a run whose
admission missed the cache is re-seeded and repeated.

The observer is attached for the collection and detached afterwards, whatever happens; the
garbage collector is paused while a point is warmed up or measured (collected before).
A grid reaches the collector checked (run.collect checks it once against the engine).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from ..engine.canary import measure_canary
from ..engine.clock import ClockReader, NoClock, open_clock
from ..engine.surface import InProcessEngine
from ..wire.contract import (
    BOOKING_MEASURED,
    GENERATION_SAMPLING,
    PHASE_DECODE,
    PHASE_MIXED,
    PHASE_PREFILL,
    PHASES,
    REPEAT_ROUNDS,
    collected_phases,
)
from ..wire.model import (
    DecodeObservation,
    MixedObservation,
    Observation,
    PrefillObservation,
    SkippedPoint,
    utc_now,
)
from ..wire.points import Grid, Point, capture_sizes
from ..wire.rounds import ONE_ROUND, PointRef, RepeatPlan, Sample
from .decode import DecodeRunner
from .mixed import MixedRunner
from .observer import NativeObserver
from .phase import PhaseRunner
from .prefill import PrefillRunner
from .prompt_pool import PromptPool, TimeBreakdown
from .result import CollectionResult, PointState, paused_gc
from .runs import EngineRuns
from .schedules import BackToBack, Rounds, Schedule
from .timing import timer_for
from .warmup import ShapeWarmup


class Collector:
    def __init__(self, engine: InProcessEngine, progress=None, decode_tokens: int | None = None,
                 repeats: RepeatPlan = ONE_ROUND,
                 on_point: Callable[[CollectionResult], None] | None = None):
        self.engine = engine
        self.decode_tokens = decode_tokens  # output tokens of a decode run (default: enough)
        self.plan = repeats
        self.progress = progress or (lambda done, total, label: None)
        self._on_point = on_point or (lambda result: None)  # after every sample (checkpoints)
        self.clock: ClockReader | NoClock = NoClock()
        self.done, self.total = 0, 0
        self.result = CollectionResult(mode="", grid=Grid())

    @property
    def rounds(self) -> bool:
        return self.plan.order == REPEAT_ROUNDS

    def schedule(self) -> Schedule:
        plan = self.plan
        if self.rounds:
            return Rounds(plan.repeats, plan.seed, plan.until_pinned)
        return BackToBack(plan.repeats)

    # ---- the whole collection -----------------------------------------------------------
    def collect(self, mode: str, grid: Grid) -> CollectionResult:
        grid = grid.only(collected_phases(mode, bool(grid.mixed)))
        plan = self.plan
        self.result = result = CollectionResult(
            mode=mode, grid=grid, repeats=plan.repeats, repeat_order=plan.order,
            order_seed=plan.seed if self.rounds else None, until_pinned=plan.until_pinned,
            sampling=dict(GENERATION_SAMPLING), started_at=utc_now())
        points: dict[PointRef, Point] = {PointRef(phase, i): p  # type: ignore[arg-type]
                                          for phase in PHASES
                                          for i, p in enumerate(getattr(grid, phase))}
        self._started = time.perf_counter()
        engine = self.engine
        self.clock = open_clock(engine.device)
        observer = NativeObserver(engine.llm, timer_for(engine.device)).attach()
        try:
            pool = PromptPool.fitting(grid, engine.block_size, engine.kv_capacity.tokens,
                                      engine.fresh_tokens)
            self.runs = EngineRuns(engine, observer, result.breakdown, pool)
            self.warmup = ShapeWarmup(self.runs, capture_sizes(
                engine.identity.settings.cudagraph_capture_sizes))
            self.runners: dict[str, PhaseRunner] = {
                PHASE_PREFILL: PrefillRunner(self.runs),
                PHASE_DECODE: DecodeRunner(self.runs, self.decode_tokens),
                PHASE_MIXED: MixedRunner(self.runs, self.decode_tokens)}
            self.schedule().run(self, points)
            self.progress(self.done, self.total, "done")
        finally:
            observer.detach()
            self.tick()
        return result

    @property
    def breakdown(self) -> TimeBreakdown:
        return self.result.breakdown

    # ---- one point: prepare and warm up; one measured pass ------------------------------
    def prepare(self, ref: PointRef, point) -> PointState:
        """Seed the point's prompts and warm its exact coordinate up, unbooked."""
        runner = self.runners[ref.phase]

        def work():
            with runner.conditions(point):
                state = runner.prepare(point)
                if runner.warmed_by_seed and self.warmup.seed_warms(point):
                    state.warmup = (0, True)   # WARMUP_SEEDED_PASSES
                else:
                    state.warmup = self.warmup.warm(state, runner)
            return state
        with self.breakdown.section("warm-up"):
            return paused_gc(work)

    def measure(self, ref: PointRef, state: PointState, round_index: int,
                reseed: bool) -> list[Observation]:
        """One booked pass of the point (its next sample) and the observations it retains.
        reseed: compute its own prompts again first (other points ran since; pooled ones
        only after a miss). The GPU clock is read right before and right after the run."""
        runner = self.runners[ref.phase]
        repeat = len(state.seconds)
        reseed = reseed and not state.pooled

        def measured():
            def run():
                before = self.clock.read()
                outcome = runner.once(state, BOOKING_MEASURED)
                return outcome, self.clock.since(before)
            return self.runs.seeded(state, runner.seed, run)

        def work():
            if reseed:
                runner.seed(state)
            with runner.conditions(state.point):
                outcome, clock = measured()
                if state.shape_unchecked and not self.warmup.ran_settled(state,
                                                                          outcome.record):
                    state.warmup = self.warmup.warm(state, runner)
                    outcome, clock = measured()
            return list(runner.observations(ref.point_index, state, outcome, clock, repeat,
                                            round_index))
        with self.breakdown.section("measure"):
            observations = paused_gc(work)
        state.seconds.append(Sample(repeat, round_index, tuple(observations)).seconds)
        return observations

    # ---- what a schedule drives ---------------------------------------------------------
    def tick(self) -> None:
        result = self.result
        result.elapsed_seconds = time.perf_counter() - self._started
        runs = getattr(self, "runs", None)
        result.timed_seconds = runs.timed_seconds if runs is not None else 0.0

    def step(self, label: str) -> None:
        self.progress(self.done, self.total, label)
        self.done += 1

    def fail(self, ref: PointRef, exc: Exception, round_index: int | None = None) -> None:
        """The point is skipped with the cause; what it measured before is dropped (a point
        is either every one of its samples or none)."""
        result = self.result
        where = "" if round_index is None else f"round {round_index}: "
        kept = [o for o in getattr(result, ref.phase) if o.point_index != ref.point_index]
        dropped = len(getattr(result, ref.phase)) - len(kept)
        if dropped:
            result.measured_seconds = math.fsum(o.timing.seconds for phase in PHASES
                                                for o in (kept if phase == ref.phase
                                                          else getattr(result, phase)))
        setattr(result, ref.phase, kept)
        result.skipped.append(SkippedPoint(ref.phase, ref.point_index, f"{where}{exc}"))

    def keep(self, observations: list[Observation]) -> None:
        """A work item's observations, kept together (a point's sample is all of them)."""
        result = self.result
        for observation in observations:
            getattr(result, _phase_of(observation)).append(observation)
            result.measured_seconds += observation.timing.seconds
        self.tick()
        self.on_point(result)

    def end_round(self, position: int) -> None:
        """The round's closing canary reading, then on_point (a checkpoint at every round's
        end: the last one holds every sample)."""
        self.result.end_round(position, self.canary())
        self.on_point(self.result)

    def canary(self):
        with self.breakdown.section("canary"):
            return measure_canary(self.engine.device)

    def on_point(self, result: CollectionResult) -> None:
        with self.breakdown.section("checkpoint"):
            self._on_point(result)

    def touching(self, order):
        """The pass's points in order, the pool touched before its first decode or mixed
        point (a pass runs its prefill points first: their fresh prompts evict the pool's
        blocks)."""
        touched = False
        for ref in order:
            if ref.phase != PHASE_PREFILL and not touched:
                self.runs.touch_pool()
                touched = True
            yield ref


_PHASE_OF = {PrefillObservation: PHASE_PREFILL, DecodeObservation: PHASE_DECODE,
             MixedObservation: PHASE_MIXED}


def _phase_of(observation) -> str:
    return _PHASE_OF[type(observation)]
