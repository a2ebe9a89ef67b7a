"""The decode phase: a point is B requests decoding at a context with K drafts each. Its
prompts are seeded into the prefix cache, so that a run admits them in one step; the run's
step 2 is the first decode step (a transient), and SETTLED_STEPS settled steps from
SETTLED_FIRST_STEP on are retained (settled_steps), each an exact observation."""

from __future__ import annotations

import statistics
from contextlib import contextmanager

from ..engine import compat
from ..wire.contract import (
    BOOKING_UNBOOKED,
    PHASE_DECODE,
    PHASE_PREFILL,
    SETTLED_FIRST_STEP,
    SETTLED_STEPS,
    STEADY_STEP_INDEX,
    Booking,
    Phase,
)
from ..wire.model import DecodeObservation
from ..wire.points import DecodePoint, decode_max_tokens
from ..wire.shape import decode_mismatch
from .phase import Outcome
from .prompt_pool import admission_hits, missed_the_cache
from .result import CacheMiss, PointFailed, PointState
from .runs import EngineRuns


@contextmanager
def synthetic_acceptance(llm, acceptance_length: float | None, draft_depth: int):
    """Synthetic acceptance at the point's AL for the point's runs, restored after."""
    if acceptance_length is None:
        yield
        return
    before = compat.synthetic_rates(llm)
    compat.set_synthetic_rates(llm, compat.conditional_rates_for(acceptance_length,
                                                                 draft_depth))
    try:
        yield
    finally:
        compat.set_synthetic_rates(llm, before)


class DecodeRunner:
    phase: Phase = PHASE_DECODE
    warmed_by_seed = True

    def __init__(self, runs: EngineRuns, decode_tokens: int | None):
        self.runs = runs
        self.decode_tokens = decode_tokens  # output tokens of a run (default: enough)

    def conditions(self, point: DecodePoint):
        return synthetic_acceptance(self.runs.engine.llm, point.acceptance_length,
                                    point.draft_depth)

    def prepare(self, point: DecodePoint) -> PointState:
        """The pool's prompts, and its own (seeded now) for a batch wider than the pool."""
        runs = self.runs
        shared = runs.pool.batch(point.batch_size, point.context_tokens) if runs.pool else []
        own = [runs.fresh(point.context_tokens) for _ in range(point.batch_size - len(shared))]
        state = PointState(PHASE_DECODE, point, pooled=not own, prompts=shared + own)
        if own:
            self.seed(state)
        return state

    def seed(self, state: PointState) -> None:
        """Compute every prompt once (chunked as the budget needs), unbooked, so that the
        next run admits them all in one step from the prefix cache; again before each
        round's measurement without the pool, or when a run missed the cache."""
        with self.runs.breakdown.section("seed decode"):
            self.runs.run(state.prompts, 1, BOOKING_UNBOOKED)

    def once(self, state: PointState, booking: Booking) -> Outcome:
        """One run of the point's batch: step 1 admits it from the prefix cache, step 2 is
        its first decode step (the transient), then settled steps up to the last retained
        one, where it stops (no request finished), unless the caller asked for decode_tokens
        (the run's acceptance estimated over that many tokens)."""
        point = state.point
        assert isinstance(point, DecodePoint)
        runs = self.runs
        max_tokens = max(self.decode_tokens or 0, decode_max_tokens(point.draft_depth))
        last = SETTLED_FIRST_STEP + SETTLED_STEPS - 1
        steps, _ = runs.run(state.prompts, max_tokens, booking,
                            stop_after=None if self.decode_tokens else last)
        hits = admission_hits(steps, len(state.prompts))
        if missed_the_cache(hits, state.prompts, runs.engine.block_size):
            raise CacheMiss(f"the {booking} run's cache hits {hits} fall short of its prompts' "
                            "cached blocks (evicted since their seed)")
        if len(steps) < last:
            raise PointFailed(f"settled_steps policy: the {booking} run took only {len(steps)} "
                              f"steps, fewer than the {last} it retains up to")
        first = steps[0].snapshot
        if first.phase != PHASE_PREFILL or len(first.requests) != point.batch_size:
            raise PointFailed(f"the {booking} run's first step did not admit every request "
                              "of the point at once, though each was a full cache hit (the "
                              "step's token budget or max_num_seqs)")
        return Outcome(steps[SETTLED_FIRST_STEP - 1], steps)

    def observations(self, index: int, state: PointState, outcome: Outcome, clock,
                     repeat: int, round_index: int) -> list[DecodeObservation]:
        """The work item's settled steps, SETTLED_STEPS consecutive ones, each an exact
        observation with its own snapshot (the context it really read) and native ID."""
        point = state.point
        assert isinstance(point, DecodePoint)
        steps, runs = outcome.steps, self.runs
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
                snapshot=snapshot, timing=record.timing, provenance=runs.provenance(),
                accepted_tokens=accepted,
                observed_acceptance_length=1.0 + statistics.fmean(accepted) if accepted else 1.0,
                run_acceptance_length=1.0 + statistics.fmean(run) if run else 1.0,
                run_acceptance_samples=len(run), graph_mode=runs.graph_mode(record),
                warmup_passes=passes, warmup_settled=stable, gpu_clock=clock))
        return kept
