"""`sdbench fidelity` on the real engine (vLLM's CPU build in CI): a small profile collected
on the session's engine, then a held-out Poisson workload served on it step by step through
the sdbench_fidelity fixture; every request served and timed, every step a native
observation, the report priced from the profile; an engine configured otherwise refused
naming the field; and the CLI end to end (collect, then fidelity) on the tiny preset. The
figures are host-timed on a shared CPU: reported, never gated."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from pytest_sdbench.fidelity.report import OURS
from pytest_sdbench.fidelity.run import load, measure
from pytest_sdbench.fidelity.workload import Lengths, Workload, plan
from pytest_sdbench.run.profile import EngineMismatch
from pytest_sdbench.wire.identity import IdentityField
from pytest_sdbench.wire.points import parse_grid

pytestmark = pytest.mark.sdbench_engine

WORKLOAD = Workload("poisson", Lengths(48, 160), Lengths(6, 16), seed=1, rate=2.0,
                    duration_seconds=4.0)


def small_grid(draft_depth: int) -> dict:
    """Prefill and decode points around WORKLOAD's steps: batches 1 and 4 (2 and 3 lie
    between), prompts and contexts spanning its lengths."""
    return {"prefill": [{"batch_size": b, "new_tokens": n, "cached_prefix_tokens": 0}
                        for b in (1, 4) for n in (32, 256)],
            "decode": [{"batch_size": b, "context_tokens": c, "draft_depth": draft_depth,
                        "acceptance_length": None} for b in (1, 4) for c in (40, 256)]}


@pytest.fixture(scope="module")
def profile(sdbench_collect, sdbench_engine):
    if sdbench_engine.spec.synthetic_acceptance_length is not None:
        pytest.skip("the small grid names natural acceptance (the CPU engine's)")
    return sdbench_collect("agg", parse_grid(small_grid(sdbench_engine.spec.draft_depth)))


@pytest.fixture(scope="module")
def served(sdbench_fidelity, profile, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fidelity")
    done = sdbench_fidelity(profile, [WORKLOAD], out_dir=folder, warmup_requests=2)
    _artifact, (run,), _notes, _original = load(folder)
    return done, run


def test_every_request_is_served_and_timed_from_its_arrival(served):
    _, run = served
    planned = plan(WORKLOAD)
    assert [r.index for r in run.requests] == [p.index for p in planned]
    for r, p in zip(run.requests, planned, strict=True):
        assert (r.input_tokens, r.output_tokens, r.arrival) == (p.input_tokens,
                                                                p.output_tokens,
                                                                p.arrival_seconds)
        assert r.delivered_tokens == p.output_tokens        # EOS ignored: all delivered
        times = [t for t, _ in r.deliveries]
        assert times == sorted(times)
        assert r.added >= r.arrival                          # added at a step boundary
        assert 0 < r.ttft <= r.e2e
        assert r.finished == times[-1]


def test_every_step_is_a_native_observation_and_every_prompt_token_is_computed_once(served):
    _, run = served
    ids = [s.native_iteration_id for s in run.steps]
    assert ids == sorted(set(ids))
    assert all(s.seconds > 0 for s in run.steps)
    assert {s.kind for s in run.steps} >= {"prefill", "decode"}
    assert {s.graph_mode for s in run.steps} == {"eager"}
    assert run.timing_source == "host_perf_counter"
    # fresh prompts never hit the prefix cache: each prompt token is computed in one step
    assert sum(s.prefill_tokens for s in run.steps) == sum(r.input_tokens for r in run.requests)
    for s in run.steps:
        assert s.requests == (s.prefill_requests + s.decode_requests) <= len(run.requests)
        assert (s.kind == "decode") == (s.prefill_requests == 0)
        assert (s.kind == "prefill") == (s.decode_requests == 0)
        assert s.total_scheduled_tokens == s.prefill_tokens + s.decode_requests + s.draft_tokens


def test_the_report_prices_the_run_from_the_profile(served, sdbench_note):
    done, run = served
    figures = json.loads(done.path.with_name("fidelity.json").read_text())
    model = figures["models"]["tiny"]
    kinds = model[OURS]
    assert kinds["all"]["steps"] == len(run.steps)
    assert kinds["decode"]["priced_steps"] >= 1
    for kind in ("prefill", "decode", "mixed"):
        assert kinds[kind]["steps"] == sum(s.kind == kind for s in run.steps)
    assert figures["predictors"]["aisimulate"]["status"] == "not run"   # CPU: no export
    assert figures["rates"]["2"]["measured"]["ttft_median_ms"] > 0
    assert done.path.is_file()
    decode = kinds["decode"]
    sdbench_note(f"fidelity (CPU, host-timed, not gated): {len(run.steps)} steps; decode "
                 f"{decode['priced_steps']}/{decode['steps']} priced, median |e| "
                 f"{100 * (decode['median_abs_error'] or 0):.1f}%")


def test_an_engine_configured_otherwise_is_refused_naming_the_field(sdbench_engine, profile):
    artifact = profile.artifact
    settings = dataclasses.replace(artifact.identity.settings,
                                   max_num_seqs=IdentityField.of(99, "test"))
    other = dataclasses.replace(artifact, identity=dataclasses.replace(artifact.identity,
                                                                       settings=settings))
    with pytest.raises(EngineMismatch) as refused:
        measure(sdbench_engine, other, [WORKLOAD])
    assert refused.value.differences == [
        f"identity.settings.max_num_seqs: the profile's engine had 99, this engine has "
        f"{sdbench_engine.max_num_seqs}"]
    assert sdbench_engine.usable


@pytest.mark.slow
def test_sdbench_fidelity_runs_end_to_end_on_the_tiny_preset(tmp_path):
    """The acceptance's CPU command: collect a small profile, then the fidelity run on an
    engine the command rebuilds from it; everything lands in one folder."""
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(small_grid(3)))
    cli = [sys.executable, "-m", "pytest_sdbench.cli"]
    collected = subprocess.run([*cli, "collect", "--preset", "tiny", "--grid", str(grid),
                                "--out", str(tmp_path / "out")], capture_output=True, text=True,
                               timeout=900)
    assert collected.returncode == 0, collected.stderr[-2000:]
    (artifact,) = (tmp_path / "out").glob("sdbench-agg-*.json")
    folder = tmp_path / "report"
    served = subprocess.run([*cli, "fidelity", str(artifact), "--rate", "2", "--duration", "3",
                             "--input-len", "48-160", "--output-len", "6-16",
                             "--warmup-requests", "2", "--out", str(folder)],
                            capture_output=True, text=True, timeout=900)
    assert served.returncode == 0, served.stderr[-2000:]
    assert f"wrote {folder / 'fidelity.md'}" in served.stdout
    assert "engine started" in served.stderr
    for name in ("fidelity.md", "fidelity.json", "steps.csv", "fidelity-run.json",
                 "profile.json", "fidelity-steps.png", "fidelity-errors.png", "fidelity-e2e.png"):
        assert (folder / name).is_file(), name
    figures = json.loads((folder / "fidelity.json").read_text())
    assert figures["profile"]["run_id"] == json.loads(artifact.read_text())["run_id"]
    assert set(figures["models"]["tiny"][OURS]) == {"prefill", "decode", "mixed", "all"}
    print(served.stdout)
