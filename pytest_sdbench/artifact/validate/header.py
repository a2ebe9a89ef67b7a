"""The header rules: kind, run id, timestamps, producer, sampling; and the measurement
policy against the mode, the contract and the tensor-parallel size."""

from __future__ import annotations

from ...wire import typed
from ...wire.contract import (
    ARTIFACT_KIND,
    GENERATION_SAMPLING,
    MEDIAN_INTERVAL,
    MEDIAN_NORMAL_Z,
    PACKAGE_NAME,
    POLICY_SETTLED_STEPS,
    POLICY_STEADY_STEP,
    STEP_TIME_SINGLE_RANK,
    STEP_TIME_SLOWEST_RANK,
    WARMUP_BOUNDS,
    WARMUP_RULE,
    WARMUP_RULES_SINCE_V4,
    WARMUP_SINGLE_PASS,
    policies_for,
)
from ...wire.model import Artifact, parse_utc
from .helpers import Err, older_than, resolved, resolved_int

# ---- header ----------------------------------------------------------------------------

def check_header(a: Artifact, err: Err, legacy) -> None:
    if a.kind != ARTIFACT_KIND:
        err(f"kind: expected {ARTIFACT_KIND!r}, got {a.kind!r}")
    if not a.run_id.strip():
        err(f"run_id: must be a non-empty ID, got {a.run_id!r}")
    if parse_utc(a.created_at) is None:
        err(f"created_at: must be an ISO 8601 UTC timestamp (e.g. 2026-11-30T20:07:00+00:00), "
            f"got {a.created_at!r}")
    if a.started_at is None:
        if not older_than(legacy, 4):
            err("started_at: null; required since schema_version 4 (null only in artifacts "
                "upgraded from schema_version 3 or older)")
    elif parse_utc(a.started_at) is None:
        err(f"started_at: must be an ISO 8601 UTC timestamp, got {a.started_at!r}")
    p, ident = a.producer, a.identity
    if p.package != PACKAGE_NAME:
        err(f"producer.package: expected {PACKAGE_NAME!r}, got {p.package!r}")
    if p.engine != resolved(ident.engine):
        err(f"producer.engine: {p.engine!r} differs from identity.engine "
            f"{resolved(ident.engine)!r}")
    if p.engine_version != resolved(ident.engine_version):
        err(f"producer.engine_version: {p.engine_version!r} differs from "
            f"identity.engine_version {resolved(ident.engine_version)!r}")
    sampling = typed.encode(a.sampling)
    if sampling != GENERATION_SAMPLING:
        err(f"sampling: {sampling} differs from the generation sampling every request of "
            f"the package uses, {GENERATION_SAMPLING}")


def check_policy(a: Artifact, err: Err, legacy) -> None:
    policy = a.measurement_policy
    for phase, stated in policies_for(a.mode, bool(a.grid.mixed)).items():
        if stated == POLICY_SETTLED_STEPS and older_than(legacy, 6):
            stated = POLICY_STEADY_STEP   # before v6 decode retained the first decode step
        if getattr(policy, phase) != stated:
            err(f"measurement_policy.{phase}: expected {stated!r} for mode {a.mode!r}"
                f"{' with mixed points' if a.grid.mixed else ''}, got "
                f"{getattr(policy, phase)!r}")
    if policy.repeats < 1:
        err(f"measurement_policy.repeats: must be >= 1, got {policy.repeats}")
    interval = MEDIAN_NORMAL_Z if older_than(legacy, 6) else MEDIAN_INTERVAL
    if policy.median_interval != interval:
        err(f"measurement_policy.median_interval: {policy.median_interval!r}; an artifact of "
            f"this schema_version states the median's interval {interval!r}")
    warmup = policy.warmup
    # Since schema v4 a point warms up until stable, or (v6, by_shape) for one pass where an
    # earlier point settled its compiled shape (by_shape_seeded: a decode point for none),
    # with the contract's passes and tolerance; older artifacts warmed up once (the reader
    # states it so).
    old = older_than(legacy, 4)
    rule = WARMUP_SINGLE_PASS if old else \
        warmup.rule if warmup.rule in WARMUP_RULES_SINCE_V4 else WARMUP_RULE
    want = (rule, *WARMUP_BOUNDS[rule])
    names = ("rule", "min_passes", "max_passes", "tolerance")
    for name, expected in zip(names, want, strict=True):
        got = getattr(warmup, name)
        if got != expected or type(got) is not type(expected):
            err(f"measurement_policy.warmup.{name}: {got!r}, the "
                f"{'legacy reader' if old else 'contract'} states {expected!r}")
    tp = resolved_int(a.identity.tensor_parallel_size)
    if tp is None or tp < 1:
        err("identity.tensor_parallel_size: must be a resolved integer >= 1, got "
            f"{a.identity.tensor_parallel_size.value!r}")
    elif (policy.step_time_rule == STEP_TIME_SINGLE_RANK) != (tp == 1):
        err(f"measurement_policy.step_time_rule: {policy.step_time_rule!r} with "
            f"identity.tensor_parallel_size {tp}; {STEP_TIME_SINGLE_RANK!r} is the rule of one "
            f"rank, {STEP_TIME_SLOWEST_RANK!r} of several")

