"""The artifact: the published, versioned contract that simulators import. These frozen
dataclasses are the one home of its field names and types; schema.json is generated from
them (``python -m pytest_sdbench.artifact.schema``) and a test keeps the two equal.

Times are in seconds (fields end in ``seconds``); token counts are integers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..collector.results import DecodeObservation, PrefillObservation, SkippedPoint
from ..engine.facts import ExecutionIdentity, KVCapacity
from ..points import Grid


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
    """How much of the grid has a retained observation."""
    expected: int
    completed: int
    skipped: int
    skipped_points: tuple[SkippedPoint, ...] = ()


@dataclass(frozen=True)
class Speculative:
    """The speculative decoding the profile was measured under."""
    method: str
    draft_depth: int
    acceptance_control: str
    synthetic_acceptance_length: float | None = None


@dataclass(frozen=True)
class Sampling:
    """The generation sampling parameters every request of the run used."""
    temperature: float
    ignore_eos: bool
    detokenize: bool


@dataclass(frozen=True)
class Integrity:
    """Digests of the canonical JSON of what must not change after the engine started."""
    grid_digest: str
    identity_digest: str
    kv_capacity_digest: str


@dataclass(frozen=True)
class Artifact:
    """One collection: every measured point with exactly one retained observation."""
    kind: str
    schema_version: int
    run_id: str
    created_at: str
    mode: str
    status: str
    time_unit: str
    device: str
    producer: Producer
    measurement_policy: dict[str, str]
    sampling: Sampling
    speculative: Speculative
    identity: ExecutionIdentity
    kv_capacity: KVCapacity
    grid: Grid
    coverage: Coverage
    prefill: tuple[PrefillObservation, ...]
    decode: tuple[DecodeObservation, ...]
    integrity: Integrity
    elapsed_seconds: float
    measured_seconds: float
