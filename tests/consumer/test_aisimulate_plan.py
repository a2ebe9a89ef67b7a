"""Planning with an export, by the consumer's own code (aisimulate 0.13.0.dev202610270000000085):

- its prefill plan (PrefillSamplingProfile) equals ours (aisimulate.grids) for engine limits;
- an export's collection plan, point receipts, checkpoint and table pass its readers with its
  own hash, without the test building a plan; its repeatability freeze takes the campaign and
  says why its own assessment cannot qualify it;
- its onboarding entry points, run as a user runs them, on an export;
- on a legacy production profile (schema v4: decode retained the first decode step,
  `steady_step`; docs/reference.md), what an export of it gives the consumer's readers, its
  predict and its onboarding: the exporter's mapping, not the profile's figures;
- `aisimulate predict` (direct interpolation, fallback denied) on every case of concurrency
  1, 4, 16, 64 x ISL/OSL 128/128, 2048/128, 8192/512: on a table at the coordinates of the
  grid `--grid aisimulate` collects (constructed latencies: coverage, not timing), and on the
  committed H200 profile collected with that grid once it exists (AISIMULATE_PROFILES).

Runs only in the consumer's environment (scripts/consumer-test.sh).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

os.environ.setdefault("AIC_ALLOW_UNLISTED_VERSIONS", "1")

import aisimulate_core
import pyarrow.parquet as pq
import yaml
from collector.fpm_forward.config import FPMCollectionOptions
from collector.fpm_forward.database import validate_formal_database_commit
from collector.fpm_forward.native_artifact import (
    select_native_measurements,
    validate_native_collection,
)
from collector.fpm_forward.planner import build_collection_plan
from collector.fpm_forward.repeatability import (
    freeze_repeatability_plan,
    load_repeatability_source,
)
from collector.fpm_forward.runner import _validate_points_receipts

from pytest_sdbench.aisimulate.export.vocabulary import (
    CONSUMER_VERSION,
    MANIFEST_FILE,
    PREDICT_FILE,
    PROFILE_FILE,
)
from pytest_sdbench.aisimulate.grids import direct_grid, native_grid, prefill_sampling
from pytest_sdbench.artifact.store import read_json
from pytest_sdbench.wire.points import EngineLimits

from .test_aisimulate_import import REVISIONS, ROOT, SYSTEM, rewrite_table, sdbench_export

PACKAGED_SYSTEMS = Path(aisimulate_core.__file__).parent / "systems"
AISIMULATE = Path(sys.executable).with_name("aisimulate")
# The legacy production profiles (schema v4, decode at the first decode step, `steady_step`):
# inputs of the export's mapping here, not profiles to plan with (AISIMULATE_PROFILES is).
LEGACY_PRODUCTION = ROOT / "docs/evidence/h200/production/sdbench-agg-36506276d78b.json.xz"
LEGACY_PRODUCTION_START_2 = (ROOT / "docs/evidence/h200/production/"
                             "sdbench-agg-3bb1fd58da6e.json.xz")
# The H200 profile for planning: qwen3-0.6b as served, K=3, collected with --grid aisimulate
# (docs/export.md says how). Every agg artifact here is one engine start of one collection.
AISIMULATE_PROFILES = ROOT / "docs/evidence/h200/aisimulate"
CASES = [(isl, osl, c) for isl, osl in ((128, 128), (2048, 128), (8192, 512))
         for c in (1, 4, 16, 64)]
# vLLM 0.26's default capture sizes for max_num_seqs 64 at K=3 (the legacy production
# artifacts').
CAPTURES = (1, 2, 4, *range(8, 257, 8), *range(272, 513, 16))


def export_legacy_production(out: Path, *extra: str) -> tuple[Path, dict]:
    """The legacy production profile (schema v4, `steady_step`) exported: its root and
    manifest."""
    code, text = sdbench_export([LEGACY_PRODUCTION], out, "--system", SYSTEM, *REVISIONS,
                                "--acceptance-length", "2.78", "--graph-mode", "prefill=eager",
                                *extra)
    assert code == 0, text
    print(text)
    root = next(p for p in out.iterdir() if p.is_dir() and not p.name.startswith("."))
    return root, json.loads((root / MANIFEST_FILE).read_text())


# --- its prefill plan --------------------------------------------------------------------------

@pytest.mark.parametrize("budget, seqs", [(16384, 64), (8192, 64), (4096, 16), (2048, 8)])
@pytest.mark.parametrize("policy", ["explicit", "runtime"])
def test_prefill_plan_is_the_consumers(budget, seqs, policy):
    options = FPMCollectionOptions(
        max_gpus=1, gpu_counts=(1,), parallel_presets=("tp",), parallel_axes=(),
        moe_backend="auto", attention_backend="auto", enable_wideep="false",
        enable_eplb="false", weight_quantizations=("bfloat16",), kv_cache_dtypes=("bfloat16",),
        max_num_batched_tokens=budget, max_num_seqs=seqs, worker_type="aggregated",
        prefill_cudagraph_policy=policy)
    theirs = options.prefill_sampling.to_dict()
    assert prefill_sampling(budget, seqs, policy).to_dict() == theirs
    if policy == "explicit":
        limits = EngineLimits(3, 16, seqs, budget, 8448, 1 << 22, CAPTURES, True)
        totals = [p.new_tokens for p in native_grid(limits).prefill]
        assert totals == [t for t in theirs["new_token_axis_points"] if t < 8448]
        print(f"budget {budget}, max_num_seqs {seqs}: its new-token axis has "
              f"{theirs['new_token_axis_point_count']} totals; --grid aisimulate-native "
              f"collects {len(totals)} (batch 1, within max_model_len)")


def test_build_collection_plan_plans_the_native_axis_we_collect(tmp_path, monkeypatch):
    """Its planner itself (build_collection_plan, no profile: it refuses a speculative one)
    for the production engine's limits: the prefill sampling it freezes is ours, and
    --grid aisimulate-native collects its new-token totals. The legacy production profile's
    export gives only the model folder."""
    root, _ = export_legacy_production(tmp_path)
    monkeypatch.setenv("FPM_COLLECTOR_SOURCE_REVISION", "pytest-sdbench consumer test")
    options = FPMCollectionOptions(
        max_gpus=1, gpu_counts=(1,), parallel_presets=("tp",), parallel_axes=(),
        moe_backend="auto", attention_backend="auto", enable_wideep="false",
        enable_eplb="false", weight_quantizations=(), kv_cache_dtypes=("auto",),
        max_num_batched_tokens=16384, max_num_seqs=64, worker_type="aggregated",
        vllm_max_model_len=8448)
    plan = build_collection_plan(backend="vllm", model_path=str(root / "model" / "target"),
                                 system=SYSTEM, selected_ops={"fpm_forward"}, options=options,
                                 collector_config={"aic_database_version": "0.26.0"})
    planned = plan.to_dict()["point_generation"]
    assert planned["source"] == "native_auto_grid"
    assert planned["prefill_sampling"] == prefill_sampling(16384, 64).to_dict()
    limits = EngineLimits(3, 16, 64, 16384, 8448, 71560 * 16, CAPTURES, True)
    assert [p.new_tokens for p in native_grid(limits).prefill] == [
        t for t in planned["prefill_sampling"]["new_token_axis_points"] if t < 8448]
    print(f"build_collection_plan: {planned['prefill_sampling']['new_token_axis_point_count']} "
          f"new-token totals, points {plan.to_dict()['counts']['points']!r}")


# --- an export's plan, under its readers -------------------------------------------------------

def test_legacy_export_plan_passes_the_consumers_readers(tmp_path):
    """No plan is built here: the export's collection-plan.json is read as the consumer reads
    a campaign (its hash, an exact rebuild), and the envelopes, receipts, table and
    checkpoint are checked against it. On the legacy production profile (schema v4, its
    second engine start as repeats)."""
    root, manifest = export_legacy_production(tmp_path, "--repeats-from",
                                              str(LEGACY_PRODUCTION_START_2))
    campaign, checkpoint_path = root / "campaign", root / "checkpoint" / "fpm_forward.json"
    plan = load_repeatability_source(campaign)
    assert plan.sha256 == manifest["plan_sha256"]
    checkpoint = json.loads(checkpoint_path.read_text())
    for cell in plan.cells:
        raw = campaign / "cells" / cell.cell_id / "raw"
        collection = validate_native_collection(cell, raw, expected_plan_sha256=plan.sha256,
                                                expected_attempt_id=manifest["attempt_id"])
        _validate_points_receipts(plan, cell, raw, manifest["attempt_id"])
        kept = select_native_measurements(collection, cell_id=cell.cell_id)
        print(f"{cell.workload_kind}: validate_native_collection with the plan's hash "
              f"{plan.sha256[:16]}..., receipts of its frozen manifest: {len(kept)} points")
    table = manifest["table"]
    committed = validate_formal_database_commit(
        root / table["parquet"], root / table["metadata"], plan,
        expected_attempt_ids={c.cell_id: manifest["attempt_id"] for c in plan.cells},
        expected_cell_rows=checkpoint["database"]["cell_rows"])
    print(f"validate_formal_database_commit: {committed['row_count']} rows, cells "
          f"{sorted(committed['cell_rows'])}")
    # Facts from the artifact: the resolved attention backend, one sample per row.
    artifact = read_json(LEGACY_PRODUCTION)
    rows = pq.read_table(root / table["parquet"]).to_pylist()
    assert {r["attention_backend"] for r in rows} == {
        artifact["identity"]["attention_backend"]["value"]}
    assert {(r["measurement_reduction"], r["source_sample_count"], r["measurement_repeats"])
            for r in rows} == {("single_sample", 1, 1)}
    assert json.loads((root / table["metadata"]).read_text())["measurement_repeats"] == 1
    # Its repeatability protocol takes the campaign and states its own evidence gaps.
    frozen = freeze_repeatability_plan(plan, campaign, checkpoint_path)
    for cell in frozen["cells"]:
        execution = cell["execution"]
        print(f"freeze_repeatability_plan {cell['phase']}: execution {execution['status']}; "
              f"{'; '.join(execution.get('missing_evidence', [])[:3])}")
        assert execution["status"] != "qualified"
    repeats = manifest["repeatability"]
    print(f"export repeatability ({len(repeats['engine_starts'])} engine starts): "
          f"{repeats['status']} {repeats['point_counts']}; CV {repeats['cv']}; agreement "
          f"{repeats['source_relative_difference']}")
    assert repeats["status"] == "incomplete"   # 2 independent samples of the 5 it needs


def test_nextn_accepted_outside_the_legacy_rows_is_refused(tmp_path):
    """On the legacy production profile's export (schema v4): a --nextn-accepted outside
    the acceptance its decode rows were measured at is refused."""
    root, manifest = export_legacy_production(tmp_path / "ok")
    acceptance = manifest["acceptance"]
    config = json.loads((root / PREDICT_FILE).read_text())
    assert config["engine"]["nextn_accepted"] == acceptance["nextn_accepted"] == round(
        acceptance["rows_run_acceptance_length"]["mean"] - 1, 4)
    code, text = sdbench_export([LEGACY_PRODUCTION], tmp_path / "bad", "--system", SYSTEM,
                                *REVISIONS, "--acceptance-length", "2.78",
                                "--graph-mode", "prefill=eager", "--nextn-accepted", "0.2")
    assert code == 1, text
    assert "--nextn-accepted 0.2: the decode rows were measured at acceptance lengths" in text
    print(text)


def test_a_cpu_collection_of_the_grid_imports_as_envelopes(tmp_path):
    """The consumer refuses CPU timing for a table; the envelopes of the tiny preset's CPU
    collection with --grid aisimulate (tests/fixtures/cpu-agg-aisimulate-grid.json) pass its
    validator and selection, every coordinate of the grid kept."""
    from .test_aisimulate_import import envelope_cell
    fixture = ROOT / "tests" / "fixtures" / "cpu-agg-aisimulate-grid.json"
    code, text = sdbench_export([fixture], tmp_path, "--system", SYSTEM, *REVISIONS)
    assert code == 1, text
    assert "device: 'cpu'" in text
    code, text = sdbench_export([fixture], tmp_path, "--envelope-only", *REVISIONS)
    assert code == 0, text
    root = next(p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("."))
    manifest = json.loads((root / MANIFEST_FILE).read_text())
    grid = json.loads(fixture.read_text())["grid"]
    for phase, cell in manifest["cells"].items():
        collection = validate_native_collection(
            envelope_cell(cell, phase), root / "campaign" / "cells" / cell / "raw",
            expected_plan_sha256=manifest["plan_sha256"],
            expected_attempt_id=manifest["attempt_id"])
        kept = select_native_measurements(collection, cell_id=cell)
        assert len(kept) == len(grid[phase])
        print(f"CPU --grid aisimulate {phase}: validate_native_collection + "
              f"select_native_measurements kept {len(kept)} of {len(grid[phase])} points")


# --- its onboarding, as a user runs it ---------------------------------------------------------

def onboarding_request(root: Path, manifest: dict) -> Path:
    """The user's reviewed onboarding request for the export's deployment."""
    profile = json.loads((root / PROFILE_FILE).read_text())
    facts = {name: fact["value"] for name, fact in manifest["facts"].items()}
    request = {
        "schema_version": "aisimulate-support-request/v2",
        "identity": {"model": manifest["model_path"], "model_revision": facts["target_revision"],
                     "model_kind": "dense", "framework": "vllm",
                     "framework_version": manifest["backend_version"],
                     "runtime_framework_version": manifest["backend_version"],
                     "gpu": manifest["system"], "interconnect": "nvlink"},
        "search": {"tensor_parallel": 1, "context_length": facts["max_model_len"]},
        "collection": {"max_num_tokens": facts["max_num_batched_tokens"],
                       "max_batch_size": facts["max_num_seqs"],
                       "gpu_memory_utilization": facts["gpu_memory_utilization"],
                       "prefill_cudagraph_policy": "runtime"},
        "fpm_profile": profile, "worker_type": "aggregated"}
    path = root.parent / "onboarding-request.yaml"
    path.write_text(yaml.safe_dump(request))
    return path


def aisimulate(*args: str, unlisted: bool = True, cwd: Path | None = None
               ) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AIC_ALLOW_UNLISTED_VERSIONS"}
    if unlisted:
        env["AIC_ALLOW_UNLISTED_VERSIONS"] = "1"
    return subprocess.run([str(AISIMULATE), *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=cwd)


def predict_as_exported(root: Path) -> dict:
    """`aisimulate predict -c predict.json` in the export, as the user runs it right after
    `sdbench export`: nothing copied in by hand, no AIC_ALLOW_UNLISTED_VERSIONS (the
    export's systems/ holds the consumer's system YAML and the table of this version)."""
    assert (root / "systems" / f"{SYSTEM}.yaml").read_bytes() == \
        (PACKAGED_SYSTEMS / f"{SYSTEM}.yaml").read_bytes()
    done = aisimulate("predict", "-c", PREDICT_FILE, "--format", "json", unlisted=False,
                      cwd=root)
    assert done.returncode == 0, (done.stderr + done.stdout)[-3000:]
    summary = json.loads(done.stdout)
    return summary.get("summary", summary)


def test_predict_runs_on_the_legacy_export_as_it_is_written(tmp_path):
    """`sdbench export`, then `aisimulate predict -c predict.json`: no command in between
    (the legacy production profile, schema v4: the export as written, not its figures)."""
    root, manifest = export_legacy_production(tmp_path)
    assert manifest["table"]["system_file"]["source"].startswith(f"aisimulate {CONSUMER_VERSION}")
    summary = predict_as_exported(root)
    print(f"predict -c predict.json on the legacy production export: median TTFT "
          f"{summary['median_ttft_ms']:.3f} ms, median TPOT {summary['median_tpot_ms']:.3f} ms")
    assert summary["median_ttft_ms"] > 0


def test_onboarding_entry_points_on_a_legacy_export(tmp_path):
    """`aisimulate onboard plan | validate-collection | finalize` on an export (of the
    legacy production profile, schema v4). In this
    consumer, onboarding has no speculative path: its plan step renders predict configs
    without nextn and refuses the speculative profile, and validate-collection and finalize
    first verify that plan. Asserted as it stands, so that a consumer that gains the path
    fails this test and the export is taken through it."""
    root, manifest = export_legacy_production(tmp_path)
    request = onboarding_request(root, manifest)
    plan = aisimulate("onboard", "plan", "-c", str(request), "--output-dir",
                      str(tmp_path / "onboarding"))
    print(f"aisimulate onboard plan: exit {plan.returncode}: {plan.stderr.strip()[-300:]}")
    assert plan.returncode != 0
    assert ("speculative-round FPM nextn must match num_draft_tokens and cannot use generic "
            "speculation") in plan.stderr
    for action, extra in (("validate-collection", ["--validation-output-dir",
                                                   str(tmp_path / "validation")]),
                          ("finalize", ["--resolved-output-dir", str(tmp_path / "resolved")])):
        done = aisimulate("onboard", action, "-c", str(request), "--output-dir", str(root),
                          *extra)
        message = (done.stderr + done.stdout).strip()
        print(f"aisimulate onboard {action}: exit {done.returncode}: {message[-300:]}")
        assert done.returncode != 0
        assert "run aisimulate onboard plan first" in message


# --- predict on the grid -----------------------------------------------------------------------

def predict(config: dict, case: tuple[int, int, int], out: Path, *, unlisted: bool = False
            ) -> tuple[tuple[int, int, int], dict | str]:
    isl, osl, concurrency = case
    config = json.loads(json.dumps(config))
    config["traffic"] = {"source": {"type": "synthetic", "input_tokens": isl,
                                    "output_tokens": osl},
                         "load": {"type": "concurrency", "concurrency": concurrency},
                         "stop": {"requests": max(2 * concurrency, 8)}}
    path = out / f"predict-{isl}-{osl}-{concurrency}.yaml"
    path.write_text(json.dumps(config))
    done = aisimulate("predict", "-c", str(path), "--output-dir", str(path.with_suffix("")),
                      "--format", "json", unlisted=unlisted)
    try:
        summary = json.loads(done.stdout)
        return case, summary.get("summary", summary)
    except json.JSONDecodeError:
        text = done.stderr + done.stdout
        start = text.find("FPM direct")
        return case, (text[start:] if start >= 0 else text).strip().splitlines()[0][:300]


def run_cases(config: dict, out: Path) -> dict:
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(lambda case: predict(config, case, out), CASES))


def print_cases(title: str, results: dict) -> None:
    print(f"\n{title}\n  {'ISL/OSL':>9} {'conc':>4}  median TTFT (ms)  median ITL (ms)  "
          "median TPOT (ms)")
    for (isl, osl, c), result in results.items():
        if isinstance(result, dict):
            print(f"  {isl:>4}/{osl:<4} {c:>4}  {result['median_ttft_ms']:>16.3f}  "
                  f"{result['median_itl_ms']:>15.3f}  {result['median_tpot_ms']:>16.3f}")
        else:
            print(f"  {isl:>4}/{osl:<4} {c:>4}  REFUSED: {result}")


def grid_table(root: Path, manifest: dict, limits: EngineLimits) -> None:
    """Replace the export's rows by rows at the coordinates --grid aisimulate collects for
    these limits, with constructed latencies (this checks where queries land, not time),
    and its profile's context by the limits'."""
    template = {r["workload_kind"]: r for r in
                pq.read_table(root / manifest["table"]["parquet"]).to_pylist()}
    grid, rows = direct_grid(limits, 2.78), []
    for p in grid.prefill:
        t, kv = p.batch_size * p.new_tokens, p.batch_size * p.cached_prefix_tokens
        rows.append(dict(template["prefill"], batch_size=p.batch_size, total_prefill_tokens=t,
                         total_kv_read_tokens=kv, latency_ms=5 + 0.004 * t + 0.0005 * kv,
                         kv_seed_regime="real_kv" if kv else "n/a"))
    for d in grid.decode:
        kv = d.batch_size * d.context_tokens
        rows.append(dict(template["decode"], batch_size=d.batch_size, total_prefill_tokens=0,
                         total_kv_read_tokens=kv, latency_ms=3 + 0.02 * d.batch_size + 1e-5 * kv))
    rewrite_table(root, manifest, rows)
    profile = json.loads((root / PROFILE_FILE).read_text())
    profile["context_length"] = limits.max_model_len
    profile["deployments"][0]["resources"]["runtime_memory"]["max_model_len"] = \
        limits.max_model_len
    (root / PROFILE_FILE).write_text(json.dumps(profile))
    print(f"--grid aisimulate for max_num_seqs {limits.max_num_seqs}, max_num_batched_tokens "
          f"{limits.max_num_batched_tokens}, max_model_len {limits.max_model_len}: "
          f"{len(grid.prefill)} prefill + {len(grid.decode)} decode = {len(grid)} points")


@pytest.mark.parametrize("chunked", [False, True], ids=["chunked-prefill-off", "chunked-on"])
def test_every_predict_query_lands_on_the_grid(tmp_path, chunked):
    """The grid for qwen3-0.6b as served on an H200 (the production artifacts' limits:
    max_num_seqs 64, max_num_batched_tokens 16384), with max_model_len 9216 so that a
    request of 8192 + 512 fits. Every case runs with chunked prefill off; with it on, the
    8192/512 case at concurrency 4 asks for a prefill step of fewer than a block + 1 new
    tokens per request behind a computed prefix (a chunk's remainder), which no cached-prefix
    point can be (with EAGLE vLLM recomputes the last matched block). The legacy production
    profile's export is the template: its rows are replaced."""
    root, manifest = export_legacy_production(tmp_path)
    limits = EngineLimits(3, 16, 64, 16384, 9216, 71560 * 16, CAPTURES, True)
    grid_table(root, manifest, limits)   # the export's systems/ already holds the YAML
    config = json.loads((root / PREDICT_FILE).read_text())
    config["engine"]["fpm_profile"] = json.loads((root / PROFILE_FILE).read_text())
    config["engine"]["enable_chunked_prefill"] = chunked
    results = run_cases(config, tmp_path)
    print_cases(f"predict, constructed latencies at the grid's coordinates, chunked prefill "
                f"{'on' if chunked else 'off'} (direct interpolation, fallback denied; "
                "without AIC_ALLOW_UNLISTED_VERSIONS)", results)
    refused = {case: r for case, r in results.items() if not isinstance(r, dict)}
    if not chunked:
        assert not refused
    else:
        assert set(refused) == {(8192, 512, 4)}
        message = refused[(8192, 512, 4)]
        batch, tokens = (int(message.split(f"{name}=")[1].split(",")[0])
                         for name in ("batch_size", "total_prefill_tokens"))
        assert "total_kv_read_tokens=0" not in message
        assert tokens <= batch * 16, message


def _profile_artifacts() -> list[Path]:
    if not AISIMULATE_PROFILES.is_dir():
        return []
    return sorted(p for p in AISIMULATE_PROFILES.glob("sdbench-*.json*")
                  if read_json(p).get("mode") == "agg")


@pytest.mark.skipif(not _profile_artifacts(), reason=f"no H200 profile collected with --grid "
                    f"aisimulate is committed under {AISIMULATE_PROFILES.relative_to(ROOT)} yet")
def test_predict_runs_every_case_on_the_committed_profile(tmp_path):
    """The acceptance: the export of the committed profile (its other engine starts as
    repeatability samples), every case run by `aisimulate predict` with direct interpolation
    and fallback denied; each refusal fails."""
    first, *others = _profile_artifacts()
    code, text = sdbench_export([first], tmp_path, "--system", SYSTEM, *REVISIONS,
                                *(arg for other in others for arg in ("--repeats-from",
                                                                      str(other))))
    print(text)
    assert code == 0, text
    root = next(p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("."))
    predict_as_exported(root)                # as written: nothing added by hand
    config = json.loads((root / PREDICT_FILE).read_text())
    results = run_cases(config, tmp_path)
    print_cases(f"predict on {first.relative_to(ROOT)} (nextn {config['engine']['nextn']}, "
                f"nextn_accepted {config['engine']['nextn_accepted']})", results)
    refused = {case: r for case, r in results.items() if not isinstance(r, dict)}
    assert not refused, refused


