"""Production profiles on the real CPU engine: a decode point beyond one step's token
budget, repeats with their summaries, engine arguments reaching the engine and the
artifact, and a K sweep of 1-2 (one engine per K, an index naming both and their shared
grid)."""

import json
import statistics

import pytest

from pytest_sdbench.artifact import validate_path
from pytest_sdbench.cli import main
from pytest_sdbench.grid.shared import SharedGrid, with_depth, without_depth
from pytest_sdbench.plugin.testing import observation_violations
from pytest_sdbench.wire import typed
from pytest_sdbench.wire.contract import STATUS_COMPLETE, STOP_FIXED
from pytest_sdbench.wire.model import summarize
from pytest_sdbench.wire.points import parse_grid
from pytest_sdbench.wire.rounds import point_canary_spread


@pytest.mark.sdbench_engine
def test_decode_point_beyond_one_steps_budget_is_measured_exactly(sdbench_collect,
                                                                  sdbench_engine):
    budget = sdbench_engine.max_num_batched_tokens
    batch, context = 3, budget // 2   # 1.5x the budget: admission alone needs two steps
    assert batch * context > budget
    k = sdbench_engine.spec.draft_depth
    grid = parse_grid({"decode": [{"batch_size": batch, "context_tokens": context,
                                   "draft_depth": k, "acceptance_length": None}]})
    run = sdbench_collect("decode", grid)
    assert run.artifact.status == STATUS_COMPLETE, run.artifact.coverage.skipped_points
    assert observation_violations(run.artifact) == []
    steps = run.artifact.decode   # one work item's settled steps, run steps 3, 4, ...
    assert [o.step_index for o in steps] == list(range(3, 3 + len(steps)))
    for obs in steps:   # the context grows by at least one token a step from the point's
        grown = obs.step_index - 2
        assert all(context + grown <= r.kv_tokens <= context + grown * (k + 1)
                   for r in obs.snapshot.requests)
        assert len(obs.snapshot.requests) == batch


@pytest.mark.sdbench_engine
def test_repeats_are_observations_of_their_own_with_a_recomputable_summary(sdbench_collect,
                                                                          sdbench_engine):
    k = sdbench_engine.spec.draft_depth
    grid = parse_grid({"prefill": [{"batch_size": 2, "new_tokens": 48,
                                    "cached_prefix_tokens": 0}],
                       "decode": [{"batch_size": 2, "context_tokens": 64, "draft_depth": k,
                                   "acceptance_length": None}]})
    run = sdbench_collect("agg", grid, repeats=3)
    a = run.artifact
    assert a.status == STATUS_COMPLETE
    assert a.measurement_policy.repeats == 3
    assert observation_violations(a) == []
    for phase in ("prefill", "decode"):
        observations = getattr(a, phase)
        steps = len(observations) // 3   # a decode sample is its work item's settled steps
        assert [o.repeat for o in observations] == [r for r in (0, 1, 2) for _ in range(steps)]
        assert len({o.native_iteration_id for o in observations}) == 3 * steps
        (summary,) = [s for s in a.summaries if s.phase == phase]
        seconds = [statistics.median_low([o.timing.seconds for o in observations
                                          if o.repeat == r]) for r in (0, 1, 2)]
        spread = point_canary_spread(a.rounds, [0, 1, 2])
        assert summary == summarize(phase, 0, seconds, STOP_FIXED, spread)
        assert {o.repeat: o.round for o in observations} == {0: 0, 1: 1, 2: 2}   # a round
        assert summary.median_seconds == statistics.median(seconds)
        assert all(o.warmup_passes >= a.measurement_policy.warmup.min_passes
                   for o in observations)
    assert validate_path(run.path).ok


SWEEP_TEST = """
def test_engine_of_each_k(sdbench_collection, sdbench_engine, sdbench_k):
    a = sdbench_collection.artifact
    assert a.status == "complete"
    assert a.speculative.draft_depth == sdbench_engine.spec.draft_depth == sdbench_k
    settings = a.identity.settings
    assert sdbench_engine.max_num_seqs == 4
    assert settings.max_num_seqs.value == 4
    assert settings.user_engine_args == {"max_num_seqs": "4"}


def test_prefill_of_each_k(sdbench_collect, sdbench_k):
    run = sdbench_collect("prefill")
    assert run.path.name.startswith(f"sdbench-prefill-k{sdbench_k}-")
"""


@pytest.mark.slow
@pytest.mark.sdbench_engine
def test_k_sweep_runs_one_engine_per_k_and_indexes_the_artifacts(pytester, capsys):
    """One engine per K; an index for each kind of collection made on every K (the
    session's sdbench_collection, and a test's own sdbench_collect call), read by `sdbench
    validate`."""
    pytester.makepyfile(test_sweep=SWEEP_TEST)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--sdbench-k=1-2", "--sdbench-mode=decode",
        "--sdbench-engine-arg", "max_num_seqs=4", "--sdbench-artifact-dir=out", timeout=900)
    result.assert_outcomes(passed=4)
    out = pytester.path / "out"
    (index_path,) = out.glob("sdbench-sweep-decode-k1-2-*.json")
    (prefill_index,) = out.glob("sdbench-sweep-prefill-k1-2-*.json")
    for path in (index_path, prefill_index):
        result.stdout.fnmatch_lines([f"artifact: K-sweep index {path.resolve()} (K-sweep index "
                                     "of 2 artifacts, K=1,2, mode *)"])
    capsys.readouterr()   # pytester's own output
    assert main(["validate", *map(str, sorted(out.glob("*.json")))]) == 0
    verdicts = [line.split()[0] for line in capsys.readouterr().out.splitlines()
                if line.strip() and not line.startswith(" ")]
    assert verdicts == ["VALID"] * 6   # 2 K x (decode, prefill), and their 2 indexes
    index = json.loads(index_path.read_text())
    assert index["draft_depths"] == [1, 2]
    shared = typed.decode(SharedGrid, index["shared_grid"])
    assert shared.decode
    assert index["grids_identical"] is True
    for entry in index["artifacts"]:
        report = validate_path(out / entry["path"])
        assert report.ok, report.errors
        k = report.artifact.speculative.draft_depth
        assert k == entry["draft_depth"]
        assert entry["path"].startswith(f"sdbench-decode-k{k}-")
        # The same K-free grid for every K; the artifact's is it with its K.
        assert without_depth(report.artifact.grid) == shared
        assert with_depth(shared, k) == report.artifact.grid
