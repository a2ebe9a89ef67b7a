"""The artifact: the published, versioned contract that simulators import. These frozen
dataclasses (with those of records, points and identity beside them) are the one home of
its field names and types; schema.json is generated from them
(``python -m pytest_sdbench.artifact.schema``) and a test keeps the two equal.

Times are in seconds (fields end in ``seconds``); token counts are integers.
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .contract import (
    AcceptanceControl,
    Device,
    GraphMode,
    KVSeedRegime,
    Mode,
    Phase,
    Policy,
    SpecMethod,
    Status,
    StepTimeRule,
    TimeUnit,
    WarmupRule,
)
from .identity import ExecutionIdentity, KVCapacity
from .points import DecodePoint, Grid, PrefillPoint
from .records import Provenance, Snapshot, TimingSample


@dataclass(frozen=True)
class PrefillObservation:
    """One retained step of a prefill point (one per repeat)."""
    point_index: int
    repeat: int                   # 0 .. measurement_policy.repeats - 1
    point: PrefillPoint
    native_iteration_id: int
    snapshot: Snapshot
    timing: TimingSample
    provenance: Provenance
    kv_seed_regime: KVSeedRegime | Literal["unverified"]   # unverified: legacy v1/v2 only
    cache_hit_tokens: tuple[int, ...]
    graph_mode: GraphMode
    warmup_passes: int            # unbooked passes of the exact coordinate before this one
    warmup_settled: bool          # the warm-up rule was met (else it ran out of passes)


@dataclass(frozen=True)
class DecodeObservation:
    """The steady step of a decode point (one per repeat)."""
    point_index: int
    repeat: int
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
    graph_mode: GraphMode
    warmup_passes: int
    warmup_settled: bool


@dataclass(frozen=True)
class SkippedPoint:
    """A point of the grid with no retained observation, and why."""
    phase: Phase
    point_index: int
    reason: str


@dataclass(frozen=True)
class PointSummary:
    """The retained steps of one point, summarised: recomputable from its observations."""
    phase: Phase
    point_index: int
    samples: int
    median_seconds: float
    mean_seconds: float
    min_seconds: float
    max_seconds: float
    cv: float    # sample standard deviation / mean; 0 for a single sample


def summarize(phase: Phase, point_index: int, seconds: Sequence[float]) -> PointSummary:
    """The one definition of a point's summary, used by the builder and the validator."""
    mean = statistics.fmean(seconds)
    cv = statistics.stdev(seconds) / mean if len(seconds) > 1 and mean > 0 else 0.0
    return PointSummary(phase=phase, point_index=point_index, samples=len(seconds),
                        median_seconds=statistics.median(seconds), mean_seconds=mean,
                        min_seconds=min(seconds), max_seconds=max(seconds), cv=cv)


def utc_now() -> str:
    """A timestamp as the artifact writes it: ISO 8601, UTC (+00:00), microseconds."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


def parse_utc(text: str) -> datetime.datetime | None:
    """The UTC instant of a timestamp, or None when it is not an ISO 8601 UTC timestamp."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None or when.utcoffset() != datetime.timedelta(0):
        return None
    return when


@dataclass(frozen=True)
class Producer:
    """What wrote the artifact."""
    package: str
    package_version: str
    engine: str
    engine_version: str
    python_version: str
    worker: str | None = None   # pytest-xdist worker id, when written by one


@dataclass(frozen=True)
class Coverage:
    """How much of the grid has its retained observations."""
    expected: int
    completed: int
    skipped: int
    skipped_points: tuple[SkippedPoint, ...] = ()


@dataclass(frozen=True)
class WarmupPolicy:
    """How each exact coordinate is warmed up, unbooked, before it is measured."""
    rule: WarmupRule
    min_passes: int
    max_passes: int
    tolerance: float     # relative change of step time between the last two passes


@dataclass(frozen=True)
class MeasurementPolicy:
    """Which steps are retained, how many times each point is measured, how a step of a
    multi-rank engine is timed."""
    prefill: Policy | None
    decode: Policy | None
    repeats: int
    warmup: WarmupPolicy
    step_time_rule: StepTimeRule


@dataclass(frozen=True)
class Speculative:
    """The speculative decoding the profile was measured under."""
    method: SpecMethod | Literal["none"]   # "none": legacy v1 (autoregressive) only
    draft_depth: int
    acceptance_control: AcceptanceControl
    synthetic_acceptance_length: float | None = None


@dataclass(frozen=True)
class Sampling:
    """The generation sampling parameters every request of the run used."""
    temperature: float
    ignore_eos: bool
    detokenize: bool


@dataclass(frozen=True)
class RunEnvironment:
    """What ran beside the engine while it was measured (contention), as measured."""
    cpu_count: int
    other_cpu_cores: float        # mean cores used by other processes during the collection
    other_sdbench_engines: int    # other live sdbench engines on this host
    other_gpu_processes: int | None   # other processes on the engine's GPUs (None: no CUDA)
    contended: bool
    reason: str | None = None


@dataclass(frozen=True)
class Integrity:
    """Digests of the canonical JSON of what must not change after the engine started."""
    grid_digest: str
    identity_digest: str
    kv_capacity_digest: str


@dataclass(frozen=True)
class Artifact:
    """One collection: every measured point with its retained observations."""
    kind: str
    schema_version: int
    run_id: str
    started_at: str | None     # None only in artifacts upgraded from schema_version <= 3
    created_at: str
    mode: Mode
    status: Status
    time_unit: TimeUnit
    device: Device
    producer: Producer
    measurement_policy: MeasurementPolicy
    sampling: Sampling
    speculative: Speculative
    identity: ExecutionIdentity
    kv_capacity: KVCapacity
    environment: RunEnvironment | None   # None only in upgraded legacy artifacts
    grid: Grid
    coverage: Coverage
    prefill: tuple[PrefillObservation, ...]
    decode: tuple[DecodeObservation, ...]
    summaries: tuple[PointSummary, ...]
    integrity: Integrity
    elapsed_seconds: float     # the collection's wall time
    timed_seconds: float | None  # every timed step: seeds, warm-ups, measured (None: legacy)
    measured_seconds: float    # the retained steps


Observation = PrefillObservation | DecodeObservation
