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
    MEDIAN_INTERVAL,
    AcceptanceControl,
    Device,
    GraphMode,
    KVSeedRegime,
    MedianInterval,
    Mode,
    Phase,
    Policy,
    RepeatOrder,
    SpecMethod,
    Status,
    StepTimeRule,
    StopRule,
    TimeUnit,
    WarmupRule,
)
from .identity import ExecutionIdentity, KVCapacity
from .points import DecodePoint, Grid, MixedPoint, PrefillPoint
from .records import GpuClock, ObserverCost, Provenance, Snapshot, TimingSample
from .rounds import CanarySpread, Round, UntilPinned, median_half_width


@dataclass(frozen=True)
class PrefillObservation:
    """One retained step of a prefill point (one per sample)."""
    point_index: int
    repeat: int                   # the point's sample: 0, 1, ... in the order taken
    round: int                    # the round it was taken in (rounds[round])
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
    gpu_clock: GpuClock | None    # CUDA: the clock around the work item; CPU: null


@dataclass(frozen=True)
class DecodeObservation:
    """One retained step of a decode point: under settled_steps SETTLED_STEPS consecutive
    steps of one work item (one sample) share its repeat and round, each with its own
    step_index (1-based step of the run), snapshot and native ID."""
    point_index: int
    repeat: int
    round: int
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
    gpu_clock: GpuClock | None


@dataclass(frozen=True)
class MixedObservation:
    """The retained step of a mixed point (one per sample): the step of a running decode
    batch (run step step_index) that admitted the point's prefills beside its decodes, found
    by the requests it scheduled, with its own snapshot (both kinds of request, the context
    the decodes really read) and native ID."""
    point_index: int
    repeat: int
    round: int
    point: MixedPoint
    native_iteration_id: int
    step_index: int
    snapshot: Snapshot
    timing: TimingSample
    provenance: Provenance
    accepted_tokens: tuple[int, ...]    # each decoding request's accepted drafts
    kv_seed_regime: KVSeedRegime        # the prefills' cached prefix
    cache_hit_tokens: tuple[int, ...]   # each prefilling request's cache hit
    graph_mode: GraphMode
    warmup_passes: int
    warmup_settled: bool
    gpu_clock: GpuClock | None


@dataclass(frozen=True)
class SkippedPoint:
    """A point of the grid with no retained observation, and why."""
    phase: Phase
    point_index: int
    reason: str


@dataclass(frozen=True)
class PointSummary:
    """The retained steps of one point, summarised: recomputable from its observations (and,
    for canary_spread, from the rounds they were taken in)."""
    phase: Phase
    point_index: int
    samples: int
    median_seconds: float
    mean_seconds: float
    min_seconds: float
    max_seconds: float
    cv: float    # sample standard deviation / mean; 0 for a single sample
    # The relative half width of the median's 95% CI (wire.rounds.median_half_width; null
    # for one sample): under rounds, the dispersion of a point across the collection.
    median_half_width: float | None
    stop: StopRule                 # why the point has this many samples
    canary_spread: float | None    # the host canary's relative range over its rounds


def summarize(phase: Phase, point_index: int, seconds: Sequence[float], stop: StopRule,
              canary_spread: float | None,
              rule: MedianInterval = MEDIAN_INTERVAL) -> PointSummary:
    """The one definition of a point's summary, used by the builder and the validator;
    `seconds` in the order the samples were taken."""
    mean = statistics.fmean(seconds)
    cv = statistics.stdev(seconds) / mean if len(seconds) > 1 and mean > 0 else 0.0
    return PointSummary(phase=phase, point_index=point_index, samples=len(seconds),
                        median_seconds=statistics.median(seconds), mean_seconds=mean,
                        min_seconds=min(seconds), max_seconds=max(seconds), cv=cv,
                        median_half_width=median_half_width(seconds, rule), stop=stop,
                        canary_spread=canary_spread)


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
    """How each point is warmed up, unbooked, before it is measured (contract.WarmupRule)."""
    rule: WarmupRule
    min_passes: int
    max_passes: int
    tolerance: float     # relative change of step time between the last two passes


@dataclass(frozen=True)
class MeasurementPolicy:
    """Which steps are retained, how many times each point is measured and in what order,
    how a step of a multi-rank engine is timed."""
    prefill: Policy | None
    decode: Policy | None
    mixed: Policy | None          # null: no mixed point in the collection (v6 and older)
    repeats: int                  # rounds: the fixed rounds; back_to_back: repeats a point
    repeat_order: RepeatOrder
    order_seed: int | None        # rounds: the seed of every round's order; else null
    until_pinned: UntilPinned | None   # rounds only: more rounds for unpinned points
    warmup: WarmupPolicy
    step_time_rule: StepTimeRule
    median_interval: MedianInterval   # the rule of every summary's median_half_width


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
class ThreadPlacement:
    """One thread of the engine's process and the CPUs it may run on."""
    tid: int
    name: str
    allowed_cpus: tuple[int, ...]


@dataclass(frozen=True)
class CpuPlacement:
    """Where the engine's threads may run, read from the OS after the engine started (as
    AISimulate's collector records its own, collector/fpm_forward/cpu_affinity.py)."""
    requested_cpus: tuple[int, ...] | None   # --sdbench-cpus; null: the process's own mask
    main_thread_allowed_cpus: tuple[int, ...]
    threads: tuple[ThreadPlacement, ...]
    source: str


@dataclass(frozen=True)
class RunEnvironment:
    """What ran beside the engine while it was measured (contention), as measured, and
    where the engine's threads ran (null only in upgraded legacy artifacts)."""
    cpu_count: int
    other_cpu_cores: float        # mean cores used by other processes during the collection
    other_sdbench_engines: int    # other live sdbench engines on this host
    other_gpu_processes: int | None   # other processes on the engine's GPUs (None: no CUDA)
    contended: bool
    reason: str | None = None
    cpu_placement: CpuPlacement | None = None


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
    mixed: tuple[MixedObservation, ...]   # empty: no mixed point (v6 and older)
    summaries: tuple[PointSummary, ...]
    rounds: tuple[Round, ...]          # empty only in upgraded legacy artifacts
    host_canary: CanarySpread | None   # every canary reading summarised (null: legacy)
    # The host time the observer adds to a step on this engine, measured before the
    # collection by observer.cost.measure (null: not measured, as in legacy artifacts and
    # those written before the field joined schema 5; flagged): how much of a host-bound
    # step's time is the observer's own.
    observer_cost: ObserverCost | None
    integrity: Integrity
    elapsed_seconds: float     # the collection's wall time
    timed_seconds: float | None  # every timed step: seeds, warm-ups, measured (None: legacy)
    measured_seconds: float    # the retained steps


Observation = PrefillObservation | DecodeObservation | MixedObservation
