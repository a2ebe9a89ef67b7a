"""`sdbench fidelity` without an engine: the seeded workload, our prediction rule on
constructed profiles, the engine rebuilt from a profile and its identity compared field by
field, the report's figures and files from a constructed run, the refusals made before any
engine starts, and `sdbench plot` linking the report. The engine runs in
test_fidelity_engine.py; AISimulate's side in tests/consumer/test_fidelity_consumer.py."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import pytest

from pytest_sdbench.aisimulate.fidelity import mooncake_rows
from pytest_sdbench.cli import main
from pytest_sdbench.fidelity.predict import Interpolator
from pytest_sdbench.fidelity.predict_mixed import BASIS_RULE
from pytest_sdbench.fidelity.predict_phases import (
    NO_MODE,
    NO_PHASE,
    OFF_BATCH,
    OFF_CACHED,
    OFF_CONTEXT,
    OFF_TOKENS,
    MeasuredPoint,
    interpolate,
    profile_points,
)
from pytest_sdbench.fidelity.report import (
    CONSUMER,
    OURS,
    StepRow,
    consumer_priced,
    error_stats,
    kind_figures,
    percentile,
)
from pytest_sdbench.fidelity.run import load, report
from pytest_sdbench.fidelity.serving_records import ServingRun
from pytest_sdbench.fidelity.workload import (
    Lengths,
    Workload,
    WorkloadError,
    check_fits,
    parse_lengths,
    plan,
)
from pytest_sdbench.readers.beside import reports_beside
from pytest_sdbench.run.profile import (
    EngineMismatch,
    ProfileUnusable,
    check_device,
    check_engine,
    identity_differences,
    preset_of,
    read_profile,
    spec_choices,
)
from pytest_sdbench.wire.identity import IdentityField

from .conftest import FIXTURES
from .fidelity_runs import constructed_run, step
from .forge import BASES

CPU = FIXTURES / "cpu-agg-v4.json"
H200 = BASES["h200-production-v4"]


# ---- the workload ---------------------------------------------------------------------------

def test_a_poisson_plan_is_seeded_and_keeps_its_stated_distribution():
    workload = Workload("poisson", Lengths(100, 300), Lengths(8, 16), seed=5, rate=20.0,
                        duration_seconds=10.0)
    first, again = plan(workload), plan(workload)
    assert first == again
    assert plan(dataclasses.replace(workload, seed=6)) != first
    arrivals = [r.arrival_seconds for r in first]
    assert arrivals == sorted(arrivals)
    assert 0 < arrivals[0]
    assert arrivals[-1] < 10.0
    # 200 arrivals expected (rate x duration); Poisson's spread is sqrt(200) ~ 14
    assert 150 < len(first) < 250, len(first)
    gaps = [b - a for a, b in zip([0.0, *arrivals], arrivals, strict=False)]
    assert abs(statistics.fmean(gaps) - 1 / 20) < 0.01
    assert {r.input_tokens for r in first} <= set(range(100, 301))
    assert {r.output_tokens for r in first} <= set(range(8, 17))
    assert len({r.input_tokens for r in first}) > 50     # drawn, not fixed
    capped = plan(dataclasses.replace(workload, requests=7))
    assert capped == first[:7]


def test_a_fixed_concurrency_plan_has_its_count_and_no_arrival_times():
    planned = plan(Workload("concurrency", Lengths(64, 64), Lengths(4, 4), concurrency=3,
                            requests=5))
    assert [(r.arrival_seconds, r.input_tokens, r.output_tokens) for r in planned] == \
        [(None, 64, 4)] * 5


@pytest.mark.parametrize("make, option", [
    (lambda: Workload("poisson", Lengths(1, 2), Lengths(1, 2), rate=0.0, duration_seconds=1),
     "--rate"),
    (lambda: Workload("poisson", Lengths(1, 2), Lengths(1, 2), rate=1.0), "--duration"),
    (lambda: Workload("concurrency", Lengths(1, 2), Lengths(1, 2), concurrency=2), "--requests"),
    (lambda: Workload("concurrency", Lengths(1, 2), Lengths(1, 2), concurrency=0, requests=1),
     "--concurrency"),
    (lambda: parse_lengths("12-x", "--input-len"), "--input-len"),
    (lambda: parse_lengths("30-20", "--output-len"), "--output-len: lengths: need 1 <= LOW"),
    (lambda: plan(Workload("poisson", Lengths(1, 2), Lengths(1, 2), rate=0.001,
                           duration_seconds=0.001)), "--duration"),
])
def test_a_workload_no_run_could_serve_is_refused_naming_the_option(make, option):
    with pytest.raises(WorkloadError, match=option):
        make()


def test_requests_must_fit_the_profiles_context():
    workload = Workload("poisson", Lengths(100, 4000), Lengths(10, 200), rate=1.0,
                        duration_seconds=1)
    check_fits(workload, 4200, "the profile's")
    with pytest.raises(WorkloadError, match=r"--input-len 100-4000 and --output-len 10-200: "
                                            r"the longest request .4200 tokens. exceeds"):
        check_fits(workload, 4199, "the profile's")


def test_the_consumers_trace_is_the_workload_without_shared_prefixes():
    planned = plan(Workload("poisson", Lengths(1, 1500), Lengths(3, 9), seed=2, rate=5.0,
                            duration_seconds=4.0))
    rows = mooncake_rows(planned)
    assert [r["timestamp"] for r in rows] == [round(1e3 * p.arrival_seconds, 3) for p in planned]
    assert [(r["input_length"], r["output_length"]) for r in rows] == \
        [(p.input_tokens, p.output_tokens) for p in planned]
    ids = [i for r in rows for i in r["hash_ids"]]
    assert len(ids) == len(set(ids))
    assert all(len(r["hash_ids"]) == math.ceil(r["input_length"] / 512) for r in rows)


# ---- our prediction rule, on constructed profiles -------------------------------------------

def _points() -> list[MeasuredPoint]:
    pre = [(1, 100, 0, 0.010), (1, 300, 0, 0.014), (1, 300, 300, 0.020), (4, 400, 0, 0.030),
           (4, 1200, 0, 0.050), (1, 100, 0, 0.002, "full")]
    dec = [(1, 100, 0.004), (1, 1100, 0.006), (4, 400, 0.008), (4, 4400, 0.016),
           (4, 400, 0.099, 1.0)]   # at another AL: never used
    points = [MeasuredPoint("prefill", i, p[4] if len(p) > 4 else "eager", p[0], p[1], p[2],
                            p[3]) for i, p in enumerate(pre)]
    points += [MeasuredPoint("decode", i, "eager", b, 0, kv, s, d[0] if d else 2.5)
               for i, (b, kv, s, *d) in enumerate(dec)]
    return points


@pytest.fixture
def rule():
    return Interpolator(_points(), draft_depth=3, acceptance_length=2.5)


@pytest.mark.parametrize("kind, prefill, decode, seconds, how", [
    ("prefill", (1, 300, 0), (0, 0), 0.014, "same batch"),                 # a knot
    ("prefill", (1, 200, 0), (0, 0), 0.012, "same batch"),                 # linear in T
    ("prefill", (1, 300, 150), (0, 0), 0.017, "same batch"),               # halfway in P
    ("prefill", (2, 400, 0), (0, 0), None, None),                          # B=1 lacks T=400
    ("prefill", (2, 300, 0), (0, 0), None, None),                          # B=4 lacks T=300
    ("decode", (0, 0, 0), (1, 600), 0.005, "same batch"),                     # linear in C
    ("decode", (0, 0, 0), (4, 400), 0.008, "same batch"),                     # AL 1.0 ignored
    # batch 2 at a mean context of 300: B=1 at 300 (0.0044), B=4 at 1200 (0.0087...)
    ("decode", (0, 0, 0), (2, 600), 0.0044 + (0.008 + 0.008 * 800 / 4000 - 0.0044) / 3,
     "between batches 1 and 4"),
    ("mixed", (1, 100, 0), (0, 0), 0.010, "same batch"),              # as a prefill
])
def test_our_rule_interpolates_as_stated(rule, kind, prefill, decode, seconds, how):
    priced = rule.price(step(1, kind, "eager", 1.0, prefill=prefill, decode=decode))
    if seconds is None:
        assert not priced.priced
        assert priced.category in (OFF_TOKENS, OFF_BATCH)
    else:
        assert priced.seconds == pytest.approx(seconds, rel=1e-9)
        assert priced.how == how


def test_a_mixed_step_is_priced_as_one_prefill_of_all_its_tokens(rule):
    # 1 prefilling request of 300 tokens and 3 decoding ones (1 + K = 4 tokens each, their
    # KV unpriced): a prefill step of 4 requests and 312 tokens -> off the B=4 curve
    # (400..1200); with 2 prefilling of 390 and 2 decoding: 4 requests, 398 tokens -> off by 2
    off = rule.price(step(1, "mixed", "eager", 1.0, prefill=(1, 300, 0), decode=(3, 900)))
    assert (off.category, off.detail) == (
        OFF_TOKENS, "312 prefill tokens outside the [400, 1200] measured at batch 4 (eager, "
                    "no prefix)")
    on = rule.price(step(1, "mixed", "eager", 1.0, prefill=(2, 392, 0), decode=(2, 5000)))
    assert on.seconds == pytest.approx(0.030)
    assert on.how == "same batch"
    # the profile has no mixed rows: priced by the rule, and labelled so (priced or not)
    assert on.basis == off.basis == BASIS_RULE


@pytest.mark.parametrize("kind, mode, prefill, decode, category, detail", [
    ("decode", "eager", (0, 0, 0), (1, 1200), OFF_CONTEXT,
     "1200 KV tokens at batch 1 outside the [100, 1100] measured (eager)"),
    ("decode", "eager", (0, 0, 0), (8, 800), OFF_BATCH,
     "batch 8 outside the decode batches measured eager: [1, 4]"),
    ("prefill", "eager", (1, 50, 0), (0, 0), OFF_TOKENS,
     "50 prefill tokens outside the [100, 300] measured at batch 1 (eager, no prefix)"),
    ("prefill", "eager", (1, 300, 400), (0, 0), OFF_CACHED,
     "400 cached KV tokens beyond the 300 measured at batch 1, 300 tokens (eager)"),
    ("prefill", "eager", (4, 400, 10), (0, 0), OFF_CACHED,
     "400 prefill tokens with 10 cached KV: the cached-prefix points at batch 4 (eager) "
     "span [] tokens"),
    ("decode", "full", (0, 0, 0), (1, 200), NO_MODE,
     "the step ran full; the profile's decode points ran eager"),
    ("prefill", "piecewise", (1, 100, 0), (0, 0), NO_MODE,
     "the step ran piecewise; the profile's prefill points ran eager, full"),
    ("decode", "unknown", (0, 0, 0), (1, 200), NO_MODE, "the step did not report how it ran"),
])
def test_our_rule_prices_nothing_off_its_grid_and_says_why(rule, kind, mode, prefill, decode,
                                                           category, detail):
    priced = rule.price(step(1, kind, mode, 1.0, prefill=prefill, decode=decode))
    assert (priced.seconds, priced.category, priced.detail) == (None, category, detail)


def test_the_rule_uses_only_the_steps_graph_mode():
    rule = Interpolator(_points(), draft_depth=3, acceptance_length=2.5)
    assert rule.price(step(1, "prefill", "full", 1.0, prefill=(1, 100, 0))).seconds == 0.002
    assert rule.price(step(1, "prefill", "eager", 1.0, prefill=(1, 100, 0))).seconds == 0.010


def test_a_profile_without_the_phase_prices_none_of_it():
    rule = Interpolator([p for p in _points() if p.phase == "prefill"], 3, 2.5)
    priced = rule.price(step(1, "decode", "eager", 1.0, decode=(1, 200)))
    assert (priced.category, priced.detail) == (
        NO_PHASE, "the profile has no decode point at the run's acceptance length")


def test_interpolate_is_linear_between_knots_and_refuses_outside():
    curve = [(10, 1.0), (30, 3.0), (20, 1.0), (20, 3.0)]   # a repeated knot is averaged
    assert [interpolate(curve, x) for x in (10, 15, 20, 25, 30)] == [1.0, 1.5, 2.0, 2.5, 3.0]
    assert interpolate(curve, 9.99) is None
    assert interpolate(curve, 30.01) is None
    assert interpolate([], 1) is None


@pytest.mark.parametrize("path", [CPU, H200], ids=["cpu", "h200"])
def test_profile_points_are_the_median_of_each_points_repeats(path):
    artifact = read_profile(path)
    points = profile_points(artifact)
    assert len(points) == len({(o.point_index, "prefill") for o in artifact.prefill}) + \
        len({(o.point_index, "decode") for o in artifact.decode})
    for p in points:
        repeats = [o for o in getattr(artifact, p.phase) if o.point_index == p.point_index]
        assert p.seconds == statistics.median(o.timing.seconds for o in repeats)
        snapshot = repeats[0].snapshot
        assert p.batch == len(snapshot.requests)
        assert p.kv == sum(r.kv_tokens for r in snapshot.requests)
        assert p.graph_mode in {o.graph_mode for o in repeats}
    # every measured point predicts itself exactly (a step at the point's totals)
    rule = Interpolator.from_artifact(artifact)
    k, al = artifact.speculative.draft_depth, artifact.speculative.synthetic_acceptance_length
    for p in points:
        if p.phase == "decode" and p.acceptance_length != al:
            continue
        s = step(1, p.phase, p.graph_mode, p.seconds, prefill=(p.batch, p.tokens, p.kv)
                 if p.phase == "prefill" else (0, 0, 0),
                 decode=(p.batch, p.kv) if p.phase == "decode" else (0, 0), draft_depth=k)
        assert rule.price(s).seconds == p.seconds, p


# ---- the engine rebuilt from a profile, and compared ----------------------------------------

def test_a_presets_profile_is_rebuilt_with_its_collections_choices():
    cpu, h200 = read_profile(CPU), read_profile(H200)
    assert preset_of(cpu) == "tiny"
    assert preset_of(h200) == "qwen3-0.6b"
    assert spec_choices(cpu) == {
        "draft_depth": 3, "acceptance_length": None, "user_engine_args": {},
        "target_revision": None, "draft_revision": None, "preset": "tiny",
        "vllm_defaults": False, "cuda_graphs": False}
    # the production profile: vLLM's defaults, and the user's own engine arguments again
    assert spec_choices(h200) == {
        "draft_depth": 3, "acceptance_length": 2.78,
        "user_engine_args": {"max_model_len": 8448, "max_num_seqs": 64},
        "target_revision": None, "draft_revision": None, "preset": "qwen3-0.6b",
        "vllm_defaults": True, "cuda_graphs": False}
    assert spec_choices(cpu, "/t", "/d")["model"] == "/t"
    with pytest.raises(ProfileUnusable, match="--model and --draft go together"):
        spec_choices(cpu, "/t", None)


def _setting(identity, name: str, value):
    settings = dataclasses.replace(identity.settings, **{
        name: IdentityField.of(value, "test")})
    return dataclasses.replace(identity, settings=settings)


def test_every_differing_field_is_named_and_labels_and_paths_are_not_compared():
    ident = read_profile(CPU).identity
    assert identity_differences(ident, ident) == []
    moved = dataclasses.replace(ident, target=dataclasses.replace(
        ident.target, model=IdentityField.of("/elsewhere", "test"),
        revision=IdentityField.of("1" * 40, "user")))
    assert identity_differences(ident, moved) == []   # a path; a revision on one side only
    other = _setting(_setting(ident, "max_num_seqs", 99), "block_size", 16)
    other = dataclasses.replace(other, cudagraph_mode=IdentityField.unknown("test"))
    assert identity_differences(ident, other) == [
        "identity.cudagraph_mode: the profile's engine had 'none', this engine has "
        "unresolved (test)",
        "identity.settings.max_num_seqs: the profile's engine had 16, this engine has 99",
        "identity.settings.block_size: the profile's engine had 32, this engine has 16"]


class _Engine:
    def __init__(self, artifact, **kv):
        self.identity = artifact.identity
        self.kv_capacity = dataclasses.replace(artifact.kv_capacity, **kv)


def test_check_engine_refuses_a_mismatch_and_notes_the_kv_blocks():
    artifact = read_profile(CPU)
    assert check_engine(artifact, _Engine(artifact)) == []
    notes = check_engine(artifact, _Engine(artifact, num_blocks=7))
    assert notes == [f"kv_capacity.num_blocks: the profile's engine had "
                     f"{artifact.kv_capacity.num_blocks} blocks, this engine has 7 (sized at "
                     "start-up from free memory)"]
    with pytest.raises(EngineMismatch) as refused:
        check_engine(artifact, _Engine(artifact, block_size=16))
    assert refused.value.differences == [
        "kv_capacity.block_size: the profile's engine had 32, this engine has 16"]


def test_profiles_no_run_can_use_are_refused_naming_why(tmp_path):
    with pytest.raises(ProfileUnusable, match="legacy artifact"):
        read_profile(FIXTURES / "legacy-v2-decode-only.json")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ProfileUnusable, match="not an artifact"):
        read_profile(tmp_path / "x.json")
    (tmp_path / "y.json").write_text('{"kind": "pytest-sdbench/spec-decode-profile", '
                                     '"schema_version": 6}')
    with pytest.raises(ProfileUnusable, match="not a valid artifact"):
        read_profile(tmp_path / "y.json")
    with pytest.raises(ProfileUnusable, match="device: the profile was measured on cuda"):
        check_device(read_profile(H200), cuda=False)
    check_device(read_profile(CPU), cuda=False)


# ---- the report ------------------------------------------------------------------------------

def test_error_figures_are_medians_and_p90_of_relative_errors():
    errors = [-0.1, 0.05, 0.2, -0.3, 0.0]
    figures = error_stats(errors, steps=8)
    assert figures == {"steps": 8, "priced_steps": 5, "median_abs_error": 0.1,
                       "p90_abs_error": pytest.approx(0.26), "bias": 0.0}
    assert error_stats([], 3)["median_abs_error"] is None
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([7], 90) == 7


def test_kind_figures_count_unpriced_steps_by_why_and_split_by_graph_mode_and_batch(rule):
    rows = [StepRow(0, s, {OURS: rule.price(s)}) for s in (
        step(1, "decode", "eager", 0.005, decode=(1, 600)),     # predicted 0.005: e = 0
        step(2, "decode", "eager", 0.004, decode=(1, 600)),     # e = +25%
        step(3, "decode", "eager", 0.004, decode=(9, 600)),     # off-grid batch
        step(4, "decode", "full", 0.004, decode=(1, 600)),      # graph mode not measured
        step(5, "prefill", "eager", 0.020, prefill=(1, 300, 0)))]
    figures = kind_figures(rows, OURS)
    decode = figures["decode"]
    assert (decode["steps"], decode["priced_steps"]) == (4, 2)
    assert decode["median_abs_error"] == pytest.approx(0.125)
    assert decode["unpriced"] == {OFF_BATCH: 1, NO_MODE: 1}
    assert set(decode["by_graph_mode"]) == {"eager", "full"}
    # by batch (the step's requests): the three batch-1 steps, two priced (e 0 and +25%),
    # and the off-grid batch 9 in its own bucket, unpriced
    assert list(decode["by_batch"]) == ["1", "9-16"]
    assert (decode["by_batch"]["1"]["steps"], decode["by_batch"]["1"]["priced_steps"]) == (3, 2)
    assert decode["by_batch"]["1"]["bias"] == pytest.approx(0.125)
    assert decode["by_batch"]["9-16"]["priced_steps"] == 0
    assert figures["prefill"]["bias"] == pytest.approx(0.014 / 0.020 - 1)
    assert figures["mixed"]["steps"] == 0
    assert figures["all"]["steps"] == 5


def test_the_consumers_refusals_are_sorted_by_what_they_say():
    mixed = consumer_priced({"error": "ValueError: invalid forward pass metrics: full SD-round "
                                      "FPM has no qualified mixed-iteration composition"})
    off = consumer_priced({"error": 'PerfDataNotAvailableError: perf database error: FPM direct '
                                    'prefill query (batch_size=2) is unsupported for model_path='
                                    '"/x/y": no same-batch, two-sided measured support in either '
                                    'token-first or KV-first interpolation. Collect matching '
                                    'genuine FPM points; direct ...'})
    assert mixed.category.startswith("mixed")
    assert off.category.startswith("off-grid")
    assert off.detail == ("PerfDataNotAvailableError: FPM direct prefill query (batch_size=2) is "
                          "unsupported: no same-batch, two-sided measured support in either "
                          "token-first or KV-first interpolation.")
    priced = consumer_priced({"ms": 4.5, "resolution": "exact_lookup"})
    assert (priced.seconds, priced.how) == (0.0045, "exact_lookup")


@pytest.fixture
def reported(tmp_path):
    pytest.importorskip("matplotlib")
    folder = constructed_run(H200, tmp_path / "h200-fidelity")
    return report(folder)


def test_the_report_holds_the_figures_per_model_kind_and_rate(reported):
    figures = json.loads((reported.folder / "fidelity.json").read_text())
    assert figures == reported.figures
    ours = figures["models"]["qwen3-0.6b"][OURS]
    for kind in ("prefill", "decode", "mixed", "all"):
        assert {"median_abs_error", "p90_abs_error", "bias", "steps",
                "priced_steps"} <= set(ours[kind])
    # every step sits at its point's median, so our rule is exact where it prices
    assert ours["prefill"]["median_abs_error"] == 0.0
    assert ours["prefill"]["steps"] == ours["prefill"]["priced_steps"] == 22
    assert ours["decode"]["median_abs_error"] == 0.0
    assert ours["decode"]["unpriced"] == {OFF_CONTEXT: 1}      # past the longest context
    assert ours["mixed"]["steps"] == 1
    assert CONSUMER not in figures["models"]["qwen3-0.6b"]
    assert figures["predictors"][CONSUMER]["status"] == "not run"
    (rate,) = figures["rates"].values()
    assert set(rate) == {"measured", "predicted"}
    assert rate["measured"]["ttft_median_ms"] == pytest.approx(20.0)
    assert rate["measured"]["itl_median_ms"] == pytest.approx(4.0 / 3)
    assert rate["predicted"] == {"ttft_median_ms": None, "itl_median_ms": None}


def test_the_report_files_are_written_in_its_folder(reported):
    folder = reported.folder
    for name in ("fidelity.md", "fidelity.json", "steps.csv", "fidelity-run.json",
                 "profile.json", "fidelity-steps.png", "fidelity-errors.png",
                 "fidelity-e2e.png"):
        assert (folder / name).is_file(), name
    assert (folder / "fidelity-steps.png").read_bytes().startswith(b"\x89PNG")
    text = (folder / "fidelity.md").read_text()
    assert "| ours | decode | 50 | 49 | 0.0% | 0.0% | +0.0% |" in text
    assert "![predicted vs measured](fidelity-steps.png)" in text
    assert "AISimulate's predictions: not run: no consumer environment was given" in text
    lines = (folder / "steps.csv").read_text().splitlines()
    assert len(lines) == 1 + len(reported.rows)
    _artifact, runs, notes, original = load(folder)
    assert isinstance(runs[0], ServingRun)
    assert notes == ["a constructed run: no engine served it"]
    assert original == str(H200.resolve())


def test_sdbench_fidelity_report_recomputes_from_the_folder(reported, capsys):
    before = reported.figures["models"]
    assert main(["fidelity", "--report", str(reported.folder)]) == 0
    out = capsys.readouterr().out
    assert "ours        decode       50     49      0.0%" in out
    assert f"wrote {reported.path}" in out
    assert json.loads((reported.folder / "fidelity.json").read_text())["models"] == before


@pytest.mark.parametrize("args, message", [
    (["fidelity"], "give PROFILE (an artifact), or --report DIR"),
    (["fidelity", "--report", "/nonexistent"], "no fidelity run can be read"),
    (["fidelity", str(H200), "--no-plots"], "device: the profile was measured on cuda"),
    (["fidelity", str(CPU), "--input-len", "5-x", "--no-plots"], "--input-len: expected N or "
                                                                "LOW-HIGH"),
    (["fidelity", str(CPU), "--input-len", "4000", "--output-len", "200", "--no-plots"],
     "exceeds the profile's engine's max_model_len 4096"),
    (["fidelity", str(CPU), "--graph-mode", "decode=fast", "--no-plots"], "--graph-mode"),
    (["fidelity", str(CPU), "--concurrency", "2", "--no-plots"], "--requests"),
])
def test_unusable_input_is_refused_before_an_engine_starts(args, message, capsys):
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_sdbench_plot_links_the_fidelity_reports_beside_a_profile(reported, tmp_path, capsys):
    profile = tmp_path / "h200.json"
    profile.write_bytes(H200.read_bytes())
    beside = tmp_path / "h200-fidelity"
    assert reported.folder == beside
    assert reports_beside(profile) == [beside / "fidelity.md"]
    out = tmp_path / "plots"
    assert main(["plot", str(profile), "--out", str(out)]) == 0
    page = (out / "sdbench-plots.html").read_text()
    assert '<a href="../h200-fidelity/fidelity.md">h200-fidelity/fidelity.md</a>' in page


# ---- the serving run's join, and the package's boundary with the consumer -------------------

class _Record:
    def __init__(self, iid: int, tokens: int, timed: bool):
        self.native_iteration_id, self.total_scheduled_tokens = iid, tokens
        self.timing = object() if timed else None


class _Window:
    def __init__(self, *records):
        self.records = list(records)


def test_only_an_idle_iteration_may_go_untimed():
    from pytest_sdbench.fidelity.serve import _only_idle_untimed
    from pytest_sdbench.measure.observer import TimingMissing
    _only_idle_untimed(_Window(_Record(1, 4, True), _Record(2, 0, False)))
    with pytest.raises(TimingMissing, match=r"native iteration ids \[3\]"):
        _only_idle_untimed(_Window(_Record(1, 4, True), _Record(2, 0, False),
                                   _Record(3, 8, False)))


def test_the_package_imports_no_consumer_module():
    """AISimulate is imported by consumer_side.py alone, a script its own environment runs;
    no module of the package imports that script."""
    import ast
    from pathlib import Path

    import pytest_sdbench
    package = Path(pytest_sdbench.__file__).parent
    consumer_side = package / "aisimulate" / "consumer_side.py"
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] + [a.name for a in node.names]
                     if isinstance(node, ast.ImportFrom) else [])
            absolute = not isinstance(node, ast.ImportFrom) or node.level == 0
            if path != consumer_side and absolute:
                assert not any(n.split(".")[0] in ("aisimulate", "aisimulate_core", "collector")
                               for n in names), path
            assert "consumer_side" not in names, path
