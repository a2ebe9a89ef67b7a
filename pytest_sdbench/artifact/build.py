"""An Artifact from a collection and the engine it ran on."""

from __future__ import annotations

import dataclasses
import platform
import uuid

from .. import __version__
from ..wire.contract import (
    ARTIFACT_KIND,
    CANARY_WORKLOAD,
    MEDIAN_INTERVAL,
    PACKAGE_NAME,
    PHASES,
    REPEAT_ROUNDS,
    SCHEMA_VERSION,
    SPEC_METHOD_EAGLE3,
    STATUS_COMPLETE,
    STATUS_FAILED,
    STATUS_PARTIAL,
    STEP_TIME_SINGLE_RANK,
    STEP_TIME_SLOWEST_RANK,
    STOP_NOT_FINISHED,
    TIME_UNIT,
    WARMUP_BOUNDS,
    WARMUP_RULE,
    Status,
    policies_for,
)
from ..wire.model import (
    Artifact,
    Coverage,
    Integrity,
    MeasurementPolicy,
    PointSummary,
    Producer,
    RunEnvironment,
    Sampling,
    Speculative,
    WarmupPolicy,
    summarize,
    utc_now,
)
from ..wire.points import grid_digest
from ..wire.rounds import (
    UntilPinned,
    canary_readings,
    canary_spread,
    point_canary_spread,
    samples_by_point,
    stop_rule,
)
from ..wire.typed import digest


def status_of(expected: int, completed: int, finished: bool = True) -> Status:
    """complete: every point measured, each with the samples its rule asks (finished)."""
    if completed == expected and finished:
        return STATUS_COMPLETE
    return STATUS_PARTIAL if completed else STATUS_FAILED


def measurement_policy(mode: str, repeats: int, ranks: int, repeat_order: str = REPEAT_ROUNDS,
                       order_seed: int | None = None, until_pinned: UntilPinned | None = None,
                       mixed_points: bool = False) -> MeasurementPolicy:
    return MeasurementPolicy(
        **policies_for(mode, mixed_points),  # type: ignore[arg-type]
        repeats=repeats, repeat_order=repeat_order,  # type: ignore[arg-type]
        order_seed=order_seed, until_pinned=until_pinned,
        warmup=WarmupPolicy(WARMUP_RULE, *WARMUP_BOUNDS[WARMUP_RULE]),
        step_time_rule=STEP_TIME_SLOWEST_RANK if ranks > 1 else STEP_TIME_SINGLE_RANK,
        median_interval=MEDIAN_INTERVAL)


def summaries(result) -> tuple[PointSummary, ...]:
    out: list[PointSummary] = []
    for phase in PHASES:
        for i, obs in sorted(samples_by_point(getattr(result, phase)).items()):
            seconds = [sample.seconds for sample in obs]
            out.append(summarize(phase, i, seconds,  # type: ignore[arg-type]
                                 stop_rule(seconds, result.repeats, result.until_pinned),
                                 point_canary_spread(result.rounds, [o.round for o in obs])))
    return tuple(out)


def build_artifact(result, engine, environment: RunEnvironment, worker: str | None = None,
                   run_id: str | None = None, created_at: str | None = None) -> Artifact:
    expected = len(result.grid)
    identity, kv = engine.identity, engine.kv_capacity
    points = summaries(result)
    environment = dataclasses.replace(environment,
                                      cpu_placement=getattr(engine, "cpu_placement", None))
    return Artifact(
        kind=ARTIFACT_KIND, schema_version=SCHEMA_VERSION,
        run_id=run_id or uuid.uuid4().hex,
        started_at=result.started_at, created_at=created_at or utc_now(),
        mode=result.mode, time_unit=TIME_UNIT,
        status=status_of(expected, result.completed,
                         finished=all(p.stop != STOP_NOT_FINISHED for p in points)),
        device=engine.device,
        producer=Producer(package=PACKAGE_NAME, package_version=__version__, engine="vllm",
                          engine_version=str(identity.engine_version.value),
                          python_version=platform.python_version(), worker=worker),
        measurement_policy=measurement_policy(result.mode, result.repeats,
                                              len(kv.rank_num_blocks), result.repeat_order,
                                              result.order_seed, result.until_pinned,
                                              bool(result.grid.mixed)),
        sampling=Sampling(**result.sampling),
        speculative=Speculative(method=SPEC_METHOD_EAGLE3, draft_depth=engine.spec.draft_depth,
                                acceptance_control=engine.acceptance_control,
                                synthetic_acceptance_length=engine.spec.synthetic_acceptance_length),
        identity=identity, kv_capacity=kv,
        environment=environment, grid=result.grid,
        coverage=Coverage(expected=expected, completed=result.completed,
                          skipped=len(result.skipped), skipped_points=tuple(result.skipped)),
        prefill=tuple(result.prefill), decode=tuple(result.decode), mixed=tuple(result.mixed),
        summaries=points, rounds=tuple(result.rounds),
        observer_cost=getattr(engine, "observer_cost", None),
        host_canary=canary_spread(CANARY_WORKLOAD, canary_readings(result.rounds)),
        integrity=Integrity(grid_digest=grid_digest(result.grid), identity_digest=digest(identity),
                            kv_capacity_digest=digest(kv)),
        elapsed_seconds=result.elapsed_seconds, timed_seconds=result.timed_seconds,
        measured_seconds=result.measured_seconds,
    )
