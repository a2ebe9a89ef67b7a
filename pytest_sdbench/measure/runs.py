"""The engine's runs under the observer, shared by every phase runner: fresh prompts, one
run inside an observer window (its steps and outputs), the provenance and graph mode of a
retained record, the prompt pool, and where the wall time goes."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from ..engine import ranks
from ..engine.surface import InProcessEngine
from ..wire.contract import (
    BOOKING_UNBOOKED,
    GENERATION_SAMPLING,
    GRAPH_EAGER,
    GRAPH_MODES,
    PHASE_IDLE,
    TIMER_FOR_SOURCE,
    Booking,
    Device,
    GraphMode,
)
from ..wire.records import Provenance
from .observer import NativeObserver, TimingMissing
from .prompt_pool import PromptPool, TimeBreakdown
from .result import CacheMiss, PointFailed, PointState


def sampling_params(max_tokens: int):
    """The run's generation sampling parameters; every request of a collection uses them."""
    from vllm import SamplingParams
    return SamplingParams(max_tokens=max_tokens, **GENERATION_SAMPLING)


class EngineRuns:
    """One collection's runs on one engine, with the observer attached."""

    def __init__(self, engine: InProcessEngine, observer: NativeObserver,
                 breakdown: TimeBreakdown, pool: PromptPool | None):
        self.engine, self.observer, self.breakdown = engine, observer, breakdown
        self.pool = pool                 # None: the pool does not fit the cache
        self.timed_seconds = 0.0         # every timed step: seeds, warm-ups, measured runs

    def fresh(self, n: int) -> list[int]:
        """Tokens no earlier prompt on this engine shares (the stream lives on the engine, so
        a second collection does not replay the first one's prompts), so that the only
        cache hits are the ones we seed."""
        return self.engine.fresh_tokens(n)

    def run(self, prompts, max_tokens: int, booking: Booking, stop_after: int | None = None):
        """(the window's steps, the outputs); stop_after: stop the run after that many steps."""
        missing, outputs, observer = None, None, self.observer
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

    def run_admitting(self, prompts, max_tokens: int, later, booking: Booking,
                      admit_at: int):
        """A run of `prompts` into which `later` (one output token each) is added once the
        window has scheduled admit_at - 1 steps, so that the scheduler admits it in run step
        admit_at; stopped once the output of the step that scheduled `later` has come
        (its time and accepted drafts), the rest aborted, the engine drained to idle.
        (the window's steps, the ids of `prompts`, the ids of `later`)"""
        observer, missing = self.observer, None
        ids: tuple[list[str], list[str]] = ([], [])
        try:
            with observer.window(booking) as window, \
                    self.breakdown.section(f"run {booking}"):
                ids = self.engine.generate_admitting(
                    prompts, sampling_params(max_tokens), later, sampling_params(1),
                    admit=lambda: observer.steps_scheduled() >= admit_at - 1,
                    done=observer.output_seen)
        except TimingMissing as exc:
            if ranks.world_size() == 1:
                raise
            missing = str(exc)
        self._agree(window.records, [*prompts, *later], missing)
        steps = [r for r in window.records if r.snapshot.phase != PHASE_IDLE]
        self.timed_seconds += sum(r.timing.seconds for r in window.records)
        return steps, ids[0], ids[1]

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

    def provenance(self) -> Provenance:
        ident = self.engine.identity
        # vLLM names its platform with a str; the engines that start here are cpu or cuda
        return Provenance(device=cast(Device, self.engine.device),
                          device_name=str(ident.device_name.value),
                          timer=TIMER_FOR_SOURCE[self.observer.timer.source])

    def graph_mode(self, record) -> GraphMode:
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

    def touch_pool(self) -> None:
        """One unbooked run of the whole pool: its blocks become the cache's newest."""
        if self.pool is not None:
            with self.breakdown.section("seed pool"):
                self.run(self.pool.prompts, 1, BOOKING_UNBOOKED)

    def seeded(self, state: PointState, seed, run):
        """run(), repeated once after computing the point's prompts again (seed(state)) if
        its admission missed the prefix cache (the missed run is discarded); a second miss
        fails."""
        try:
            return run()
        except CacheMiss:
            self.breakdown.count("reseeds")
            seed(state)
            return run()
