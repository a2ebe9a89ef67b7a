"""`sdbench fidelity PROFILE` with its defaults draws its workload from what the profile
covers (fidelity/coverage.py), or refuses in one line saying what it does not cover. Issue
38: on the Quickstart's profile the defaults (Poisson at 4 rps, prompts 128-1024) priced 2
of 688 steps. The engine test runs the CLI with its defaults on the real CPU fixture, whose
grid is the Quickstart's (`sdbench collect --mode agg`: the tiny preset's 12 points), and
asks for at least 90% of the steps priced by our interpolation."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sdbench.artifact import validate_path
from pytest_sdbench.fidelity.command import add_cli_args, workloads_from
from pytest_sdbench.fidelity.coverage import coverage, covered_workload
from pytest_sdbench.fidelity.workload import Lengths, WorkloadError, plan

PROFILE = Path(__file__).parent / "fixtures" / "cpu-agg-v6.json"


@pytest.fixture(scope="module")
def artifact():
    return validate_path(PROFILE).artifact


def _args(*argv: str):
    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    return parser.parse_args([str(PROFILE), *argv])


def test_the_default_workload_lies_within_what_the_profile_measured(artifact):
    cover = coverage(artifact)
    assert cover.batches == (1, 4)
    (workload,) = workloads_from(_args(), artifact)
    assert workload == covered_workload(artifact)
    assert workload.arrival == "concurrency"
    assert workload.concurrency == max(cover.batches)
    low, high = cover.context
    for r in plan(workload):
        assert low <= r.input_tokens
        assert cover.prompt[0] <= r.input_tokens <= cover.prompt[1]
        assert r.input_tokens + r.output_tokens + cover.draft_depth + 1 <= high


def test_what_the_user_gives_is_kept(artifact):
    (w,) = workloads_from(_args("--input-len", "150", "--requests", "5"), artifact)
    assert (w.input_tokens, w.requests) == (Lengths(150, 150), 5)
    (w,) = workloads_from(_args("--rate", "2", "--duration", "3"), artifact)
    assert (w.arrival, w.rate, w.duration_seconds) == ("poisson", 2.0, 3.0)
    assert w.input_tokens == covered_workload(artifact).input_tokens


def test_a_profile_without_decode_points_is_refused_in_one_line(artifact):
    prefill_only = dataclasses.replace(artifact, decode=[])
    with pytest.raises(WorkloadError) as caught:
        workloads_from(_args(), prefill_only)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("the profile (mode agg) covers no decode step")
    assert "--concurrency" in text


def test_contexts_too_narrow_for_any_request_are_refused_naming_them(artifact):
    narrow = dataclasses.replace(artifact, decode=[o for o in artifact.decode
                                                   if o.point.context_tokens == 128])
    with pytest.raises(WorkloadError, match=r"^the profile covers decode contexts 129-129 per "
                       r"request \(at every batch of \[1, 4\]\) and prompts 64-256 "
                       r"\(prefill at batch 1\): no request fits both; give --input-len and "
                       r"--output-len$"):
        workloads_from(_args(), narrow)


@pytest.mark.sdbench_engine
def test_fidelity_with_its_defaults_prices_most_steps_of_the_quickstarts_profile(tmp_path):
    out = tmp_path / "report"
    result = subprocess.run([sys.executable, "-m", "pytest_sdbench.cli", "fidelity",
                             str(PROFILE), "--out", str(out), "--no-plots"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads((out / "fidelity.json").read_text())
    (model,) = figures["models"].values()
    everything = model["ours"]["all"]
    assert everything["steps"] > 100
    share = everything["priced_steps"] / everything["steps"]
    assert share >= 0.9, (share, everything.get("unpriced"))
