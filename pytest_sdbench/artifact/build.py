"""An Artifact from a collection and the engine it ran on."""

from __future__ import annotations

import datetime
import platform
import uuid

from .. import __version__
from ..contract import (
    ARTIFACT_KIND,
    PACKAGE_NAME,
    POLICY_BY_PHASE,
    SCHEMA_VERSION,
    SPEC_METHOD_EAGLE3,
    STATUS_COMPLETE,
    STATUS_FAILED,
    STATUS_PARTIAL,
    TIME_UNIT,
)
from ..points import grid_digest
from ..typed import digest
from .model import Artifact, Coverage, Integrity, Producer, Sampling, Speculative


def status_of(expected: int, completed: int) -> str:
    if completed == expected:
        return STATUS_COMPLETE
    return STATUS_PARTIAL if completed else STATUS_FAILED


def build_artifact(result, engine, worker: str | None = None,
                   run_id: str | None = None) -> Artifact:
    phases = [p for p in POLICY_BY_PHASE if getattr(result.grid, p)]
    expected = len(result.grid)
    identity, kv = engine.identity, engine.kv_capacity
    return Artifact(
        kind=ARTIFACT_KIND, schema_version=SCHEMA_VERSION,
        run_id=run_id or uuid.uuid4().hex,
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        mode=result.mode, status=status_of(expected, result.completed), time_unit=TIME_UNIT,
        device=engine.device,
        producer=Producer(package=PACKAGE_NAME, package_version=__version__, engine="vllm",
                          engine_version=str(identity.engine_version.value),
                          python_version=platform.python_version(), worker=worker),
        measurement_policy={p: POLICY_BY_PHASE[p] for p in phases},
        sampling=Sampling(**result.sampling),
        speculative=Speculative(method=SPEC_METHOD_EAGLE3, draft_depth=engine.spec.draft_depth,
                                acceptance_control=engine.acceptance_control,
                                synthetic_acceptance_length=engine.spec.synthetic_acceptance_length),
        identity=identity, kv_capacity=kv, grid=result.grid,
        coverage=Coverage(expected=expected, completed=result.completed,
                          skipped=len(result.skipped), skipped_points=tuple(result.skipped)),
        prefill=tuple(result.prefill), decode=tuple(result.decode),
        integrity=Integrity(grid_digest=grid_digest(result.grid), identity_digest=digest(identity),
                            kv_capacity_digest=digest(kv)),
        elapsed_seconds=result.elapsed_seconds, measured_seconds=result.measured_seconds,
    )
