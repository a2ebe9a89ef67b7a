"""The prefill phase: a point is B requests of new tokens after a cached prefix, retained as
exactly one step (single_step) whose shape equals the point."""

from __future__ import annotations

from contextlib import nullcontext

from ..wire.contract import (
    BOOKING_UNBOOKED,
    KV_SEED_NONE,
    KV_SEED_REAL,
    PHASE_PREFILL,
    Booking,
    Phase,
)
from ..wire.model import PrefillObservation
from ..wire.points import PrefillPoint
from ..wire.shape import prefill_mismatch
from .phase import Outcome
from .result import CacheMiss, PointFailed, PointState
from .runs import EngineRuns


class PrefillRunner:
    phase: Phase = PHASE_PREFILL
    warmed_by_seed = False

    def __init__(self, runs: EngineRuns):
        self.runs = runs

    def conditions(self, point: PrefillPoint):
        return nullcontext()

    def prepare(self, point: PrefillPoint) -> PointState:
        # A real prefix: computed by an unbooked prefill and kept in the prefix cache. With
        # EAGLE, vLLM drops the last matched block of a hit (the draft needs its hidden
        # states), so a hit of P tokens needs P + one block cached and shared; that block
        # is recomputed as the first of the point's new tokens.
        runs = self.runs
        length = (point.cached_prefix_tokens + runs.engine.block_size
                  if point.cached_prefix_tokens else 0)
        pooled = runs.pool is not None and length > 0
        shared = runs.pool.prefix(length) if runs.pool is not None else runs.fresh(length)
        state = PointState(PHASE_PREFILL, point, shared=shared, pooled=pooled)
        self.seed(state)
        return state

    def seed(self, state: PointState) -> None:
        """(Re)compute the shared prefix, unbooked: at the warm-up, and before each round's
        measurement where it is the point's own (a pool prefix: after a miss only)."""
        if state.shared:
            with self.runs.breakdown.section("seed prefix"):
                self.runs.run([state.shared], 1, BOOKING_UNBOOKED)

    def once(self, state: PointState, booking: Booking) -> Outcome:
        point = state.point
        assert isinstance(point, PrefillPoint)
        runs = self.runs
        prompts = [state.shared + runs.fresh(point.new_tokens - len(state.shared) +
                                             point.cached_prefix_tokens)
                   for _ in range(point.batch_size)]
        steps, outputs = runs.run(prompts, 1, booking)
        hits = tuple(int(o.num_cached_tokens or 0) for o in outputs)
        if any(h < point.cached_prefix_tokens for h in hits):
            raise CacheMiss(f"the {booking} run's cache hits {hits} fall short of the cached "
                            f"prefix {point.cached_prefix_tokens} (evicted since its seed)")
        if len(steps) != 1:
            raise PointFailed(f"single_step policy: the {booking} run took {len(steps)} steps")
        return Outcome(steps[0], steps, outputs)

    def observations(self, index: int, state: PointState, outcome: Outcome, clock,
                     repeat: int, round_index: int) -> list[PrefillObservation]:
        point = state.point
        assert isinstance(point, PrefillPoint)
        record = outcome.record
        snapshot = record.corrected_snapshot()
        mismatch = prefill_mismatch(point, snapshot)
        if mismatch:
            raise PointFailed(f"the measured step's snapshot {mismatch}")
        hits = tuple(int(o.num_cached_tokens or 0) for o in outcome.outputs)
        if any(h != point.cached_prefix_tokens for h in hits):
            raise PointFailed(f"cache hits {hits} differ from the point's cached prefix "
                              f"{point.cached_prefix_tokens}")
        passes, stable = state.warmup
        return [PrefillObservation(
            point_index=index, repeat=repeat, round=round_index, point=point,
            native_iteration_id=record.native_iteration_id, snapshot=snapshot,
            timing=record.timing, provenance=self.runs.provenance(),
            kv_seed_regime=KV_SEED_REAL if state.shared else KV_SEED_NONE,
            cache_hit_tokens=hits, graph_mode=self.runs.graph_mode(record),
            warmup_passes=passes, warmup_settled=stable, gpu_clock=clock)]
