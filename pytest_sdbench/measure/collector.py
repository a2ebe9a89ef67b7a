"""Collection: every point is warmed up unbooked (by_shape_seeded: the first point of each
compiled shape until its step time is stable, a later prefill point of a settled shape for
one pass, a later decode point for none: its seed warms it), then measured booked,
retaining from each run the steps the phase's measurement policy names (agg: prefill points
before decode points in every pass, no measured batch mixing them).

Repeats are taken in rounds (the default): after the warm-up pass over the grid, each round
measures every point once, in a fresh seeded order (wire.rounds.round_order), so that a
point's samples are spread over the whole collection and their spread is the host's true
noise; until pinned, points whose median is not yet pinned take more rounds, up to a cap. A
host-speed canary is read before and after every round. Back-to-back repeats (the v4
policy) remain available as an explicit policy.

Decode points are seeded: an unbooked run computes the point's prompts (chunked over as
many steps as the engine's token budget needs), so that the measured run of the same
prompts is admitted in one step from the prefix cache and reaches the settled steps with
exactly the point's context (limited by the KV capacity, not one step's budget). Where the
KV cache holds them, the prompts come from one pool (prompt_pool.py), and a run whose
admission missed the cache is re-seeded and repeated.

The observer is attached for the collection and detached afterwards, whatever happens; the
garbage collector is paused while a point is warmed up or measured (collected before).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace
from typing import cast

from ..engine import compat, ranks
from ..engine.canary import measure_canary
from ..engine.clock import ClockReader, NoClock, open_clock
from ..engine.surface import InProcessEngine
from ..wire.contract import (
    BOOKING_MEASURED,
    BOOKING_UNBOOKED,
    BOOKING_WARMUP,
    GENERATION_SAMPLING,
    GRAPH_EAGER,
    GRAPH_MODES,
    KV_SEED_NONE,
    KV_SEED_REAL,
    PHASE_DECODE,
    PHASE_IDLE,
    PHASE_PREFILL,
    PHASES,
    PHASES_BY_MODE,
    REPEAT_ROUNDS,
    SETTLED_FIRST_STEP,
    SETTLED_STEPS,
    STEADY_STEP_INDEX,
    TIMER_FOR_SOURCE,
    WARMUP_MAX_PASSES,
    WARMUP_SHAPE_PASSES,
    Booking,
    Device,
    GraphMode,
)
from ..wire.model import (
    DecodeObservation,
    Observation,
    PrefillObservation,
    SkippedPoint,
    utc_now,
)
from ..wire.points import (
    DecodePoint,
    Grid,
    PrefillPoint,
    capture_sizes,
    compiled_shape,
    decode_max_tokens,
    point_label,
)
from ..wire.records import Provenance
from ..wire.rounds import (
    ONE_ROUND,
    PointRef,
    RepeatPlan,
    Sample,
    needs_another_round,
    round_order,
)
from ..wire.shape import decode_mismatch, prefill_mismatch
from .observer import NativeObserver, TimingMissing
from .prompt_pool import PromptPool, TimeBreakdown, admission_hits, missed_the_cache
from .result import (
    CacheMiss,
    CollectionResult,
    PointFailed,
    PointState,
    check_grid_fits,
    paused_gc,
    settled,
)
from .timing import timer_for


def sampling_params(max_tokens: int):
    """The run's generation sampling parameters; every request of a collection uses them."""
    from vllm import SamplingParams
    return SamplingParams(max_tokens=max_tokens, **GENERATION_SAMPLING)


class Collector:
    def __init__(self, engine: InProcessEngine, progress=None, decode_tokens: int | None = None,
                 repeats: RepeatPlan = ONE_ROUND,
                 on_point: Callable[[CollectionResult], None] | None = None):
        self.engine = engine
        self.decode_tokens = decode_tokens  # output tokens of a decode run (default: enough)
        self.repeats = repeats.repeats
        self.repeat_order = repeats.order
        self.order_seed = repeats.seed
        self.until_pinned = repeats.until_pinned
        self.progress = progress or (lambda done, total, label: None)
        self._on_point = on_point or (lambda result: None)  # after every sample (checkpoints)
        self.observer: NativeObserver | None = None
        self.pool: PromptPool | None = None    # None: the pool does not fit the cache
        self.breakdown = TimeBreakdown()
        self.clock: ClockReader | NoClock = NoClock()
        self.timed_seconds = 0.0
        self._done, self._total = 0, 0
        self._warm_shapes: set[tuple[str, str, int]] = set()   # settled in this warm-up
        self._capture_sizes: tuple[int, ...] | None = None

    # ---- prompts ----------------------------------------------------------------------
    def _fresh(self, n: int) -> list[int]:
        """Tokens no earlier prompt on this engine shares (the stream lives on the engine, so
        a second collection does not replay the first one's prompts), so that the only
        cache hits are the ones we seed."""
        return self.engine.fresh_tokens(n)

    # ---- runs -------------------------------------------------------------------------
    def _attached(self) -> NativeObserver:
        if self.observer is None:
            raise RuntimeError("the collector's observer is not attached")
        return self.observer

    def _run(self, prompts, max_tokens: int, booking: Booking, stop_after: int | None = None):
        """(the window's steps, the outputs); stop_after: stop the run after that many steps."""
        missing, outputs, observer = None, None, self._attached()
        stop = None if stop_after is None else (lambda: observer.steps_done() >= stop_after)
        try:
            with observer.window(booking) as window, \
                    self.breakdown.section(f"run {booking}"):
                outputs = self.engine.generate(prompts, sampling_params(max_tokens), stop)
        except TimingMissing as exc:
            if ranks.world_size() == 1:
                raise
            missing = str(exc)  # raised below on every rank, once the ranks have met
        self._agree(window.records, prompts, missing)
        steps = [r for r in window.records if r.snapshot.phase != PHASE_IDLE]
        self.timed_seconds += sum(r.timing.seconds for r in window.records)
        return steps, outputs

    @staticmethod
    def _agree(records, prompts, missing: str | None) -> None:
        """Tensor parallel: every rank hands in its window; the ranks must agree on the
        prompts and every snapshot, and each step's time becomes the slowest rank's, every
        rank's own kept. Every rank computes the same, so all raise or go on together."""
        if ranks.world_size() == 1:
            return
        windows = ranks.gather_from_ranks(ranks.rank_window(records, prompts, missing))
        try:
            times = ranks.join_ranks(windows)
        except ranks.RankTimingMissing as exc:
            raise TimingMissing(str(exc)) from None
        except ranks.RankDisagreement as exc:
            raise PointFailed(str(exc)) from None
        for record in records:
            per_rank = times[record.native_iteration_id]
            record.timing = replace(record.timing, seconds=ranks.step_seconds(per_rank),
                                    rank_seconds=per_rank)

    def _provenance(self) -> Provenance:
        ident = self.engine.identity
        # vLLM names its platform with a str; the engines that start here are cpu or cuda
        return Provenance(device=cast(Device, self.engine.device),
                          device_name=str(ident.device_name.value),
                          timer=TIMER_FOR_SOURCE[self._attached().timer.source])

    def _graph_mode(self, record) -> GraphMode:
        if record.graph_mode:
            if record.graph_mode not in GRAPH_MODES:
                raise PointFailed(f"iteration {record.native_iteration_id} ran in graph mode "
                                  f"{record.graph_mode!r}, none of {GRAPH_MODES}")
            return record.graph_mode
        engine_mode = self.engine.identity.cudagraph_mode.value
        if engine_mode == "none":
            return GRAPH_EAGER
        raise PointFailed(f"the engine runs CUDA graphs ({engine_mode}) but did not report how "
                          f"iteration {record.native_iteration_id} ran")

    def _warm(self, state: PointState, run_once) -> tuple[int, bool]:
        """Warm the point up, unbooked (the by_shape rules): (passes, settled). Its first run
        names its compiled shape; when an earlier point settled that shape, this one pass
        is its warm-up. Otherwise it runs until settled, and a settled shape is noted."""
        record = self._seeded(state, lambda: run_once(BOOKING_WARMUP))[0]
        shape = self._shape_run(state.point, record)
        if shape in self._warm_shapes:
            return WARMUP_SHAPE_PASSES, True
        times = [record.timing.seconds]
        while len(times) < WARMUP_MAX_PASSES and not settled(times):
            record = self._seeded(state, lambda: run_once(BOOKING_WARMUP))[0]
            times.append(record.timing.seconds)
        if settled(times):
            self._warm_shapes.add(shape)
        return len(times), settled(times)

    def _settled_for(self, point: DecodePoint) -> bool:
        """Whether an earlier point settled a compiled shape this one could run (in any
        graph mode; its first run says which it ran: _ran_settled)."""
        return any(compiled_shape(point, mode, self._capture_sizes) in self._warm_shapes
                   for mode in GRAPH_MODES)

    def _ran_settled(self, state: PointState, steps) -> bool:
        """A point warmed by its seed alone: its first run ran a settled shape (else that
        run is discarded, and the point warms up and runs again)."""
        return self._shape_run(state.point, steps[SETTLED_FIRST_STEP - 1]) in self._warm_shapes

    def _shape_run(self, point, record) -> tuple[str, str, int]:
        """The compiled shape the point's record ran (wire.points.compiled_shape)."""
        return compiled_shape(point, self._graph_mode(record), self._capture_sizes)

    def _seed(self, state: PointState) -> None:
        if state.phase == PHASE_PREFILL:
            self._prefill_seed(state)
        else:
            self._decode_seed(state)

    def _touch_pool(self) -> None:
        if self.pool is not None:
            with self.breakdown.section("seed pool"):
                self._run(self.pool.prompts, 1, BOOKING_UNBOOKED)

    def _seeded(self, state: PointState, run):
        """run(), repeated once after computing the point's prompts again if its admission
        missed the prefix cache (the missed run is discarded); a second miss fails."""
        try:
            return run()
        except CacheMiss:
            self.breakdown.count("reseeds")
            self._seed(state)
            return run()

    # ---- prefill ------------------------------------------------------------------------
    def _prefill_prepare(self, point: PrefillPoint) -> PointState:
        # A real prefix: computed by an unbooked prefill and kept in the prefix cache. With
        # EAGLE, vLLM drops the last matched block of a hit (the draft needs its hidden
        # states), so a hit of P tokens needs P + one block cached and shared; that block
        # is recomputed as the first of the point's new tokens.
        length = (point.cached_prefix_tokens + self.engine.block_size
                  if point.cached_prefix_tokens else 0)
        pooled = self.pool is not None and length > 0
        shared = self.pool.prefix(length) if self.pool is not None else self._fresh(length)
        state = PointState(PHASE_PREFILL, point, shared=shared, pooled=pooled)
        self._prefill_seed(state)
        return state

    def _prefill_seed(self, state: PointState) -> None:
        """(Re)compute the shared prefix, unbooked: at the warm-up, and before each round's
        measurement where it is the point's own (a pool prefix: after a miss only)."""
        if state.shared:
            with self.breakdown.section("seed prefix"):
                self._run([state.shared], 1, BOOKING_UNBOOKED)

    def _prefill_once(self, state: PointState, booking: Booking):
        point = state.point
        assert isinstance(point, PrefillPoint)
        prompts = [state.shared + self._fresh(point.new_tokens - len(state.shared) +
                                              point.cached_prefix_tokens)
                   for _ in range(point.batch_size)]
        steps, outputs = self._run(prompts, 1, booking)
        hits = tuple(int(o.num_cached_tokens or 0) for o in outputs)
        if any(h < point.cached_prefix_tokens for h in hits):
            raise CacheMiss(f"the {booking} run's cache hits {hits} fall short of the cached "
                            f"prefix {point.cached_prefix_tokens} (evicted since its seed)")
        if len(steps) != 1:
            raise PointFailed(f"single_step policy: the {booking} run took {len(steps)} steps")
        return steps[0], outputs

    def _prefill_observation(self, index: int, state: PointState, record, outputs, clock,
                             repeat: int, round_index: int) -> PrefillObservation:
        point = state.point
        assert isinstance(point, PrefillPoint)
        snapshot = record.corrected_snapshot()
        mismatch = prefill_mismatch(point, snapshot)
        if mismatch:
            raise PointFailed(f"the measured step's snapshot {mismatch}")
        hits = tuple(int(o.num_cached_tokens or 0) for o in outputs)
        if any(h != point.cached_prefix_tokens for h in hits):
            raise PointFailed(f"cache hits {hits} differ from the point's cached prefix "
                              f"{point.cached_prefix_tokens}")
        passes, stable = state.warmup
        return PrefillObservation(
            point_index=index, repeat=repeat, round=round_index, point=point,
            native_iteration_id=record.native_iteration_id, snapshot=snapshot,
            timing=record.timing, provenance=self._provenance(),
            kv_seed_regime=KV_SEED_REAL if state.shared else KV_SEED_NONE,
            cache_hit_tokens=hits, graph_mode=self._graph_mode(record), warmup_passes=passes,
            warmup_settled=stable, gpu_clock=clock)

    # ---- decode -------------------------------------------------------------------------
    @contextmanager
    def _acceptance(self, point: DecodePoint):
        """Synthetic acceptance at the point's AL for the point's runs, restored after."""
        if point.acceptance_length is None:
            yield
            return
        llm = self.engine.llm
        before = compat.synthetic_rates(llm)
        compat.set_synthetic_rates(llm, compat.conditional_rates_for(point.acceptance_length,
                                                                     point.draft_depth))
        try:
            yield
        finally:
            compat.set_synthetic_rates(llm, before)

    def _decode_prepare(self, point: DecodePoint) -> PointState:
        """The pool's prompts, and its own (seeded now) for a batch wider than the pool."""
        shared = self.pool.batch(point.batch_size, point.context_tokens) if self.pool else []
        own = [self._fresh(point.context_tokens)
               for _ in range(point.batch_size - len(shared))]
        state = PointState(PHASE_DECODE, point, pooled=not own, prompts=shared + own)
        if own:
            self._decode_seed(state)
        return state

    def _decode_seed(self, state: PointState) -> None:
        """Compute every prompt once (chunked as the budget needs), unbooked, so that the
        next run admits them all in one step from the prefix cache; again before each
        round's measurement without the pool, or when a run missed the cache."""
        with self.breakdown.section("seed decode"):
            self._run(state.prompts, 1, BOOKING_UNBOOKED)

    def _decode_once(self, state: PointState, booking: Booking):
        """One run of the point's batch: step 1 admits it from the prefix cache, step 2 is
        its first decode step (the transient), then settled steps up to the last retained
        one, where it stops (no request finished), unless the caller asked for decode_tokens
        (the run's acceptance estimated over that many tokens). (first retained, steps)"""
        point = state.point
        assert isinstance(point, DecodePoint)
        max_tokens = max(self.decode_tokens or 0, decode_max_tokens(point.draft_depth))
        last = SETTLED_FIRST_STEP + SETTLED_STEPS - 1
        steps, _ = self._run(state.prompts, max_tokens, booking,
                             stop_after=None if self.decode_tokens else last)
        hits = admission_hits(steps, len(state.prompts))
        if missed_the_cache(hits, state.prompts, self.engine.block_size):
            raise CacheMiss(f"the {booking} run's cache hits {hits} fall short of its prompts' "
                            "cached blocks (evicted since their seed)")
        if len(steps) < last:
            raise PointFailed(f"settled_steps policy: the {booking} run took only {len(steps)} "
                              f"steps, fewer than the {last} it retains up to")
        first = steps[0].snapshot
        if first.phase != PHASE_PREFILL or len(first.requests) != point.batch_size:
            raise PointFailed(f"the {booking} run's first step did not admit every request "
                              "of the point at once (the seeded prompts left the cache?)")
        return steps[SETTLED_FIRST_STEP - 1], steps

    def _decode_observations(self, index: int, state: PointState, steps, clock,
                             repeat: int, round_index: int) -> list[DecodeObservation]:
        """The work item's settled steps, SETTLED_STEPS consecutive ones, each an exact
        observation with its own snapshot (the context it really read) and native ID."""
        point = state.point
        assert isinstance(point, DecodePoint)
        run = [n for step in steps[STEADY_STEP_INDEX - 1:]
               for n in step.accepted_drafts(step.corrected_snapshot(), point.draft_depth)]
        passes, stable = state.warmup
        kept = []
        for step_index in range(SETTLED_FIRST_STEP, SETTLED_FIRST_STEP + SETTLED_STEPS):
            record = steps[step_index - 1]
            snapshot = record.corrected_snapshot()
            mismatch = decode_mismatch(point, snapshot, step_index)
            if mismatch:
                raise PointFailed(f"settled step {step_index}'s snapshot {mismatch}")
            accepted = record.accepted_drafts(snapshot)
            kept.append(DecodeObservation(
                point_index=index, repeat=repeat, round=round_index, point=point,
                native_iteration_id=record.native_iteration_id, step_index=step_index,
                snapshot=snapshot, timing=record.timing, provenance=self._provenance(),
                accepted_tokens=accepted,
                observed_acceptance_length=1.0 + statistics.fmean(accepted) if accepted else 1.0,
                run_acceptance_length=1.0 + statistics.fmean(run) if run else 1.0,
                run_acceptance_samples=len(run), graph_mode=self._graph_mode(record),
                warmup_passes=passes, warmup_settled=stable, gpu_clock=clock))
        return kept

    # ---- one point: prepare and warm up; one measured pass ------------------------------
    def _prepare(self, ref: PointRef, point) -> PointState:
        """Seed the point's prompts and warm its exact coordinate up, unbooked."""
        def work():
            if ref.phase == PHASE_PREFILL:
                state = self._prefill_prepare(point)
                state.warmup = self._warm(state, lambda b: self._prefill_once(state, b))
                return state
            with self._acceptance(point):
                state = self._decode_prepare(point)
                if self._settled_for(point):   # its seed warms it (WARMUP_SEEDED_PASSES)
                    state.warmup = (0, True)
                else:
                    state.warmup = self._warm(state, lambda b: self._decode_once(state, b))
            return state
        with self.breakdown.section("warm-up"):
            return paused_gc(work)

    def _measure(self, ref: PointRef, state: PointState, round_index: int,
                 reseed: bool) -> list[Observation]:
        """One booked pass of the point (its next sample) and the observations it retains.
        reseed: compute its own prompts again first (other points ran since; pooled ones
        only after a miss). The GPU clock is read right before and right after the run."""
        repeat = len(state.seconds)
        reseed = reseed and not state.pooled

        def measured(once):
            def run():
                before = self.clock.read()
                outcome = once(state, BOOKING_MEASURED)
                return outcome, self.clock.since(before)
            return self._seeded(state, run)

        def work():
            if reseed:
                self._seed(state)
            if ref.phase == PHASE_PREFILL:
                (record, outputs), clock = measured(self._prefill_once)
                return [self._prefill_observation(ref.point_index, state, record, outputs,
                                                  clock, repeat, round_index)]
            assert isinstance(state.point, DecodePoint)
            with self._acceptance(state.point):
                (_, steps), clock = measured(self._decode_once)
                if state.shape_unchecked and not self._ran_settled(state, steps):
                    state.warmup = self._warm(state, lambda b: self._decode_once(state, b))
                    (_, steps), clock = measured(self._decode_once)
            return self._decode_observations(ref.point_index, state, steps, clock, repeat,
                                             round_index)
        with self.breakdown.section("measure"):
            observations = paused_gc(work)
        state.seconds.append(Sample(repeat, round_index, tuple(observations)).seconds)
        return observations

    # ---- the whole collection -----------------------------------------------------------
    def collect(self, mode: str, grid: Grid) -> CollectionResult:
        phases = PHASES_BY_MODE[mode]
        grid = grid.only(phases)
        check_grid_fits(grid, self.engine, self.decode_tokens)
        result = CollectionResult(mode=mode, grid=grid, repeats=self.repeats,
                                  repeat_order=self.repeat_order,
                                  order_seed=self.order_seed if self.rounds else None,
                                  until_pinned=self.until_pinned,
                                  sampling=dict(GENERATION_SAMPLING), started_at=utc_now())
        self._result = result
        points: dict[PointRef, PrefillPoint | DecodePoint] = {
            PointRef(PHASE_PREFILL, i): p for i, p in enumerate(grid.prefill)}
        points.update({PointRef(PHASE_DECODE, i): p for i, p in enumerate(grid.decode)})
        self._started = time.perf_counter()
        self._warm_shapes.clear()
        self._capture_sizes = capture_sizes(self.engine.identity.settings.cudagraph_capture_sizes)
        self.clock = open_clock(self.engine.device)
        self.observer = NativeObserver(self.engine.llm, timer_for(self.engine.device)).attach()
        self.breakdown = result.breakdown
        try:
            self.pool = PromptPool.fitting(grid, self.engine.block_size,
                                           self.engine.kv_capacity.tokens, self._fresh)
            if self.rounds:
                self._collect_rounds(points)
            else:
                self._collect_back_to_back(points)
            self.progress(self._done, self._total, "done")
        finally:
            self.observer.detach()
            self._tick()
        return result

    @property
    def rounds(self) -> bool:
        return self.repeat_order == REPEAT_ROUNDS

    def _tick(self) -> None:
        result = self._result
        result.elapsed_seconds = time.perf_counter() - self._started
        result.timed_seconds = self.timed_seconds

    def _step(self, label: str) -> None:
        self.progress(self._done, self._total, label)
        self._done += 1

    def _fail(self, ref: PointRef, exc: Exception, round_index: int | None = None) -> None:
        """The point is skipped with the cause; what it measured before is dropped (a point
        is either every one of its samples or none)."""
        result = self._result
        where = "" if round_index is None else f"round {round_index}: "
        kept = [o for o in getattr(result, ref.phase) if o.point_index != ref.point_index]
        dropped = len(getattr(result, ref.phase)) - len(kept)
        if dropped:
            result.measured_seconds = math.fsum(o.timing.seconds for phase in PHASES
                                                for o in (kept if phase == ref.phase
                                                          else getattr(result, phase)))
        setattr(result, ref.phase, kept)
        result.skipped.append(SkippedPoint(ref.phase, ref.point_index, f"{where}{exc}"))

    def _keep(self, observations: list[Observation]) -> None:
        """A work item's observations, kept together (a point's sample is all of them)."""
        result = self._result
        for observation in observations:
            getattr(result, _phase_of(observation)).append(observation)
            result.measured_seconds += observation.timing.seconds
        self._tick()
        self.on_point(result)

    def _end_round(self, position: int) -> None:
        """The round's closing canary reading, then on_point (a checkpoint at every round's
        end: the last one holds every sample)."""
        self._result.end_round(position, self._canary())
        self.on_point(self._result)

    def _canary(self):
        with self.breakdown.section("canary"):
            return measure_canary(self.engine.device)

    def on_point(self, result: CollectionResult) -> None:
        with self.breakdown.section("checkpoint"):
            self._on_point(result)

    def _touching(self, order):
        """The pass's points in order, the pool touched before its first decode point (a
        pass runs its prefill points first: their fresh prompts evict the pool's blocks)."""
        touched = False
        for ref in order:
            if ref.phase == PHASE_DECODE and not touched:
                self._touch_pool()
                touched = True
            yield ref

    def _collect_back_to_back(self, points: dict) -> None:
        """Each point warmed up, then its repeats one after the other: one round, in grid
        order, bracketed by the canary."""
        self._total = len(points) * (1 + self.repeats)
        order = tuple(sorted(points))
        current = self._result.begin_round(0, order, self._canary())
        for ref in self._touching(order):
            label = f"{ref.phase}[{ref.point_index}] {point_label(points[ref])}"
            self._step(f"warm-up {label}")
            try:
                state = self._prepare(ref, points[ref])
                for repeat in range(self.repeats):
                    self._step(f"repeat {repeat + 1}/{self.repeats} {label}")
                    self._keep(self._measure(ref, state, 0, reseed=False))
            except (PointFailed, TimingMissing) as exc:
                self._fail(ref, exc)
                self._tick()
                self.on_point(self._result)
        self._end_round(current)

    def _collect_rounds(self, points: dict) -> None:
        """Every point warmed up (grid order), then rounds: each round measures its points
        once in its seeded order, bracketed by the canary; a point takes part while
        wire.rounds.needs_another_round says so (the fixed rounds, then until pinned)."""
        fixed, until = self.repeats, self.until_pinned
        self._total = len(points) * (1 + fixed)
        states: dict[PointRef, PointState] = {}
        for ref in self._touching(sorted(points)):
            self._step(f"warm-up {ref.phase}[{ref.point_index}] {point_label(points[ref])}")
            try:
                states[ref] = self._prepare(ref, points[ref])
            except (PointFailed, TimingMissing) as exc:
                self._fail(ref, exc)
        self._tick()
        self.on_point(self._result)
        index = 0
        while True:
            members = [ref for ref, state in states.items()
                       if needs_another_round(state.seconds, fixed, until)]
            if not members:
                break
            order = round_order(members, self.order_seed, index)
            if index >= fixed:
                self._total += len(order)
            current = self._result.begin_round(index, order, self._canary())
            for ref in self._touching(order):
                self._step(f"round {index + 1}{'' if until else f'/{fixed}'} "
                           f"{ref.phase}[{ref.point_index}] {point_label(points[ref])}")
                try:
                    self._keep(self._measure(ref, states[ref], index, reseed=True))
                except (PointFailed, TimingMissing) as exc:
                    self._fail(ref, exc, index)
                    del states[ref]
                    self._tick()
                    self.on_point(self._result)
            self._end_round(current)
            index += 1


def _phase_of(observation) -> str:
    return PHASE_PREFILL if isinstance(observation, PrefillObservation) else PHASE_DECODE
