"""The oracle: the collection for --sdbench-mode (agg by default) is complete, exact and
written as validated. The collection itself refuses an invalid artifact and an engine left
unrestored (pytest_sdbench.run.collect.collect_to_artifact); the tests here check what it does
not, and test_oracle_evidence.py checks the observations against the engine's own clocks
and state."""

import json

import pytest

from pytest_sdbench.plugin.testing import observation_violations
from pytest_sdbench.wire import typed
from pytest_sdbench.wire.contract import MODE_AGG, STATUS_COMPLETE


def test_collection_is_complete(sdbench_collection):
    a = sdbench_collection.artifact
    assert a.status == STATUS_COMPLETE, a.coverage.skipped_points
    assert a.coverage.completed == a.coverage.expected == len(a.grid) > 0


def test_the_written_file_is_the_artifact_that_passed_validation(sdbench_collection):
    """The collection validated the artifact (validator and JSON Schema) before writing it;
    the bytes left on disk must be exactly that artifact."""
    path = sdbench_collection.path
    assert path.name.endswith(".json")
    assert not path.name.endswith(".invalid.json")
    assert json.loads(path.read_text()) == typed.encode(sdbench_collection.artifact)


def test_every_observation_is_exact(sdbench_collection):
    assert observation_violations(sdbench_collection.artifact) == []
    assert shape_problems(sdbench_collection.artifact) == []


def shape_problems(a) -> list[str]:
    """Each retained step against its point, written here from the point's definition and
    not with wire.shape (the rule the collector retains steps by, so a fault in it would
    pass both): the scheduler's own token count for the step, the batch, and what every
    request read. Prefill: B requests, each its whole prompt (cached prefix read, new tokens
    computed, no drafts), B x new tokens scheduled. Decode: B requests, each one token and K
    drafts (B x (1 + K) scheduled), each reading at least the point's context."""
    problems = []
    for phase, observations in (("prefill", a.prefill), ("decode", a.decode)):
        for o in observations:
            p, snap, where = getattr(a.grid, phase)[o.point_index], o.snapshot, \
                f"{phase} point {o.point_index} (native {o.native_iteration_id})"
            if phase == "prefill":
                per_request, reads = p.new_tokens, [p.cached_prefix_tokens]
                drafts, prompt = 0, p.cached_prefix_tokens + p.new_tokens
            else:
                per_request, reads = 1 + p.draft_depth, None
                drafts, prompt = p.draft_depth, None
            requests = snap.requests
            if snap.phase != phase or len({r.request_id for r in requests}) != p.batch_size \
                    or len(requests) != p.batch_size:
                problems.append(f"{where}: a {snap.phase} step of {len(requests)} requests")
            if snap.total_scheduled_tokens != p.batch_size * per_request:
                problems.append(f"{where}: {snap.total_scheduled_tokens} tokens scheduled, "
                                f"the point is {p.batch_size} x {per_request}")
            for r in requests:
                read_ok = r.kv_tokens in reads if reads else r.kv_tokens >= p.context_tokens
                if r.draft_tokens != drafts or not read_ok or \
                        (prompt is not None and r.prompt_tokens != prompt):
                    problems.append(f"{where}: request {r.request_id} {r}")
    return problems


def test_agg_measures_every_prefill_point_before_any_decode_point(sdbench_collection):
    """Native IDs are stamped in the order the scheduler emitted the iterations."""
    a = sdbench_collection.artifact
    if a.mode != MODE_AGG:
        pytest.skip(f"--sdbench-mode={a.mode}: one phase only")
    assert max(o.native_iteration_id for o in a.prefill) < \
        min(o.native_iteration_id for o in a.decode)


def test_a_local_checkpoint_revision_is_not_guessed(sdbench_collection, sdbench_engine):
    """The preset's checkpoints are written locally: no revision exists, and none may be
    looked up or made up."""
    spec = sdbench_engine.spec
    if spec.preset is None or spec.target_revision or spec.draft_revision:
        pytest.skip("the engine runs the user's checkpoints or revisions")
    identity = sdbench_collection.artifact.identity
    assert identity.target.revision.status == "unresolved"
    assert identity.target.revision.value is None
    assert identity.draft.revision.status == "unresolved"
