"""`sdbench compare` as a gate, on constructed variants of a real CPU artifact (the v6
fixture, 3 rounds, two phases, read in the current shape as the legacy reader gives it; the
v7 fixture where mixed points are compared): the noise rule (the dispersion across rounds,
floored by the phase's typical CV), noise it cannot judge (one round, back-to-back repeats,
legacy) unless --noise-floor states it, a host that ran slower told from a regression,
missing points, partial status, another mode, contention, each phase apart (mixed points
matched by their coordinates and judged as the others), the output formats (one set of
columns), and exit codes 0 / 1 / 2. The gate on real collections of the engine:
test_compare_gate.py."""

import csv
import dataclasses
import io
import json
import math
import re
import statistics
from types import SimpleNamespace

import pytest

from pytest_sdbench.artifact.build import summaries as summarize_points
from pytest_sdbench.artifact.validate.report import validate_data
from pytest_sdbench.cli import main
from pytest_sdbench.readers.compare import (
    COLUMNS,
    HOST_SLOWER,
    IMPROVED,
    MISSING_IN_CANDIDATE,
    NOISE_UNKNOWN,
    NOISE_Z,
    OK,
    REGRESSED,
    compare,
    median_noise,
)
from pytest_sdbench.readers.compare_render import LABELS, render
from pytest_sdbench.wire import typed
from pytest_sdbench.wire.contract import (
    CANARY_WORKLOAD,
    MEDIAN_SE_FACTOR,
    MIN_ROUNDS_FOR_NOISE,
    REPEAT_BACK_TO_BACK,
)
from pytest_sdbench.wire.model import (
    Artifact,
    DecodeObservation,
    MixedObservation,
    RunEnvironment,
    SkippedPoint,
)
from pytest_sdbench.wire.rounds import canary_readings, canary_spread

from . import forge
from .conftest import FIXTURES

REAL = FIXTURES / "cpu-agg-v6.json"
MIXED = FIXTURES / "cpu-agg-v7.json"   # 8 prefill, 4 decode and 3 mixed points, 3 rounds
LEGACY = FIXTURES / "cpu-agg-v4.json"


def _read(path) -> Artifact:
    """An artifact in the current shape (a legacy one as the validator upgrades it)."""
    report = validate_data(json.loads(path.read_text()))
    assert report.ok, report.errors
    assert report.artifact is not None
    return report.artifact


def _real(path=REAL) -> Artifact:
    """The fixture as a quiet host would have recorded it. It ran beside other sessions'
    work on a shared 2-core host (a contended side the gate rightly refuses:
    test_a_contended_side_fails_the_gate_naming_only_that); the rules under
    test here are about rounds and hosts, so the constructed variants start uncontended."""
    a = _read(path)
    assert a.environment is not None
    return dataclasses.replace(a, environment=dataclasses.replace(
        a.environment, other_cpu_cores=0.0, contended=False, reason=None))


def _rebuilt(a: Artifact, seconds=None, canary=None, rounds: int | None = None) -> Artifact:
    """`a` with each observation's time `seconds(o)`, each canary reading's python time
    `canary(i, reading)` (i: its place in time order), and only its first `rounds` rounds;
    everything derived recomputed by the wire format's and the builder's own definitions."""
    keep = len(a.rounds) if rounds is None else rounds

    def retimed(o):
        return o if seconds is None else dataclasses.replace(
            o, timing=dataclasses.replace(o.timing, seconds=seconds(o)))
    prefill = tuple(retimed(o) for o in a.prefill if o.round < keep)
    decode = tuple(retimed(o) for o in a.decode if o.round < keep)
    mixed = tuple(retimed(o) for o in a.mixed if o.round < keep)
    place = iter(range(2 * keep))

    def reread(sample):
        return sample if canary is None or sample is None else dataclasses.replace(
            sample, python_seconds=canary(next(place), sample))
    kept = tuple(dataclasses.replace(r, canary_before=reread(r.canary_before),
                                     canary_after=reread(r.canary_after))
                 for r in a.rounds[:keep])
    policy = a.measurement_policy if rounds is None else dataclasses.replace(
        a.measurement_policy, repeats=keep)
    result = SimpleNamespace(prefill=prefill, decode=decode, mixed=mixed,
                             repeats=policy.repeats, until_pinned=policy.until_pinned,
                             rounds=kept)
    return dataclasses.replace(
        a, prefill=prefill, decode=decode, mixed=mixed, rounds=kept,
        measurement_policy=policy, summaries=summarize_points(result),
        host_canary=canary_spread(CANARY_WORKLOAD, canary_readings(kept)),
        measured_seconds=math.fsum(o.timing.seconds for o in (*prefill, *decode, *mixed)))


def _medians(a: Artifact) -> dict[tuple[str, int], float]:
    return {(s.phase, s.point_index): s.median_seconds for s in a.summaries}


def _phase(o) -> str:
    return "mixed" if isinstance(o, MixedObservation) else \
        "decode" if isinstance(o, DecodeObservation) else "prefill"


def _controlled(factors=(0.98, 1.0, 1.02), scale=1.0, canary_ms=1.0, where=None,
                base: Artifact | None = None) -> Artifact:
    """The real artifact with known dispersion: each point's sample of round r is its real
    median x factors[r] (x scale, for the points `where(phase, index)` selects, all by
    default), each canary reading canary_ms (+-1%, alternating)."""
    a = base or _real()
    medians = _medians(a)

    def seconds(o):
        chosen = where is None or where(_phase(o), o.point_index)
        return medians[(_phase(o), o.point_index)] * factors[o.round] * (scale if chosen
                                                                         else 1.0)
    return _rebuilt(a, seconds=seconds,
                    canary=lambda i, _: canary_ms * 1e-3 * (0.99 if i % 2 else 1.01))


def _without_point(a: Artifact, phase: str, index: int) -> Artifact:
    """The artifact a collection that lost one point writes: skipped, status partial."""
    gone = _rebuilt(dataclasses.replace(a, **{phase: tuple(
        o for o in getattr(a, phase) if o.point_index != index)}))
    coverage = dataclasses.replace(
        a.coverage, completed=a.coverage.completed - 1, skipped=a.coverage.skipped + 1,
        skipped_points=(*a.coverage.skipped_points,
                        SkippedPoint(phase, index, "not reached: KeyboardInterrupt")))
    return dataclasses.replace(gone, coverage=coverage, status="partial")


def _data(a: Artifact) -> dict:
    data = typed.encode(a)
    forge.retime(data)   # timed and elapsed at least the measured sum, as a collection's
    return data


def _write(tmp_path, name: str, a: Artifact):
    path = tmp_path / name
    path.write_text(json.dumps(_data(a)))
    return path


def _noise_pct(a: Artifact) -> dict[tuple[str, int], float]:
    """Each point's noise bound in percent for `a` against a copy of itself scaled in time
    (same CVs, same rounds), written out here from the rule the module states: NOISE_Z *
    MEDIAN_SE_FACTOR * sqrt(2 cv^2 / n), cv raised to its phase's median CV."""
    typical = {phase: statistics.median(s.cv for s in a.summaries if s.phase == phase)
               for phase in {s.phase for s in a.summaries}}
    return {(s.phase, s.point_index): 100 * NOISE_Z * MEDIAN_SE_FACTOR * math.sqrt(
        2 * max(s.cv, typical[s.phase]) ** 2 / s.samples) for s in a.summaries}


@pytest.mark.parametrize("within", [True, False], ids=["within-noise", "beyond-noise"])
def test_the_real_fixture_against_a_slower_copy_of_itself(capsys, tmp_path, within):
    """The noise rule on two different files: the real fixture, and the same run with every
    step slower by half the smallest point's noise bound (passes: every point within its
    noise), or by twice the largest (fails: every point regressed)."""
    data = json.loads(REAL.read_text())
    assert validate_data(data).ok
    assert len(data["rounds"]) >= MIN_ROUNDS_FOR_NOISE
    assert not data["environment"]["contended"]
    base = _read(REAL)
    noise = _noise_pct(base)
    slower = 0.5 * min(noise.values()) if within else 2.0 * max(noise.values())
    cand = _write(tmp_path, "slower.json", _rebuilt(
        base, seconds=lambda o: o.timing.seconds * (1 + slower / 100)))
    assert main(["compare", str(REAL), str(cand)]) == (0 if within else 1)
    out = capsys.readouterr().out
    if within:
        assert out.rstrip().splitlines()[-1].startswith("PASS: no point slower beyond its noise")
        assert "0 regressed" in out
    else:
        assert f"FAIL: {len(noise)} point(s) regressed" in out, out


def test_a_contended_side_fails_the_gate_naming_only_that(capsys, tmp_path):
    data = json.loads(REAL.read_text())
    reason = "other processes used 0.89 CPU cores on average (threshold 0.5)"
    data["environment"].update(other_cpu_cores=0.89, contended=True, reason=reason)
    contended = tmp_path / "contended.json"
    contended.write_text(json.dumps(data))
    assert main(["compare", str(REAL), str(contended)]) == 1
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == (
        f"FAIL: 1 problem(s): candidate: ran contended ({reason})")
    assert "0 regressed" in out


@pytest.mark.parametrize("variant", [
    lambda: _rebuilt(_real(), seconds=lambda o: o.timing.seconds * 1.5),
    lambda: _rebuilt(_real(), rounds=1),
    lambda: _controlled(),
    lambda: _controlled(scale=2.0, canary_ms=1.3),
    lambda: _without_point(_real(), "decode", 2),
], ids=["scaled", "one-round", "controlled", "slower-host", "partial"])
def test_the_constructed_variants_are_valid_artifacts(variant):
    report = validate_data(_data(variant()))
    assert report.ok, report.errors


def test_identical_artifacts_pass_and_state_the_rules(tmp_path, capsys):
    quiet = _write(tmp_path, "quiet.json", _real())
    assert main(["compare", str(quiet), str(quiet)]) == 0
    out = capsys.readouterr().out
    assert "prefill: 8/8 points compared, median change +0.0%, 0 regressed" in out
    assert "decode: 4/4 points compared, median change +0.0%, 0 regressed" in out
    assert f"noise rule: with >= {MIN_ROUNDS_FOR_NOISE} rounds on both sides" in out
    assert f"z = {NOISE_Z:g}" in out
    assert "the hosts ran alike" in out
    assert "baseline repeats: 3 round(s) of the grid" in out
    assert out.rstrip().endswith("PASS: no point slower beyond its noise and 0% (12 points)")


def test_the_noise_is_the_dispersion_across_rounds():
    base = _controlled((0.95, 1.0, 1.05))
    cv = statistics.stdev((0.95, 1.0, 1.05)) / 1.0
    want = 100 * NOISE_Z * MEDIAN_SE_FACTOR * math.sqrt(2 * cv ** 2 / 3)
    assert want == pytest.approx(100 * median_noise(NOISE_Z, cv, 3, cv, 3))
    within = compare(base, _controlled((0.95, 1.0, 1.05), scale=1 + (want - 2) / 100))
    assert {p.noise_source for p in within.points} == {"rounds"}
    assert all(p.noise_pct == pytest.approx(want, abs=0.01) for p in within.points)
    assert {p.verdict for p in within.points} == {OK}
    assert not within.failed
    beyond = compare(base, _controlled((0.95, 1.0, 1.05), scale=1 + (want + 2) / 100))
    assert {p.verdict for p in beyond.points} == {REGRESSED}
    assert beyond.failed
    faster = compare(base, _controlled((0.95, 1.0, 1.05), scale=1 - (want + 2) / 100))
    assert {p.verdict for p in faster.points} == {IMPROVED}
    assert not faster.failed


def test_a_point_whose_samples_happen_to_agree_is_judged_by_its_phases_typical_cv():
    """decode[1]'s three samples agree exactly (CV 0): alone they would make a 5% change a
    regression; its phase's typical CV (10%) is its noise instead."""
    real = _real()
    medians = _medians(real)

    def lucky(scale: float) -> Artifact:
        def seconds(o):
            factor = 1.0 if (_phase(o), o.point_index) == ("decode", 1) else \
                (0.9, 1.0, 1.1)[o.round]
            return medians[(_phase(o), o.point_index)] * factor * (
                scale if (_phase(o), o.point_index) == ("decode", 1) else 1.0)
        return _rebuilt(real, seconds=seconds, canary=lambda i, _: 1e-3)
    result = compare(lucky(1.0), lucky(1.05))
    (point,) = [p for p in result.points if p.phase == "decode" and p.coordinates.startswith(
        "B=1 ctx=512")]
    assert point.base_cv_pct == point.cand_cv_pct == 0.0
    assert result.typical_cv_pct["decode"] == {"baseline": 10.0, "candidate": 10.0}
    assert point.noise_pct == pytest.approx(100 * median_noise(NOISE_Z, 0.1, 3, 0.1, 3),
                                            abs=0.01)
    assert point.verdict == OK
    assert not result.failed


def test_fewer_rounds_cannot_judge_noise_unless_a_floor_is_stated(tmp_path, capsys):
    one = _write(tmp_path, "one-round.json", _rebuilt(_real(), rounds=1))
    three = _write(tmp_path, "three-rounds.json", _real())
    assert main(["compare", str(one), str(three)]) == 1
    out = capsys.readouterr().out
    assert "problem: cannot judge noise: the baseline took 1 round(s)." in out
    assert f"collect each with --repeats {MIN_ROUNDS_FOR_NOISE} or more" in out
    assert "--noise-floor PCT" in out
    result = compare(_rebuilt(_real(), rounds=1), _real())
    assert {p.verdict for p in result.points} == {NOISE_UNKNOWN}
    assert main(["compare", str(one), str(three), "--noise-floor", "500"]) == 0
    out = capsys.readouterr().out
    assert "cannot judge" not in out
    assert "500.0%  floor" in out
    # a legacy (v4) artifact and back-to-back repeats alike
    assert main(["compare", str(LEGACY), str(LEGACY)]) == 1
    assert "the baseline is a legacy artifact (repeats taken back to back, no rounds)" in \
        capsys.readouterr().out
    assert main(["compare", str(LEGACY), str(LEGACY), "--noise-floor", "35"]) == 0
    capsys.readouterr()
    real = _real()
    back_to_back = dataclasses.replace(real, measurement_policy=dataclasses.replace(
        real.measurement_policy, repeat_order=REPEAT_BACK_TO_BACK, order_seed=None))
    (problem,) = compare(real, back_to_back).problems
    assert problem.startswith("cannot judge noise: the candidate took its repeats back to "
                              "back")


def test_a_host_that_ran_slower_is_told_from_a_regression(tmp_path, capsys):
    """Samples +-2% (noise ~7%); the candidate's canary 30% slower: a point 25% slower is
    host_slower (the gate passes and says why); one 60% slower is regressed."""
    base = _write(tmp_path, "base.json", _controlled())
    host = _write(tmp_path, "host.json", _controlled(scale=1.25, canary_ms=1.3))
    assert main(["compare", str(base), str(host)]) == 0
    out = capsys.readouterr().out
    assert "python loop 1.000 -> 1.300 ms (+30.0%" in out
    assert "the candidate's host ran slower by 30.0%" in out
    assert "12 point(s) host_slower" in out
    assert out.rstrip().splitlines()[-1].startswith("PASS")
    result = compare(typed.decode(Artifact, json.loads(base.read_text())),
                     typed.decode(Artifact, json.loads(host.read_text())))
    assert {p.verdict for p in result.points} == {HOST_SLOWER}
    assert result.host.slowdown_pct == pytest.approx(30.0)
    worse = _write(tmp_path, "worse.json", _controlled(
        scale=1.6, canary_ms=1.3, where=lambda phase, i: phase == "decode" and i == 3))
    assert main(["compare", str(base), str(worse)]) == 1
    out = capsys.readouterr().out
    assert "FAIL: 1 point(s) regressed (decode B=4 ctx=512 K=3 AL=natural +60.0%)" in out
    # the same 25% on a host that ran alike: a regression
    alike = _write(tmp_path, "alike.json", _controlled(scale=1.25))
    assert main(["compare", str(base), str(alike)]) == 1
    assert "the hosts ran alike" in capsys.readouterr().out


def test_a_side_whose_host_changed_speed_within_its_collection_is_named(tmp_path, capsys):
    """The candidate's canary medians agree with the baseline's while a third of its readings
    ran at 1.8x (a two-speed host): the host line says the candidate changed speed, beside
    verdicts it leaves as they are; a steady pair says nothing of it."""
    base = _controlled()
    two_speed = _rebuilt(_controlled(), canary=lambda i, _: 1e-3 * (1.8 if i % 3 == 0 else 1.0))
    result = compare(base, two_speed)
    (said,) = result.host.unsteady
    assert said.startswith("candidate's canary CV ")
    assert said.endswith("> 10%")
    assert not result.host.workloads[0].slower
    assert not result.failed
    assert "the hosts ran alike (within the canary's noise); but the host changed speed " \
        "within a collection (candidate's canary CV" in result.host.line()
    assert main(["compare", str(_write(tmp_path, "b.json", base)),
                 str(_write(tmp_path, "c.json", two_speed)), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["host"]["unsteady"] == [said]
    assert compare(base, _controlled()).host.unsteady == ()


def test_fail_above_raises_the_bar_over_the_noise():
    base, slower = _controlled(), _controlled(scale=1.5)
    assert compare(base, slower).failed
    assert not compare(base, slower, fail_above_pct=60).failed


def test_a_partial_candidate_fails_and_names_the_missing_point(tmp_path, capsys):
    partial = _write(tmp_path, "partial.json", _without_point(_real(), "decode", 2))
    assert main(["compare", str(_write(tmp_path, "base.json", _real())), str(partial)]) == 1
    out = capsys.readouterr().out
    assert "candidate: status partial (11/12 points measured)" in out
    assert ("decode B=4 ctx=128 K=3 AL=natural: missing in the candidate (not reached: "
            "KeyboardInterrupt)") in out
    result = compare(_real(), _without_point(_real(), "decode", 2))
    (missing,) = [p for p in result.points if p.verdict == MISSING_IN_CANDIDATE]
    assert missing.phase == "decode"
    assert missing.coordinates == "B=4 ctx=128 K=3 AL=natural"


def test_another_mode_or_k_is_named():
    base = _real()
    decode_only = dataclasses.replace(base, mode="decode", prefill=(), summaries=tuple(
        s for s in base.summaries if s.phase == "decode"))
    result = compare(base, decode_only)
    assert "mode differs: baseline agg, candidate decode" in result.problems
    assert sum("missing in the candidate" in p for p in result.problems) == 8
    other_k = dataclasses.replace(base, speculative=dataclasses.replace(base.speculative,
                                                                        draft_depth=4))
    assert "draft depth K differs: baseline 3, candidate 4" in compare(base, other_k).problems


def test_a_contended_or_unknown_environment_fails_the_gate():
    base = _real()
    contended = dataclasses.replace(base, environment=RunEnvironment(
        cpu_count=2, other_cpu_cores=1.0, other_sdbench_engines=1, other_gpu_processes=None,
        contended=True, reason="1 other sdbench engine(s) alive on this host"))
    result = compare(base, contended)
    assert result.failed
    assert result.problems == [
        "candidate: ran contended (1 other sdbench engine(s) alive on this host)"]
    unknown = dataclasses.replace(base, environment=None)
    assert compare(unknown, base).problems == [
        "baseline: no run environment recorded (legacy artifact), so contention is unknown"]


def test_every_format_carries_the_same_columns_and_verdicts(tmp_path, capsys):
    base = _write(tmp_path, "base.json", _controlled())
    cand = _write(tmp_path, "cand.json", _without_point(_controlled(
        scale=1.5, where=lambda phase, i: phase == "prefill" and i == 0), "decode", 2))
    outputs = {}
    for fmt in ("text", "markdown", "csv", "json"):
        assert main(["compare", str(base), str(cand), "--format", fmt]) == 1
        outputs[fmt] = capsys.readouterr().out
    report = json.loads(outputs["json"])
    assert report["verdict"] == "fail"
    assert [list(p) for p in report["points"]] == [list(COLUMNS)] * 12
    assert report["phases"]["decode"]["missing"] == 1
    assert report["host"]["slowdown_pct"] == 0.0
    assert report["noise_z"] == NOISE_Z
    rows = list(csv.DictReader(io.StringIO(outputs["csv"])))
    assert tuple(rows[0]) == COLUMNS
    points = [r for r in rows if r["phase"] in ("prefill", "decode")]
    assert [r["verdict"] for r in points] == [p["verdict"] for p in report["points"]]
    assert [r["note"] for r in rows if r["phase"] == "gate"] == report["problems"]
    assert [r["phase"] for r in rows if r["phase"] not in ("prefill", "decode")] == \
        ["host", *["gate"] * len(report["problems"])]
    header = [LABELS[c] for c in COLUMNS if c != "phase"]
    assert "| " + " | ".join(header) + " |" in outputs["markdown"]
    (text_header, *_) = [line for line in outputs["text"].splitlines()
                         if line.startswith(header[0])]
    assert re.split(r"\s{2,}", text_header) == header
    for p in report["points"]:
        for fmt in ("text", "markdown"):
            assert p["verdict"] in outputs[fmt]
    regressed = [p for p in report["points"] if p["verdict"] == REGRESSED]
    assert [(p["phase"], p["coordinates"]) for p in regressed] == [
        ("prefill", "B=1 new=64 prefix=0")]
    for fmt in ("text", "markdown"):
        assert report["verdict_line"] in outputs[fmt]
    assert outputs["markdown"].rstrip().endswith("**")


def test_unusable_input_exits_2(tmp_path, capsys):
    (tmp_path / "text.json").write_text("not json")
    assert main(["compare", str(REAL), str(tmp_path / "text.json")]) == 2
    assert main(["compare", str(tmp_path / "absent.json"), str(REAL)]) == 2
    broken = json.loads(REAL.read_text())
    broken["decode"][0]["timing"]["source"] = "cuda_event"
    assert main(["compare", str(REAL), str(_write_dict(tmp_path, "bad.json", broken))]) == 2
    assert "is not a valid artifact" in capsys.readouterr().err


def _write_dict(tmp_path, name: str, data: dict):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_render_text_lists_prefill_and_decode_apart():
    text = render(compare(_controlled(), _controlled(
        scale=1.5, where=lambda phase, i: phase == "decode")))
    prefill, decode = text.index("prefill:"), text.index("decode:")
    assert prefill < decode
    assert "prefill: 8/8 points compared, median change +0.0%, 0 regressed" in text
    assert "decode: 4/4 points compared, median change +50.0%, 4 regressed" in text


def test_a_pair_drawn_from_one_order_seed_is_named():
    """Both sides measured in the same order (one seed): the candidate's lines say so; a
    pair of different seeds says nothing of it."""
    base = _real()
    same = compare(base, base).sides["candidate"]
    assert same[-1] == (f"order: the baseline's seed ({base.measurement_policy.order_seed}) "
                        "too: both sides measured their points in the same order; collect "
                        "one with another --order-seed")
    other = dataclasses.replace(base, measurement_policy=dataclasses.replace(
        base.measurement_policy, order_seed=base.measurement_policy.order_seed + 1))
    assert not any(line.startswith("order:") for line in compare(base, other).sides["candidate"])


# ---- mixed points (the v7 fixture) ---------------------------------------------------------

MIXED_1 = "Bd=4 ctx=256 K=3 AL=natural + Bp=2 new=96 prefix=64"   # mixed point 1


def _without_mixed(a: Artifact) -> Artifact:
    """The same collection as if no mixed point had been asked for (agg, two phases)."""
    return _rebuilt(dataclasses.replace(
        a, grid=dataclasses.replace(a.grid, mixed=()), mixed=(),
        measurement_policy=dataclasses.replace(a.measurement_policy, mixed=None)))


def test_mixed_points_are_matched_by_their_coordinates_and_judged_as_the_others(
        tmp_path, capsys):
    """Each mixed point is keyed by its decode batch (batch, context, K, AL) and its prefills
    (batch, new tokens, prefix); one 50% slower is regressed and named, the others stay
    within their noise, and the mixed phase is summarised apart in every format."""
    real = _real(MIXED)
    base = _controlled(base=real)
    cand = _controlled(scale=1.5, where=lambda phase, i: phase == "mixed" and i == 1,
                       base=real)
    result = compare(base, cand)
    assert len(result.points) == 15
    mixed = [p for p in result.points if p.phase == "mixed"]
    assert [p.coordinates for p in mixed] == [   # in the order of their keys
        "Bd=1 ctx=512 K=3 AL=natural + Bp=1 new=256 prefix=0",
        "Bd=2 ctx=128 K=3 AL=natural + Bp=1 new=64 prefix=0", MIXED_1]
    assert [p.verdict for p in mixed] == [OK, OK, REGRESSED]
    assert {p.verdict for p in result.points if p.phase != "mixed"} == {OK}
    assert result.phase_summary("mixed")["regressed"] == 1
    assert result.verdict_line().startswith(f"FAIL: 1 point(s) regressed (mixed {MIXED_1} "
                                            "+50.0%)")
    text = render(result)
    assert "mixed: 3/3 points compared, median change +0.0%, 1 regressed" in text
    assert text.index("prefill:") < text.index("decode:") < text.index("mixed:")
    assert json.loads(render(result, "json"))["phases"]["mixed"]["points"] == 3
    assert main(["compare", str(_write(tmp_path, "b.json", base)),
                 str(_write(tmp_path, "c.json", cand))]) == 1
    out = capsys.readouterr().out
    assert "mixed: 3/3 points compared, median change +0.0%, 1 regressed" in out
    assert out.rstrip().splitlines()[-1].startswith(
        f"FAIL: 1 point(s) regressed (mixed {MIXED_1} +50.0%)")


def test_mixed_points_on_one_side_only_are_missing_on_the_other():
    """An agg collection with mixed points against one without: each mixed point is missing
    in the side that has none (the gate fails naming it); prefill and decode are judged."""
    real = _real(MIXED)
    result = compare(real, _without_mixed(real))
    assert result.failed
    missing = [p for p in result.problems if "missing in the candidate" in p]
    assert len(missing) == 3
    assert f"mixed {MIXED_1}: missing in the candidate (not in its grid)" in missing
    assert {p.verdict for p in result.points if p.phase == "mixed"} == {MISSING_IN_CANDIDATE}
    assert all(p.verdict == OK for p in result.points if p.phase != "mixed")


def test_a_mixed_points_key_is_all_its_coordinates():
    from pytest_sdbench.readers.compare_sides import point_key
    from pytest_sdbench.wire.points import MixedPoint
    point = MixedPoint(decode_batch_size=4, context_tokens=256, draft_depth=3,
                       prefill_batch_size=2, prefill_tokens=96, cached_prefix_tokens=64)
    keys = {point_key("mixed", dataclasses.replace(point, **change)) for change in (
        {}, {"decode_batch_size": 2}, {"context_tokens": 512}, {"draft_depth": 2},
        {"acceptance_length": 2.5}, {"prefill_batch_size": 1}, {"prefill_tokens": 64},
        {"cached_prefix_tokens": 0})}
    assert len(keys) == 8
