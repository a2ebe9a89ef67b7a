"""The oracle: the collection for --sdbench-mode (agg by default) is exact, valid, written,
and leaves the engine serving as before."""

import json

import jsonschema

from pytest_sdbench.artifact import schema, validate_path
from pytest_sdbench.contract import (
    KV_SEED_NONE,
    KV_SEED_REAL,
    PHASE_DECODE,
    PHASE_PREFILL,
    PHASES_BY_MODE,
    STATUS_COMPLETE,
)
from pytest_sdbench.testing import observation_violations, restoration_violations


def test_collection_is_complete(sdbench_collection):
    a = sdbench_collection.artifact
    assert a.status == STATUS_COMPLETE, a.coverage.skipped_points
    assert a.coverage.completed == a.coverage.expected == len(a.grid) > 0


def test_artifact_written_valid_and_in_schema(sdbench_collection):
    path = sdbench_collection.path
    assert path.is_file()
    assert path.suffix == ".json"
    report = validate_path(path)
    assert report.ok, report.errors
    jsonschema.validate(json.loads(path.read_text()), schema.load())


def test_every_observation_is_exact(sdbench_collection):
    assert observation_violations(sdbench_collection.artifact) == []


def test_phases_follow_the_mode_and_never_mix(sdbench_collection):
    a = sdbench_collection.artifact
    phases = PHASES_BY_MODE[a.mode]
    assert bool(a.prefill) == (PHASE_PREFILL in phases)
    assert bool(a.decode) == (PHASE_DECODE in phases)
    assert {o.snapshot.phase for o in a.prefill} <= {PHASE_PREFILL}
    assert {o.snapshot.phase for o in a.decode} <= {PHASE_DECODE}
    if a.prefill and a.decode:  # agg: every prefill point ran before every decode point
        assert max(o.native_iteration_id for o in a.prefill) < \
            min(o.native_iteration_id for o in a.decode)


def test_cached_prefixes_are_real_verified_hits(sdbench_collection):
    a = sdbench_collection.artifact
    for o in a.prefill:
        prefix = o.point.cached_prefix_tokens
        if prefix:
            assert o.kv_seed_regime == KV_SEED_REAL
            assert o.cache_hit_tokens == (prefix,) * o.point.batch_size
            assert {r.kv_tokens for r in o.snapshot.requests} == {prefix}
        else:
            assert o.kv_seed_regime == KV_SEED_NONE


def test_decode_records_depth_and_acceptance(sdbench_collection):
    a = sdbench_collection.artifact
    for o in a.decode:
        assert o.point.draft_depth == a.speculative.draft_depth
        assert len(o.accepted_tokens) == o.point.batch_size
        assert all(0 <= n <= o.point.draft_depth for n in o.accepted_tokens)
        assert o.observed_acceptance_length == 1 + sum(o.accepted_tokens) / len(o.accepted_tokens)


def test_identity_and_kv_capacity_as_the_engine_reports(sdbench_collection, sdbench_engine):
    a = sdbench_collection.artifact
    assert a.identity == sdbench_engine.identity
    assert a.identity.target.revision.status == "unresolved"  # local checkpoint, no guess
    kv = a.kv_capacity
    assert kv.draft_layer_names, "the draft's KV layers must be part of the capacity"
    assert set(kv.draft_layer_names) <= {n for g in kv.groups for n in g.layer_names}


def test_engine_is_restored_and_serves(sdbench_collection, sdbench_engine):
    assert restoration_violations(sdbench_engine) == []
