"""The mixed phase: a point is a decode batch (B_d requests at a context, K drafts each) and
B_p prefills admitted beside it in one engine step (mixed_step). Its run is a decode point's
run with the prefills added once its transient first decode step is scheduled: the
scheduler admits them in the next step, run step MIXED_STEP_INDEX, beside the running
decodes (under sync and async scheduling alike: the trigger counts scheduled steps, never
outputs). That step, found by the prefill requests it schedules (never by position), is
retained when its snapshot is exactly the point; the run is then aborted and the engine
drained to idle."""

from __future__ import annotations

from ..wire.contract import (
    BOOKING_UNBOOKED,
    KV_SEED_NONE,
    KV_SEED_REAL,
    MIXED_STEP_INDEX,
    PHASE_MIXED,
    Booking,
    Phase,
)
from ..wire.model import MixedObservation
from ..wire.points import MixedPoint, mixed_run_tokens
from ..wire.shape import mixed_mismatch
from .decode import synthetic_acceptance
from .phase import Outcome
from .prompt_pool import admitted_kv, missed_the_cache
from .result import CacheMiss, PointFailed, PointState
from .runs import EngineRuns


class MixedRunner:
    phase: Phase = PHASE_MIXED
    warmed_by_seed = False   # its prefills are a new computation each run: it takes a pass

    def __init__(self, runs: EngineRuns, decode_tokens: int | None):
        self.runs = runs
        self.decode_tokens = decode_tokens

    def conditions(self, point: MixedPoint):
        return synthetic_acceptance(self.runs.engine.llm, point.acceptance_length,
                                    point.draft_depth)

    def prepare(self, point: MixedPoint) -> PointState:
        """The decode batch's prompts (the pool's, and its own for a batch wider than the
        pool) and the prefills' cached prefix (its own: P + one block, as a prefill
        point's), seeded now where they are its own."""
        runs = self.runs
        shared_batch = (runs.pool.batch(point.decode_batch_size, point.context_tokens)
                        if runs.pool else [])
        own = [runs.fresh(point.context_tokens)
               for _ in range(point.decode_batch_size - len(shared_batch))]
        prefix = (runs.fresh(point.cached_prefix_tokens + runs.engine.block_size)
                  if point.cached_prefix_tokens else [])
        state = PointState(PHASE_MIXED, point, shared=prefix, prompts=shared_batch + own,
                           pooled=not own and not prefix)
        if own or prefix:
            self.seed(state)
        return state

    def seed(self, state: PointState) -> None:
        """Compute the batch's own prompts and the prefix into the prefix cache, unbooked
        (a miss of the pool's prompts re-seeds them all)."""
        prompts = [*state.prompts, *([state.shared] if state.shared else [])]
        with self.runs.breakdown.section("seed mixed"):
            self.runs.run(prompts, 1, BOOKING_UNBOOKED)

    def once(self, state: PointState, booking: Booking) -> Outcome:
        point = state.point
        assert isinstance(point, MixedPoint)
        runs = self.runs
        fresh_length = point.prefill_tokens + point.cached_prefix_tokens - len(state.shared)
        prefills = [state.shared + runs.fresh(fresh_length)
                    for _ in range(point.prefill_batch_size)]
        max_tokens = max(self.decode_tokens or 0, mixed_run_tokens(point))
        steps, decode_ids, prefill_ids = runs.run_admitting(
            state.prompts, max_tokens, prefills, booking, MIXED_STEP_INDEX)
        return Outcome(_mixed_step(point, steps, decode_ids, prefill_ids, booking,
                                   runs.engine.block_size, state.prompts), steps)

    def observations(self, index: int, state: PointState, outcome: Outcome, clock,
                     repeat: int, round_index: int) -> list[MixedObservation]:
        point = state.point
        assert isinstance(point, MixedPoint)
        record, runs = outcome.record, self.runs
        snapshot = record.corrected_snapshot()
        mismatch = mixed_mismatch(point, snapshot, MIXED_STEP_INDEX)
        if mismatch:
            raise PointFailed(f"the mixed step's snapshot {mismatch}")
        hits = tuple(r.kv_tokens for r in snapshot.requests if r.in_prefill)
        passes, stable = state.warmup
        return [MixedObservation(
            point_index=index, repeat=repeat, round=round_index, point=point,
            native_iteration_id=record.native_iteration_id, step_index=MIXED_STEP_INDEX,
            snapshot=snapshot, timing=record.timing, provenance=runs.provenance(),
            accepted_tokens=record.accepted_drafts(snapshot),
            kv_seed_regime=KV_SEED_REAL if state.shared else KV_SEED_NONE,
            cache_hit_tokens=hits, graph_mode=runs.graph_mode(record),
            warmup_passes=passes, warmup_settled=stable, gpu_clock=clock)]


def _mixed_step(point: MixedPoint, steps, decode_ids, prefill_ids, booking: Booking,
                block_size: int, prompts):
    """The run's mixed step: its decode batch admitted from the prefix cache (else
    CacheMiss: a prompt evicted since its seed is prefilled again, and a batch of long ones
    no longer fits one step; checked first, as decode.py does, so that it is re-seeded) and
    in one step, the prefills admitted in the planned run step MIXED_STEP_INDEX and
    prefilled whole there, their prefix a cache hit (else CacheMiss). PointFailed names what
    differs."""
    admitted = admitted_kv(steps)
    # the requests scheduled at all (one never scheduled waited: no cache reading of its own)
    scheduled = [(admitted[i], p) for i, p in zip(decode_ids, prompts, strict=True)
                 if i in admitted]
    hits = [h for h, _ in scheduled]
    if missed_the_cache(hits, [p for _, p in scheduled], block_size):
        raise CacheMiss(f"the {booking} run's decode batch was admitted with cache hits {hits}, "
                        "short of its prompts' cached blocks (evicted since their seed)")
    if not steps or not set(decode_ids) <= {r.request_id for r in steps[0].snapshot.requests}:
        raise PointFailed(f"the {booking} run's first step did not admit every request of the "
                          "decode batch at once, though each it scheduled was a full cache hit "
                          "(the step's token budget, the KV cache or max_num_seqs)")
    wanted = set(prefill_ids)
    holding = [(i, r) for i, r in enumerate(steps, start=1)
               if wanted & {q.request_id for q in r.snapshot.requests}]
    if not holding:
        raise PointFailed(f"no step of the {booking} run admitted the point's prefills (they "
                          "waited: the budget, the KV cache or max_num_seqs)")
    index, record = holding[0]
    if index != MIXED_STEP_INDEX:
        raise PointFailed(f"the {booking} run admitted the prefills in run step {index}, not "
                          f"the planned step {MIXED_STEP_INDEX}")
    short = [q.kv_tokens for q in record.snapshot.requests
             if q.request_id in wanted and q.kv_tokens < point.cached_prefix_tokens]
    if short:
        raise CacheMiss(f"the {booking} run's prefills were admitted with cache hits {short}, "
                        f"short of the cached prefix {point.cached_prefix_tokens}")
    chunks = [i for i, r in holding[1:]
              if any(q.request_id in wanted and q.in_prefill for q in r.snapshot.requests)]
    if chunks:
        raise PointFailed(f"the {booking} run's prefills were still prefilling in run steps "
                          f"{chunks} (chunked: not one step)")
    return record
