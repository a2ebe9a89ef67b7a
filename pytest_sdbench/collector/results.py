"""What a collection retains: one observation per measured point (native ID, snapshot,
timing, provenance), and the points it could not measure, with why."""

from __future__ import annotations

from dataclasses import dataclass

from ..observer.records import Provenance, Snapshot, TimingSample
from ..points import DecodePoint, PrefillPoint


@dataclass(frozen=True)
class PrefillObservation:
    """The single retained step of a prefill point."""
    point_index: int
    point: PrefillPoint
    native_iteration_id: int
    snapshot: Snapshot
    timing: TimingSample
    provenance: Provenance
    kv_seed_regime: str
    cache_hit_tokens: tuple[int, ...]
    graph_mode: str


@dataclass(frozen=True)
class DecodeObservation:
    """The steady step of a decode point."""
    point_index: int
    point: DecodePoint
    native_iteration_id: int
    step_index: int
    snapshot: Snapshot
    timing: TimingSample
    provenance: Provenance
    accepted_tokens: tuple[int, ...]
    observed_acceptance_length: float
    run_acceptance_length: float      # 1 + mean accepted over every decode step of the run
    run_acceptance_samples: int       # request-steps behind run_acceptance_length
    graph_mode: str


@dataclass(frozen=True)
class SkippedPoint:
    """A point of the grid with no retained observation, and why."""
    phase: str
    point_index: int
    reason: str
