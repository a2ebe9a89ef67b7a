"""Collection: for each point, warm the exact coordinate up unbooked until its step time
is stable, then run it `repeats` times booked and retain, from each run, the one step the
phase's measurement policy names. agg runs every prefill point, then every decode point,
so no measured batch mixes the two phases.

Decode points are seeded first: an unbooked run computes the point's prompts (chunked over
as many steps as the engine's token budget needs), so that every later run of the same
prompts is admitted in one step from the prefix cache and reaches the steady step with
exactly the point's context. A point is thus limited by the KV capacity and max_num_seqs,
not by one step's budget.

The observer is attached for the collection and detached afterwards, whatever happens.
Python's garbage collector is paused while a point runs (collected between points), so
that its pauses do not land inside measured steps.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from ..engine import compat, ranks
from ..observer import NativeObserver, Provenance, TimingMissing, timer_for
from ..points import DecodePoint, Grid, GridError, PrefillPoint
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
    PHASES_BY_MODE,
    STEADY_STEP_INDEX,
    TIMER_FOR_SOURCE,
    WARMUP_MAX_PASSES,
    WARMUP_MIN_PASSES,
    WARMUP_TOLERANCE,
    Booking,
    GraphMode,
)
from ..wire.model import DecodeObservation, PrefillObservation, SkippedPoint, utc_now
from ..wire.points import decode_max_tokens, fit_errors
from ..wire.shape import decode_mismatch, prefill_mismatch


@dataclass
class CollectionResult:
    mode: str
    grid: Grid
    repeats: int = 1
    prefill: list[PrefillObservation] = field(default_factory=list)
    decode: list[DecodeObservation] = field(default_factory=list)
    skipped: list[SkippedPoint] = field(default_factory=list)
    sampling: dict = field(default_factory=dict)
    started_at: str = ""
    elapsed_seconds: float = 0.0
    measured_seconds: float = 0.0      # retained steps
    timed_seconds: float = 0.0         # every timed step: seeds, warm-ups, measured runs

    @property
    def completed(self) -> int:
        """Points with all their repeats retained."""
        return len({o.point_index for o in self.prefill}) + \
            len({o.point_index for o in self.decode})


class PointFailed(RuntimeError):
    """A point whose retained step could not be identified exactly."""


def sampling_params(max_tokens: int):
    """The run's generation sampling parameters; every request of a collection uses them."""
    from vllm import SamplingParams
    return SamplingParams(max_tokens=max_tokens, **GENERATION_SAMPLING)


def check_grid_fits(grid: Grid, engine, decode_tokens: int | None = None) -> None:
    """Reject, before anything runs, points this engine cannot run exactly: the fit rules of
    the wire format (the validator re-applies them on read), and a decode point's K and
    requested AL must be the engine's."""
    errors = fit_errors(grid, engine.limits, decode_tokens)
    synthetic = engine.spec.synthetic_acceptance_length is not None
    for i, d in enumerate(grid.decode):
        where = f"decode[{i}]"
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


class Collector:
    def __init__(self, engine, progress=None, decode_tokens: int | None = None,
                 repeats: int = 1,
                 on_point: Callable[[CollectionResult], None] | None = None):
        if repeats < 1:
            raise ValueError(f"repeats: must be >= 1, got {repeats}")
        self.engine = engine
        self.decode_tokens = decode_tokens  # output tokens of a decode run (default: enough)
        self.repeats = repeats
        self.progress = progress or (lambda done, total, label: None)
        self.on_point = on_point or (lambda result: None)  # after every point (checkpoints)
        self.observer: NativeObserver | None = None
        self.timed_seconds = 0.0

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

    def _run(self, prompts, max_tokens: int, booking: Booking):
        missing, outputs = None, None
        try:
            with self._attached().window(booking) as window:
                outputs = self.engine.generate(prompts, sampling_params(max_tokens))
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
        return Provenance(device=self.engine.device, device_name=str(ident.device_name.value),
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

    def _passes(self, run_once):
        """Warm up until settled, then the booked repeats. run_once(booking) -> (record, ...)
        with the pass's retained step first."""
        times: list[float] = []
        while len(times) < WARMUP_MAX_PASSES and not settled(times):
            times.append(run_once(BOOKING_WARMUP)[0].timing.seconds)
        warmup = (len(times), settled(times))
        return [run_once(BOOKING_MEASURED) for _ in range(self.repeats)], warmup

    def prefill_point(self, index: int, point: PrefillPoint) -> list[PrefillObservation]:
        # A real prefix: computed by an unbooked prefill and kept in the prefix cache. With
        # EAGLE, vLLM drops the last matched block of a hit (the draft needs its hidden
        # states), so a hit of P tokens needs P + one block cached and shared; that block
        # is recomputed as the first of the point's new tokens.
        shared = self._fresh(point.cached_prefix_tokens + self.engine.block_size
                             if point.cached_prefix_tokens else 0)
        if shared:
            self._run([shared], 1, BOOKING_UNBOOKED)

        def run_once(booking):
            prompts = [shared + self._fresh(point.new_tokens - len(shared) +
                                            point.cached_prefix_tokens)
                       for _ in range(point.batch_size)]
            steps, outputs = self._run(prompts, 1, booking)
            if len(steps) != 1:
                raise PointFailed(f"single_step policy: the {booking} run took {len(steps)} "
                                  "steps")
            return steps[0], outputs

        passes, (warmups, stable) = self._passes(run_once)
        observations = []
        for repeat, (record, outputs) in enumerate(passes):
            snapshot = record.corrected_snapshot()
            mismatch = prefill_mismatch(point, snapshot)
            if mismatch:
                raise PointFailed(f"the measured step's snapshot {mismatch}")
            hits = tuple(int(o.num_cached_tokens or 0) for o in outputs)
            if any(h != point.cached_prefix_tokens for h in hits):
                raise PointFailed(f"cache hits {hits} differ from the point's cached prefix "
                                  f"{point.cached_prefix_tokens}")
            observations.append(PrefillObservation(
                point_index=index, repeat=repeat, point=point,
                native_iteration_id=record.native_iteration_id, snapshot=snapshot,
                timing=record.timing, provenance=self._provenance(),
                kv_seed_regime=KV_SEED_REAL if shared else KV_SEED_NONE, cache_hit_tokens=hits,
                graph_mode=self._graph_mode(record), warmup_passes=warmups,
                warmup_settled=stable))
        return observations

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

    def decode_point(self, index: int, point: DecodePoint) -> list[DecodeObservation]:
        max_tokens = max(self.decode_tokens or 0, decode_max_tokens(point.draft_depth))
        prompts = [self._fresh(point.context_tokens) for _ in range(point.batch_size)]

        def run_once(booking):
            steps, _ = self._run(prompts, max_tokens, booking)
            if len(steps) < STEADY_STEP_INDEX:
                raise PointFailed(f"steady_step policy: the {booking} run took only "
                                  f"{len(steps)} steps")
            first = steps[0].snapshot
            if first.phase != PHASE_PREFILL or len(first.requests) != point.batch_size:
                raise PointFailed(f"the {booking} run's first step did not admit every request "
                                  "of the point at once (the seeded prompts left the cache?)")
            return steps[STEADY_STEP_INDEX - 1], steps

        with self._acceptance(point):
            # Seed: compute every prompt once (chunked as the budget needs), unbooked.
            self._run(prompts, 1, BOOKING_UNBOOKED)
            passes, (warmups, stable) = self._passes(run_once)
        observations = []
        for repeat, (record, steps) in enumerate(passes):
            snapshot = record.corrected_snapshot()
            mismatch = decode_mismatch(point, snapshot)
            if mismatch:
                raise PointFailed(f"the steady step's snapshot {mismatch}")
            accepted = _accepted(record, snapshot)
            observed = 1.0 + statistics.fmean(accepted) if accepted else 1.0
            run = [n for step in steps[STEADY_STEP_INDEX - 1:]
                   for n in _accepted(step, step.corrected_snapshot(), point.draft_depth)]
            observations.append(DecodeObservation(
                point_index=index, repeat=repeat, point=point,
                native_iteration_id=record.native_iteration_id, step_index=STEADY_STEP_INDEX,
                snapshot=snapshot, timing=record.timing, provenance=self._provenance(),
                accepted_tokens=accepted, observed_acceptance_length=observed,
                run_acceptance_length=1.0 + statistics.fmean(run) if run else 1.0,
                run_acceptance_samples=len(run), graph_mode=self._graph_mode(record),
                warmup_passes=warmups, warmup_settled=stable))
        return observations

    def _point(self, run, index, point):
        """One point with the garbage collector paused (collected first)."""
        gc.collect()
        gc.disable()
        try:
            return run(index, point)
        finally:
            gc.enable()

    # ---- the whole collection -----------------------------------------------------------
    def collect(self, mode: str, grid: Grid) -> CollectionResult:
        phases = PHASES_BY_MODE[mode]
        grid = grid.only(phases)
        check_grid_fits(grid, self.engine, self.decode_tokens)
        result = CollectionResult(mode=mode, grid=grid, repeats=self.repeats,
                                  sampling=dict(GENERATION_SAMPLING), started_at=utc_now())
        work = [(PHASE_PREFILL, i, p) for i, p in enumerate(grid.prefill)] + \
               [(PHASE_DECODE, i, p) for i, p in enumerate(grid.decode)]
        started = time.perf_counter()
        self.observer = NativeObserver(self.engine.llm, timer_for(self.engine.device)).attach()
        try:
            for done, (phase, index, point) in enumerate(work):
                self.progress(done, len(work), f"{phase}[{index}] {_label(point)}")
                run = self.prefill_point if phase == PHASE_PREFILL else self.decode_point
                try:
                    observations = self._point(run, index, point)
                except (PointFailed, TimingMissing) as exc:
                    result.skipped.append(SkippedPoint(phase, index, str(exc)))
                else:
                    getattr(result, phase).extend(observations)
                    result.measured_seconds += sum(o.timing.seconds for o in observations)
                result.elapsed_seconds = time.perf_counter() - started
                result.timed_seconds = self.timed_seconds
                self.on_point(result)
            self.progress(len(work), len(work), "done")
        finally:
            self.observer.detach()
            result.elapsed_seconds = time.perf_counter() - started
            result.timed_seconds = self.timed_seconds
        return result


def _accepted(record, snapshot, full_depth: int | None = None) -> tuple[int, ...]:
    """Draft tokens each drafting request of a step had accepted, from the step's output.
    A step whose output the window never saw (under async scheduling, one scheduled for
    requests that then finished) contributes nothing; with full_depth, only requests that
    verified that many drafts count (the last steps of a run may verify fewer)."""
    if record.accepted is None:
        return ()
    return tuple(record.accepted[r.request_id] - 1 for r in snapshot.requests
                 if r.draft_tokens and r.request_id in record.accepted
                 and (full_depth is None or r.draft_tokens == full_depth))


def _label(point) -> str:
    if isinstance(point, PrefillPoint):
        return (f"B={point.batch_size} new={point.new_tokens} "
                f"prefix={point.cached_prefix_tokens}")
    al = "natural" if point.acceptance_length is None else point.acceptance_length
    return f"B={point.batch_size} ctx={point.context_tokens} K={point.draft_depth} AL={al}"
