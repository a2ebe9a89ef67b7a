"""The records of one iteration: a snapshot frozen at schedule() time, a timing sample for
the same native iteration ID, and the provenance of that sample. The observer produces
them; the artifact serialises them."""

from __future__ import annotations

from dataclasses import dataclass

from .contract import (
    CLOCK_CAP_REASONS,
    PHASE_DECODE,
    PHASE_IDLE,
    PHASE_MIXED,
    PHASE_PREFILL,
    Booking,
    ClockReason,
    Device,
    ObserverCostMethod,
    SnapshotPhase,
    TimingScope,
    TimingSource,
)


@dataclass(frozen=True)
class RequestSnapshot:
    """One scheduled request: new tokens (excluding drafts), KV tokens read, draft tokens."""
    request_id: str
    prompt_tokens: int
    new_tokens: int
    kv_tokens: int
    draft_tokens: int
    preemptions: int

    @property
    def in_prefill(self) -> bool:
        return self.kv_tokens < self.prompt_tokens


@dataclass(frozen=True)
class QueueSnapshot:
    """The scheduler's queues right after it emitted the iteration."""
    waiting: int
    running: int


@dataclass(frozen=True)
class RejectionCorrection:
    """KV tokens an in-flight snapshot over-counted because iteration from_iteration_id
    rejected draft tokens, keyed by request and preemption count."""
    request_id: str
    preemptions: int
    from_iteration_id: int
    rejected_tokens: int


@dataclass(frozen=True)
class Snapshot:
    """The workload of one iteration, frozen when the scheduler emitted it."""
    native_iteration_id: int
    phase: SnapshotPhase
    booking: Booking
    requests: tuple[RequestSnapshot, ...]
    queue: QueueSnapshot
    total_scheduled_tokens: int
    corrections: tuple[RejectionCorrection, ...] = ()

    @staticmethod
    def phase_of(requests) -> SnapshotPhase:
        kinds = {PHASE_PREFILL if r.in_prefill else PHASE_DECODE for r in requests}
        if not kinds:
            return PHASE_IDLE
        return kinds.pop() if len(kinds) == 1 else PHASE_MIXED


@dataclass(frozen=True)
class TimingSample:
    """The engine's own time for one iteration, labelled with where it came from."""
    native_iteration_id: int
    seconds: float
    scope: TimingScope
    source: TimingSource
    # Tensor parallel: each rank's own time of this step, by rank; `seconds` follows the
    # artifact's step_time_rule over them. One entry on a single-rank engine.
    rank_seconds: tuple[float, ...] = ()


@dataclass(frozen=True)
class Provenance:
    """Which timer, on which device, produced a sample."""
    device: Device
    device_name: str
    timer: str


@dataclass(frozen=True)
class GpuClock:
    """The GPU's SM clock and NVML clock event reasons around one work item's measured run:
    read right before its first step and right after its last, never inside a step."""
    sm_mhz_before: int
    sm_mhz_after: int
    max_sm_mhz: int                     # the device's maximum SM clock (NVML)
    reasons: tuple[ClockReason, ...]    # active at either reading, sorted
    capped: bool                        # one of CLOCK_CAP_REASONS was active

    @staticmethod
    def capped_by(reasons: tuple[str, ...]) -> bool:
        return any(r in CLOCK_CAP_REASONS for r in reasons)


@dataclass(frozen=True)
class ObserverCost:
    """The host time the native observer adds to one engine step, measured on the engine it
    ran on (observer.cost.measure): a host-bound step is longer by this much while it is
    observed. Seconds a step, the median over rounds, each round's figure beside it."""
    host_seconds_per_step: float
    round_seconds_per_step: tuple[float, ...]
    steps: int              # observed steps measured, over every round
    batch_size: int         # requests of the probe run
    method: ObserverCostMethod
