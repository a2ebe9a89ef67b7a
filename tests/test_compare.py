"""`sdbench compare` as a gate, on constructed variants of a real CPU artifact: the noise
rule (stated floor for single samples, the repeats' spread otherwise), missing points,
partial status, another mode, contention, prefill and decode apart, the output formats, and
exit codes 0 / 1 / 2."""

import copy
import csv
import dataclasses
import io
import json

import pytest

from pytest_sdbench.artifact import validate_data
from pytest_sdbench.cli import main
from pytest_sdbench.compare import (
    IMPROVED,
    MISSING_IN_CANDIDATE,
    NOISE_FLOOR_PCT,
    OK,
    REGRESSED,
    compare,
    render,
)
from pytest_sdbench.wire import typed
from pytest_sdbench.wire.model import Artifact, RunEnvironment

from .conftest import FIXTURES

REAL = FIXTURES / "cpu-agg-v4.json"


def _data() -> dict:
    return json.loads(REAL.read_text())


def _write(tmp_path, name: str, data: dict):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _scaled(data: dict, factor: float, phase: str | None = None, index: int | None = None):
    out = copy.deepcopy(data)
    for ph in ("prefill", "decode"):
        for o in out[ph]:
            if (phase in (None, ph)) and index in (None, o["point_index"]):
                o["timing"]["seconds"] *= factor
        for s in out["summaries"]:
            if s["phase"] == ph and (phase in (None, ph)) and index in (None, s["point_index"]):
                for key in ("median_seconds", "mean_seconds", "min_seconds", "max_seconds"):
                    s[key] *= factor
    # the validator holds measured_seconds to the sum of the retained steps (timed_seconds,
    # 3.5 s in the fixture, still covers the 0.2 s of steps at 1.5x)
    out["measured_seconds"] = sum(o["timing"]["seconds"] for ph in ("prefill", "decode")
                                  for o in out[ph])
    return out


def _without_point(data: dict, phase: str, index: int) -> dict:
    """The artifact a collection that lost one point writes: the point skipped, status
    partial; it still validates."""
    out = copy.deepcopy(data)
    out[phase] = [o for o in out[phase] if o["point_index"] != index]
    out["summaries"] = [s for s in out["summaries"]
                        if (s["phase"], s["point_index"]) != (phase, index)]
    cov = out["coverage"]
    cov["skipped_points"].append({"phase": phase, "point_index": index,
                                  "reason": "not reached: KeyboardInterrupt"})
    cov["completed"] -= 1
    cov["skipped"] += 1
    out["status"] = "partial"
    out["measured_seconds"] = sum(o["timing"]["seconds"] for ph in ("prefill", "decode")
                                  for o in out[ph])
    return out


def _artifact(data: dict) -> Artifact:
    return typed.decode(Artifact, data)


def test_the_constructed_partial_candidate_is_a_valid_artifact():
    report = validate_data(_without_point(_data(), "decode", 2))
    assert report.ok, report.errors
    assert report.artifact.status == "partial"


@pytest.mark.parametrize("factor", [1.5, 0.5])
def test_the_constructed_scaled_candidates_are_valid_artifacts(factor):
    report = validate_data(_scaled(_data(), factor))
    assert report.ok, report.errors


def test_identical_artifacts_pass_and_state_the_noise_rule(capsys):
    assert main(["compare", str(REAL), str(REAL)]) == 0
    out = capsys.readouterr().out
    assert "prefill: 8/8 points compared, median change +0.0%, 0 regressed" in out
    assert "decode: 4/4 points compared, median change +0.0%, 0 regressed" in out
    assert "noise rule:" in out
    assert "stated floor" in out
    assert out.rstrip().endswith("PASS: no point slower beyond its noise and 0% (12 points)")


def test_single_samples_are_judged_against_the_stated_floor(tmp_path, capsys):
    floor = NOISE_FLOOR_PCT["cpu"]
    within = _write(tmp_path, "within.json", _scaled(_data(), 1 + (floor - 5) / 100,
                                                     "decode", 1))
    assert main(["compare", str(REAL), str(within)]) == 0
    assert "(floor)" in capsys.readouterr().out
    # The same change against a stated floor of 10%: a regression, named.
    assert main(["compare", str(REAL), str(within), "--noise-floor", "10"]) == 1
    out = capsys.readouterr().out
    assert "B=1 ctx=512 K=3 AL=natural" in out
    assert "regressed" in out
    assert "FAIL: 1 point(s) regressed" in out


def test_a_regression_beyond_the_noise_fails_and_an_improvement_does_not(tmp_path, capsys):
    slower = _write(tmp_path, "slower.json", _scaled(_data(), 1.5))
    assert main(["compare", str(REAL), str(slower)]) == 1
    out = capsys.readouterr().out
    assert "FAIL: 12 point(s) regressed" in out
    assert "prefill: 8/8 points compared, median change +50.0%, 8 regressed" in out
    faster = _write(tmp_path, "faster.json", _scaled(_data(), 0.5))
    assert main(["compare", str(REAL), str(faster)]) == 0
    assert "12 improved" not in capsys.readouterr().out  # per phase: 8 and 4
    result = compare(_artifact(_data()), _artifact(_scaled(_data(), 0.5)))
    assert {p.verdict for p in result.points} == {IMPROVED}


def test_fail_above_raises_the_bar_over_the_noise(tmp_path, capsys):
    slower = _write(tmp_path, "slower.json", _scaled(_data(), 1.5))
    assert main(["compare", str(REAL), str(slower), "--fail-above", "60"]) == 0
    assert "PASS" in capsys.readouterr().out


def _with_repeats(data: dict, factors: tuple[float, ...]) -> Artifact:
    """The artifact with each observation repeated at the given factors of its time."""
    a = _artifact(data)
    def spread(observations):
        return tuple(dataclasses.replace(o, repeat=r, timing=dataclasses.replace(
            o.timing, seconds=o.timing.seconds * f)) for o in observations
            for r, f in enumerate(factors))
    return dataclasses.replace(a, prefill=spread(a.prefill), decode=spread(a.decode))


def test_with_repeats_the_measured_spread_is_the_noise():
    base = _with_repeats(_data(), (0.98, 1.0, 1.02))     # 4% spread
    steady = _with_repeats(_data(), (1.05, 1.07, 1.09))  # +7% > the 4% spread
    result = compare(base, steady)
    assert {p.noise_source for p in result.points} == {"repeats"}
    assert all(p.noise_pct == pytest.approx(4.0, abs=0.01) for p in result.points)
    assert {p.verdict for p in result.points} == {REGRESSED}
    assert result.failed
    noisy = _with_repeats(_data(), (0.9, 1.07, 1.3))     # +7% median, 40% spread
    result = compare(base, noisy)
    assert {p.verdict for p in result.points} == {OK}
    assert not result.failed


def test_a_partial_candidate_fails_and_names_the_missing_point(tmp_path, capsys):
    partial = _write(tmp_path, "partial.json", _without_point(_data(), "decode", 2))
    assert main(["compare", str(REAL), str(partial)]) == 1
    out = capsys.readouterr().out
    assert "candidate: status partial (11/12 points measured)" in out
    assert ("decode B=4 ctx=128 K=3 AL=natural: missing in the candidate (not reached: "
            "KeyboardInterrupt)") in out
    result = compare(_artifact(_data()), _artifact(_without_point(_data(), "decode", 2)))
    (missing,) = [p for p in result.points if p.verdict == MISSING_IN_CANDIDATE]
    assert missing.phase == "decode"
    assert missing.coordinates == "B=4 ctx=128 K=3 AL=natural"


def test_another_mode_device_or_k_is_named():
    base = _artifact(_data())
    decode_only = dataclasses.replace(base, mode="decode", prefill=())
    result = compare(base, decode_only)
    assert "mode differs: baseline agg, candidate decode" in result.problems
    assert sum("missing in the candidate" in p for p in result.problems) == 8
    other_k = dataclasses.replace(base, speculative=dataclasses.replace(base.speculative,
                                                                        draft_depth=4))
    assert "draft depth K differs: baseline 3, candidate 4" in compare(base, other_k).problems


def test_a_contended_or_unknown_environment_fails_the_gate():
    base = _artifact(_data())
    contended = dataclasses.replace(base, environment=RunEnvironment(
        cpu_count=2, other_cpu_cores=1.0, other_sdbench_engines=1, other_gpu_processes=None,
        contended=True, reason="1 other sdbench engine(s) alive on this host"))
    result = compare(base, contended)
    assert result.failed
    assert result.problems == [
        "candidate: ran contended (1 other sdbench engine(s) alive on this host)"]
    legacy = dataclasses.replace(base, environment=None)
    assert compare(legacy, base).problems == [
        "baseline: no run environment recorded (legacy artifact), so contention is unknown"]


def test_output_formats(tmp_path, capsys):
    partial = _write(tmp_path, "partial.json", _without_point(_data(), "decode", 2))
    assert main(["compare", str(REAL), str(partial), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "fail"
    assert report["phases"]["decode"] == {"points": 4, "compared": 3, "median_change_pct": 0.0,
                                          "regressed": 0, "improved": 0, "missing": 1}
    assert len(report["points"]) == 12
    assert "noise rule" in report["noise_rule"]
    assert main(["compare", str(REAL), str(partial), "--format", "csv"]) == 1
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["verdict"] for r in rows].count(MISSING_IN_CANDIDATE) == 1
    gate = [r["note"] for r in rows if r["phase"] == "gate"]
    assert "candidate: status partial (11/12 points measured)" in gate
    assert main(["compare", str(REAL), str(REAL), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| coordinates | base ms | cand ms |" in out
    assert "### decode:" in out
    assert out.rstrip().endswith("**")


def test_unusable_input_exits_2(tmp_path, capsys):
    (tmp_path / "text.json").write_text("not json")
    assert main(["compare", str(REAL), str(tmp_path / "text.json")]) == 2
    assert main(["compare", str(tmp_path / "absent.json"), str(REAL)]) == 2
    broken = _data()
    broken["decode"][0]["timing"]["source"] = "cuda_event"
    assert main(["compare", str(REAL), str(_write(tmp_path, "bad.json", broken))]) == 2
    assert "is not a valid artifact" in capsys.readouterr().err


def test_render_text_lists_prefill_and_decode_apart():
    text = render(compare(_artifact(_data()), _artifact(_scaled(_data(), 1.5, "decode"))))
    prefill, decode = text.index("prefill:"), text.index("decode:")
    assert prefill < decode
    assert "prefill: 8/8 points compared, median change +0.0%, 0 regressed" in text
    assert "decode: 4/4 points compared, median change +50.0%, 4 regressed" in text
