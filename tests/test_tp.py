"""Tensor parallel on the CPU, for real: vLLM's CPU build runs TP=2 under external_launcher
(gloo, shared-memory all-reduce) on two rank processes. A downstream test suite runs with
--sdbench-tp 2; the artifact, the ranks' outputs and the processes are checked here."""

import json
import os

import psutil
import pytest

from pytest_sdbench.artifact import validate_path
from pytest_sdbench.engine import host
from pytest_sdbench.wire.contract import STATUS_COMPLETE

DOWNSTREAM = """
import json
import os

from pytest_sdbench.plugin.testing import restoration_violations


def test_profile_on_two_ranks(sdbench_collection, sdbench_engine):
    engine = sdbench_engine
    prompts = [[100 + (7 * i + 13 * j) % 900 for i in range(40 + 9 * j)] for j in range(3)]
    outputs = engine.rank_outputs(prompts, 8)   # greedy, every rank
    facts = dict(rank_pids=list(engine.pids), outputs=outputs,
                 restoration=restoration_violations(engine), path=str(sdbench_collection.path),
                 has_llm=hasattr(engine, "llm"))
    with open("tp-facts.json", "w") as f:
        json.dump(facts, f)
"""


@pytest.mark.slow
@pytest.mark.sdbench_engine
def test_tp2_profile_on_cpu(pytester, monkeypatch):
    pytester.makepyfile(test_downstream=DOWNSTREAM)
    # A registry of the run's own: the only entry in it is the TP engine's (rank 0's), so
    # what it counts does not depend on the engines of the host (this session's, another
    # test's).
    registry = pytester.path / "registry"
    monkeypatch.setenv(host.REGISTRY_ENV, str(registry))
    # One point of each phase: the ranks' timings and the artifact are what is checked.
    (pytester.path / "grid.json").write_text(json.dumps({
        "prefill": [{"batch_size": 2, "new_tokens": 48, "cached_prefix_tokens": 0}],
        "decode": [{"batch_size": 2, "context_tokens": 64, "draft_depth": 3,
                    "acceptance_length": None}]}))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--sdbench-tp=2", "--sdbench-mode=agg",
        "--sdbench-grid=grid.json", "--sdbench-artifact-dir=out", timeout=900)
    assert result.ret == 0, "\n".join(result.outlines[-60:])
    result.assert_outcomes(passed=1)
    facts = json.loads((pytester.path / "tp-facts.json").read_text())

    report = validate_path(facts["path"])
    assert report.ok, report.errors
    a = report.artifact
    assert a.status == STATUS_COMPLETE
    assert a.measurement_policy.step_time_rule == "slowest_rank"
    assert a.identity.tensor_parallel_size.value == 2
    assert a.identity.distributed_executor_backend.value == "external_launcher"
    assert "world cpu group gloo" in a.identity.communication.value
    assert len(a.kv_capacity.rank_num_blocks) == 2
    assert set(a.kv_capacity.rank_num_blocks) == {a.kv_capacity.num_blocks}
    assert a.prefill
    assert a.decode
    for o in (*a.prefill, *a.decode):
        assert len(o.timing.rank_seconds) == 2, o.timing
        assert o.timing.seconds == max(o.timing.rank_seconds) > 0
    # Its own rank 1 is no other engine: one registry entry per engine (rank 0's). (That
    # rank 1's CPU time is the engine's own, not other processes', is test_contention's
    # test_own_seconds_*: a bound on other_cpu_cores here would follow the host's load.)
    assert a.environment.other_sdbench_engines == 0, a.environment
    assert os.listdir(registry) == []   # removed at the engine's shutdown

    rank0, rank1 = facts["outputs"]
    assert rank0 == rank1
    assert all(len(t) == 8 for t in rank0)
    assert facts["restoration"] == []
    assert facts["has_llm"] is False   # the engine lives in the rank processes
    alive = [pid for pid in facts["rank_pids"] if psutil.pid_exists(pid)
             and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"rank processes left after the session: {alive}"
