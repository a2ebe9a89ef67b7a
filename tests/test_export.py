"""`sdbench export --to aisimulate` without the consumer: every refusal names its field and
value and leaves nothing behind; the envelopes, profile and rows map the artifact exactly.
Real artifacts (the CPU fixture, the committed H200 ones), mutated and resealed where a case
needs one. The consumer's own code checks the same exports in tests/consumer (an environment
of its own); the parquet writer is replaced here by a JSON one (this suite has no pyarrow)."""

import copy
import hashlib
import json
import math
import statistics
from pathlib import Path

import pytest

from pytest_sdbench.aisimulate.export import (
    exporting,  # export_artifact looks up its writers
    system,
)
from pytest_sdbench.aisimulate.export.checks import _mode_crossings
from pytest_sdbench.aisimulate.export.exporting import export_artifact
from pytest_sdbench.aisimulate.export.options import ExportOptions
from pytest_sdbench.aisimulate.export.round_identity import (
    assert_speculative,
    cell_id,
    execution_profile,
    speculative_identity,
)
from pytest_sdbench.aisimulate.export.selecting import Selected
from pytest_sdbench.aisimulate.export.vocabulary import (
    MANIFEST_FILE,
    PREDICT_FILE,
    PROFILE_FILE,
    Refused,
    parallel_strategy,
    topology,
)
from pytest_sdbench.artifact.store import read_json
from pytest_sdbench.artifact.validate.report import validate_data
from pytest_sdbench.cli import main
from pytest_sdbench.wire import typed

from . import forge
from .conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[1]
CPU = FIXTURES / "cpu-agg-v4.json"
H200_EAGER = ROOT / "docs/evidence/h200/artifacts-eager/sdbench-agg-d7f9e6f72f75.json"
H200_GRAPH = ROOT / "docs/evidence/h200/artifacts-graph/sdbench-agg-150af679fb5a.json"
H200_DECODE = ROOT / "docs/evidence/h200/artifacts-eager/sdbench-decode-8df99a8a7f48.json"
REV_T, REV_D = "1" * 40, "2" * 40
REVISIONS = ["--target-revision", REV_T, "--draft-revision", REV_D]
# Presets run with dummy weights: an export of any kind, envelopes included, needs both.
ENVELOPES = ["--envelope-only", *REVISIONS]
USER_REVISIONS = {"target_revision": REV_T, "draft_revision": REV_D}
# The v3 H200 oracle runs of the qwen3-0.6b preset (see tests/consumer for where each
# value comes from); a v3 artifact does not record them, so the user gives them.
V3_FACTS = [arg for fact in ("max_num_seqs=8", "max_num_batched_tokens=2048",
                             "max_model_len=2048", "gpu_memory_utilization=0.92",
                             "kv_cache_dtype=auto", "kv_bytes_per_token=118784")
            for arg in ("--fact", fact)]


def export(capsys, paths, out, *extra) -> tuple[int, str]:
    code = main(["export", *map(str, paths), "--to", "aisimulate", "--out", str(out), *extra])
    return code, capsys.readouterr().out


def written(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir()) if out.exists() else []


def reseal(data: dict, tmp_path: Path, name: str = "mutated.json") -> Path:
    """The artifact with its integrity digests and measured total recomputed (a valid
    artifact of the case)."""
    data["measured_seconds"] = math.fsum(o["timing"]["seconds"]
                                         for _, o in forge.observations(data))
    for part in ("grid", "identity", "kv_capacity"):
        data["integrity"][f"{part}_digest"] = typed.digest(data[part])
    report = validate_data(copy.deepcopy(data))
    assert report.ok, report.errors
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def json_table(monkeypatch):
    """Table mode without pyarrow: the rows are written as JSON instead of parquet."""
    def write_rows(rows, dest, metadata):
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "rows.json").write_text(json.dumps(rows))
        return metadata
    monkeypatch.setattr(exporting, "write_table", write_rows)
    monkeypatch.setattr(exporting, "pyarrow_missing", lambda: False)


# --- refusals ---------------------------------------------------------------------------------

def test_cpu_artifact_is_refused_naming_its_timing(capsys, tmp_path):
    code, out = export(capsys, [CPU], tmp_path / "out", "--system", "h200_sxm", *REVISIONS)
    assert code == 1
    assert "device: 'cpu' (timing source host_perf_counter, scope worker_model_step)" in out
    assert "'model_step_cuda'" in out
    assert "--envelope-only" in out
    assert written(tmp_path / "out") == []


def test_refusals_name_every_unresolved_fact(capsys, tmp_path):
    code, out = export(capsys, [H200_EAGER], tmp_path)
    assert code == 1
    for field in ("identity.target.revision: unresolved (local checkpoint without a revision",
                  "identity.draft.revision: unresolved",
                  "identity.settings.max_num_seqs: unresolved (not recorded before "
                  "schema_version 4); the consumer needs it: pass --fact max_num_seqs=N",
                  "identity.settings.kv_cache_dtype: unresolved",
                  "kv_capacity.bytes_per_token: unresolved",
                  "system: the artifact's device 'NVIDIA H200' names no consumer system"):
        assert field in out, field
    assert "9 reason(s)" in out
    assert written(tmp_path) == []


def test_envelopes_need_both_revisions_too(capsys, tmp_path):
    """A dummy-weight preset has no revision: even an envelope-only export is refused until
    the user gives both (the engine facts stay optional there)."""
    code, out = export(capsys, [CPU], tmp_path, "--envelope-only")
    assert code == 1
    assert "2 reason(s)" in out
    for role, option in (("target", "--target-revision REV"), ("draft", "--draft-revision REV")):
        assert (f"identity.{role}.revision: unresolved (local checkpoint without a revision"
                in out), role
        assert f"pass {option}, recorded with source 'user'" in out, role
    code, out = export(capsys, [CPU], tmp_path, "--envelope-only", "--target-revision", REV_T)
    assert code == 1
    assert "1 reason(s)" in out
    assert "identity.draft.revision: unresolved" in out
    assert written(tmp_path) == []


def test_envelopes_refuse_an_unpinned_revision(capsys, tmp_path):
    path = _with_revisions(tmp_path, "main", "vllm_config.model_config.revision")
    code, out = export(capsys, [path], tmp_path / "out", "--envelope-only")
    assert code == 1
    assert "identity.target.revision: 'main' (artifact identity.target.revision" in out
    assert written(tmp_path / "out") == []


def test_user_fact_never_overrides_a_resolved_one(capsys, tmp_path):
    code, out = export(capsys, [CPU], tmp_path, "--envelope-only", "--fact", "max_num_seqs=8")
    assert code == 1
    assert ("identity.settings.max_num_seqs: the artifact holds 16 (source "
            "vllm_config.scheduler_config.max_num_seqs); the user's max_num_seqs=8 "
            "contradicts it") in out


def test_status_other_than_complete_is_refused(capsys, tmp_path, cpu_artifact_data):
    data = cpu_artifact_data
    data["decode"] = [o for o in data["decode"] if o["point_index"] != 3]
    data["summaries"] = [s for s in data["summaries"]
                         if (s["phase"], s["point_index"]) != ("decode", 3)]
    data["coverage"].update(completed=14, skipped=1, skipped_points=[
        {"phase": "decode", "point_index": 3, "reason": "timing never arrived"}])
    data["status"] = "partial"
    code, out = export(capsys, [reseal(data, tmp_path)], tmp_path / "out", "--envelope-only")
    assert code == 1
    assert ("status: 'partial' (coverage 14/15, skipped decode[3]: timing never arrived)"
            in out)


def test_a_point_skipped_in_a_phase_no_export_takes_leaves_the_envelopes_whole(
        capsys, tmp_path):
    """A v7 agg profile partial only for a mixed point (the H100 qwen3-8b profile's
    mixed[36]): prefill and decode, the phases exported, are complete, so it exports; the
    manifest keeps the artifact's status and names the skipped point. A skipped decode point
    is refused (test_status_other_than_complete_is_refused)."""
    data = json.loads(CPU_V7.read_text())
    index = 0
    data["mixed"] = [o for o in data["mixed"] if o["point_index"] != index]
    data["summaries"] = [s for s in data["summaries"]
                         if (s["phase"], s["point_index"]) != ("mixed", index)]
    cov = data["coverage"]
    cov.update(completed=cov["expected"] - 1, skipped=1, skipped_points=[
        {"phase": "mixed", "point_index": index, "reason": "admission split"}])
    data["status"] = "partial"
    out = tmp_path / "out"
    code, text = export(capsys, [reseal(data, tmp_path)], out, *ENVELOPES)
    assert code == 0, text
    manifest = json.loads(next(out.rglob("import-manifest.json")).read_text())
    assert manifest["artifact"]["status"] == "partial"
    assert manifest["phases_not_exported"]["mixed"]["skipped"] == [
        f"mixed[{index}]: admission split"]
    assert any("skipped in the artifact: mixed[0]: admission split" in w
               for w in manifest["warnings"])


def test_draft_depth_outside_the_window_is_refused(capsys, tmp_path, cpu_artifact_data):
    data = cpu_artifact_data
    data["speculative"]["draft_depth"] = 6
    data["identity"]["draft_depth"]["value"] = 6
    for point in data["grid"]["decode"] + data["grid"]["mixed"]:
        point["draft_depth"] = 6
    for obs in data["decode"] + data["mixed"]:
        obs["point"]["draft_depth"] = 6
        for request in obs["snapshot"]["requests"]:
            if request["new_tokens"] == 1:   # a decoding request (a mixed step's prefills: 0)
                request["draft_tokens"] = 6
        obs["snapshot"]["total_scheduled_tokens"] = sum(
            r["new_tokens"] + r["draft_tokens"] for r in obs["snapshot"]["requests"])
    code, out = export(capsys, [reseal(data, tmp_path)], tmp_path / "out", "--envelope-only")
    assert code == 1
    assert "speculative.draft_depth: K=6 lies outside the consumer's window 1-5" in out


def test_autoregressive_artifact_is_refused(capsys, tmp_path):
    code, out = export(capsys, [FIXTURES / "legacy-v1-autoregressive.json"], tmp_path,
                       "--envelope-only")
    assert code == 1
    assert "speculative.method: 'none'" in out
    assert "never writes an autoregressive" in out


def _al_sweep(tmp_path) -> Path:
    """The H200 eager agg artifact with a second decode point at decode[0]'s coordinate,
    requested at another acceptance length (as a production AL sweep has them)."""
    data = json.loads(H200_EAGER.read_text())
    twin = copy.deepcopy(data["decode"][0])
    data["grid"]["decode"].append(dict(twin["point"], acceptance_length=1.0))
    twin["point"]["acceptance_length"] = 1.0
    twin["point_index"] = len(data["grid"]["decode"]) - 1
    twin["native_iteration_id"] = twin["snapshot"]["native_iteration_id"] = \
        twin["timing"]["native_iteration_id"] = 10_000
    twin["timing"]["seconds"] *= 0.8
    data["decode"].append(twin)
    data["coverage"].update(expected=data["coverage"]["expected"] + 1,
                            completed=data["coverage"]["completed"] + 1)
    return reseal(data, tmp_path, "sweep.json")


def test_colliding_points_are_refused_naming_both(capsys, tmp_path):
    sweep = _al_sweep(tmp_path)
    code, out = export(capsys, [sweep], tmp_path / "out", "--envelope-only")
    assert code == 1
    assert ("decode[0] (B=1 ctx=256 K=3 AL=2.78) and decode[4] (B=1 ctx=256 K=3 AL=1) land "
            "on one consumer coordinate (batch 1, new 0, KV 256)") in out
    code, out = export(capsys, [sweep], tmp_path / "out", *ENVELOPES,
                       "--acceptance-length", "2.78")
    assert code == 0, out
    run_id = json.loads(sweep.read_text())["run_id"]
    manifest = json.loads((tmp_path / "out" / f"{run_id}-al2.78" / "import-manifest.json")
                          .read_text())
    assert manifest["selection"]["acceptance_length"] == 2.78
    assert manifest["selection"]["left_out"] == ["decode[4] (B=1 ctx=256 K=3 AL=1)"]
    assert [r["point_index"] for r in manifest["rows"] if r["phase"] == "decode"] == [0, 1, 2, 3]
    code, out = export(capsys, [sweep], tmp_path / "out", "--envelope-only",
                       "--acceptance-length", "3")
    assert code == 1
    assert "--acceptance-length 3: no decode point was requested at it" in out


def test_mixed_graph_modes_export_one_mode_at_a_time(capsys, tmp_path, json_table):
    """The consumer reads no CUDA-graph label and interpolates one curve per cell: a phase
    that ran in several modes is refused, and exports one mode at a time, the other points
    listed as left out."""
    table = ["--system", "h200_sxm", *REVISIONS, *V3_FACTS]
    code, out = export(capsys, [H200_GRAPH], tmp_path, *table)
    assert code == 1
    assert ("decode.graph_mode: steps ran in 2 modes (eager at points [3]; full at points "
            "[0, 1, 2]); the consumer reads no CUDA-graph label") in out
    assert "--graph-mode decode=MODE" in out
    assert written(tmp_path) == []
    run_id = json.loads(H200_GRAPH.read_text())["run_id"]
    for mode, points, left_out in (("full", [0, 1, 2], [3]), ("eager", [3], [0, 1, 2])):
        code, out = export(capsys, [H200_GRAPH], tmp_path, *table, "--graph-mode",
                           f"decode={mode}")
        assert code == 0, out
        root = tmp_path / f"{run_id}-decode-{mode}"
        manifest = json.loads((root / "import-manifest.json").read_text())
        assert manifest["graph_modes"] == {"prefill": "eager", "decode": mode}
        assert manifest["selection"]["graph_modes"] == {"decode": mode}
        assert [e.split(" ")[0] for e in manifest["selection"]["left_out"]] == \
            [f"decode[{i}]" for i in left_out]
        assert all(e.endswith(f"graph {'eager' if mode == 'full' else 'full'})")
                   for e in manifest["selection"]["left_out"])
        envelope = _envelopes(root, manifest)["decode"]
        assert envelope["execution_mode"] == mode
        assert [r["point"]["sdbench_point_index"] for r in envelope["results"]] == points
        rows = json.loads((root / manifest["table"]["parquet"]).with_name("rows.json")
                          .read_text())
        assert {r["sdbench_graph_mode"] for r in rows if r["workload_kind"] == "decode"} == \
            {mode}
    code, out = export(capsys, [H200_GRAPH], tmp_path / "out", *table,
                       "--graph-mode", "decode=piecewise")
    assert code == 1
    assert ("--graph-mode decode=piecewise: no decode point ran in it (eager at points [3]; "
            "full at points [0, 1, 2])") in out
    code, out = export(capsys, [H200_DECODE], tmp_path / "out", *ENVELOPES,
                       "--graph-mode", "prefill=eager")
    assert code == 1
    assert "--graph-mode prefill=eager: the artifact has no prefill phase" in out
    assert written(tmp_path / "out") == []


def test_synthetic_prefix_is_refused(capsys, tmp_path, cpu_artifact_data):
    data = cpu_artifact_data
    obs = next(o for o in data["prefill"] if o["point"]["cached_prefix_tokens"] > 0)
    for sample in data["prefill"]:   # every sample of the point (the export takes its median)
        if sample["point_index"] == obs["point_index"]:
            sample.update(kv_seed_regime="synthetic_prefix", cache_hit_tokens=[])
    code, out = export(capsys, [reseal(data, tmp_path)], tmp_path / "out", "--envelope-only")
    assert code == 1
    assert f"prefill[{obs['point_index']}].kv_seed_regime: 'synthetic_prefix'" in out


def test_one_phase_artifact_is_refused_as_a_table(capsys, tmp_path):
    code, out = export(capsys, [H200_DECODE], tmp_path, "--system", "h200_sxm", *REVISIONS,
                       *V3_FACTS)
    assert code == 1
    assert "mode: 'decode'; the consumer's loader needs prefill and decode" in out
    code, out = export(capsys, [H200_DECODE], tmp_path, *ENVELOPES)
    assert code == 0, out


CPU_V7 = FIXTURES / "cpu-agg-v7.json"   # 8 prefill, 4 decode and 3 mixed points, 3 rounds
NOT_EXPORTED = ("the consumer (AISimulate) imports one phase per file, prefill and decode, and "
                "has no mixed phase")


def test_mixed_rows_stay_out_of_the_export_which_says_so(capsys, tmp_path):
    """An agg artifact with mixed points exports its prefill and decode phases, one cell
    each as ever; its mixed rows are in no envelope, row or cell, and the output line, the
    warnings and the manifest say that they were not exported and why."""
    code, out = export(capsys, [CPU_V7], tmp_path, *ENVELOPES)
    assert code == 0, out
    data = json.loads(CPU_V7.read_text())
    n_rows, n_points = len(data["mixed"]), len(data["grid"]["mixed"])
    assert (n_rows, n_points) == (9, 3)
    root = tmp_path / data["run_id"]
    lines = out.splitlines()
    assert lines[0] == (f"EXPORTED {CPU_V7} -> {root} (envelopes only, no table; 9 mixed rows "
                        "NOT exported (no mixed phase in the consumer))")
    warning = (f"mixed: 9 rows of 3 mixed points not exported: {NOT_EXPORTED}; they stay in "
               "the artifact, in no envelope, table or plan of this export")
    assert f"  warning: {warning}" in lines
    manifest = json.loads((root / MANIFEST_FILE).read_text())
    assert manifest["phases_not_exported"] == {
        "mixed": {"points": 3, "rows": 9, "skipped": [], "reason": NOT_EXPORTED}}
    assert warning in manifest["warnings"]
    assert list(manifest["cells"]) == list(manifest["graph_modes"]) == ["prefill", "decode"]
    assert sorted(p.name for p in (root / "campaign" / "cells").iterdir()) == \
        sorted(manifest["cells"].values())
    mixed_ids = {o["native_iteration_id"] for o in data["mixed"]}
    envelopes = _envelopes(root, manifest)
    for phase, envelope in envelopes.items():
        assert envelope["config"] == {"mode": phase}
        assert len(envelope["results"]) == len(data["grid"][phase])
        ids = {r["point"]["sdbench_native_iteration_id"] for r in envelope["results"]}
        assert ids <= {o["native_iteration_id"] for o in data[phase]}
        assert not ids & mixed_ids
    rows = manifest["rows"]
    assert [r["phase"] for r in rows] == ["prefill"] * 8 + ["decode"] * 4
    assert not {r["native_iteration_id"] for r in rows} & mixed_ids


def _mixed_only(tmp_path) -> Path:
    """The v7 fixture cut to its mixed phase: a `--sdbench-mode mixed` artifact."""
    data = forge.keep_phases(forge.load("cpu-v7"), "mixed", ("mixed",))
    return reseal(data, tmp_path, "mixed-only.json")


def test_a_mixed_only_artifact_has_nothing_to_export(capsys, tmp_path):
    path = _mixed_only(tmp_path)
    for extra in (ENVELOPES, ["--system", "h200_sxm", *REVISIONS]):
        code, out = export(capsys, [path], tmp_path / "out", *extra)
        assert code == 1
        assert (f"  - mode: 'mixed' (9 mixed rows of 3 points); {NOT_EXPORTED}: nothing to "
                "export (collect prefill and decode points, mode agg, for the consumer)") \
            in out.splitlines()
        assert "mode: 'mixed'; the consumer's loader" not in out   # said once
    assert written(tmp_path / "out") == []


def test_no_graph_mode_selects_a_mixed_phase(capsys, tmp_path):
    code, out = export(capsys, [CPU_V7], tmp_path / "out", *ENVELOPES,
                       "--graph-mode", "mixed=eager")
    assert code == 2
    assert "--graph-mode: expected PHASE=MODE with PHASE one of prefill, decode and" in out
    assert written(tmp_path / "out") == []


def test_unusable_inputs_exit_2(capsys, tmp_path):
    (tmp_path / "text.json").write_text("not json")
    assert export(capsys, [tmp_path / "text.json"], tmp_path / "out")[0] == 2
    assert export(capsys, [tmp_path / "absent.json"], tmp_path / "out")[0] == 2
    code, out = export(capsys, [CPU], tmp_path / "out", "--fact", "max_num_seqs")
    assert code == 2
    assert "--fact: expected NAME=VALUE" in out
    code, out = export(capsys, [CPU], tmp_path / "out", "--fact", "gpu_memory_utilization=2")
    assert code == 2
    assert "out of range" in out
    code, out = export(capsys, [CPU], tmp_path / "out", "--target-revision", "main")
    assert code == 2
    assert "a revision is a full 40-hex git commit, got 'main'" in out
    for bad in ("decode", "decode=cudagraph", "draft=full"):
        code, out = export(capsys, [CPU], tmp_path / "out", "--graph-mode", bad)
        assert code == 2
        assert "--graph-mode: expected PHASE=MODE" in out
    code, out = export(capsys, [CPU], tmp_path / "out", "--graph-mode", "decode=full",
                       "--graph-mode", "decode=eager")
    assert code == 2
    assert "--graph-mode decode: given twice" in out
    code, out = export(capsys, [CPU], tmp_path / "out", "--system", "../h200")
    assert code == 2
    assert "--system" in out
    assert written(tmp_path / "out") == []


def test_table_needs_pyarrow(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(exporting, "pyarrow_missing", lambda: True)
    code, out = export(capsys, [H200_EAGER], tmp_path / "out", "--system", "h200_sxm",
                       *REVISIONS, *V3_FACTS)
    assert code == 2
    assert "pip install 'pytest-sdbench[export]'" in out
    assert written(tmp_path / "out") == []


# --- what is written --------------------------------------------------------------------------

def _envelopes(root: Path, manifest: dict) -> dict:
    return {phase: json.loads(next((root / "campaign/cells" / cell).glob("raw/*/benchmark.json"))
                              .read_text()) for phase, cell in manifest["cells"].items()}


def test_envelopes_map_each_observation_exactly(capsys, tmp_path):
    code, out = export(capsys, [CPU], tmp_path, *ENVELOPES)
    assert code == 0, out
    data = json.loads(CPU.read_text())
    root = tmp_path / data["run_id"]
    assert oct(root.stat().st_mode & 0o777) != oct(0o700)
    manifest = json.loads((root / "import-manifest.json").read_text())
    assert manifest["mode"] == "envelope_only"
    assert manifest["table"] is None
    assert manifest["facts"]["target_revision"] == {"value": REV_T, "source": "user"}
    assert manifest["facts"]["draft_revision"] == {"value": REV_D, "source": "user"}
    assert manifest["user_facts"] == ["draft_revision", "target_revision"]
    assert not (root / "fpm_profile.json").exists()
    assert not (root / "systems").exists()
    for phase, envelope in _envelopes(root, manifest).items():
        observations = data[phase]
        assert envelope["schema_version"] == 2
        assert envelope["config"] == {"mode": phase}
        assert envelope["status"] == "complete"
        assert envelope["dp"] == {"rank": 0, "size": 1}
        assert [r["point"]["benchmark_id"] for r in envelope["results"]] == \
            list(range(1, len(observations) + 1))
        assert envelope["coverage"]["expected_points"] == len(observations)
        assert [g["point"] for g in envelope["iteration_groups"]] == \
            [r["point"] for r in envelope["results"]]
        for result, obs in zip(envelope["results"], observations, strict=True):
            fpm, requests = result["fpms"][0], obs["snapshot"]["requests"]
            assert fpm["wall_time"] == obs["timing"]["seconds"]
            assert fpm["timing_scope"] == "worker_model_step"   # the CPU's own label
            assert result["point"]["batch_size"] == len(requests)
            assert result["point"]["total_kv_read_tokens"] == sum(r["kv_tokens"] for r in requests)
            scheduled = fpm["scheduled_requests"]
            if phase == "prefill":
                assert scheduled["sum_prefill_tokens"] == sum(r["new_tokens"] for r in requests)
                regime = {"none": "not_applicable", "real_prefix": "real_prefix"}
                assert result["kv_seed_regime"] == regime[obs["kv_seed_regime"]]
                assert ("prefill_real_seed" in result["point"]["sample_reasons"]) == \
                    (obs["kv_seed_regime"] == "real_prefix")
            else:
                assert scheduled["num_decode_requests"] == len(requests)
                assert result["kv_seed_regime"] == "real_kv"
        assert envelope["timing"]["measured_iteration_seconds"] == math.fsum(
            o["timing"]["seconds"] for o in observations)
        assert envelope["timing"]["measured_iteration_seconds"] <= \
            envelope["timing"]["benchmark_elapsed_seconds"]
        provenance = json.loads(next((root / "campaign/cells" / manifest["cells"][phase])
                                     .glob("raw/*/collector-provenance.json")).read_text())
        assert provenance["cell_id"] == manifest["cells"][phase]
        assert provenance["plan_sha256"] == manifest["plan_sha256"]
        assert provenance["producer"]["artifact_sha256"] == \
            hashlib.sha256(CPU.read_bytes()).hexdigest()


def test_table_export_maps_the_profile_and_rows(capsys, tmp_path, json_table):
    code, out = export(capsys, [H200_EAGER], tmp_path, "--system", "h200_sxm", *REVISIONS,
                       *V3_FACTS)
    assert code == 0, out
    data = json.loads(H200_EAGER.read_text())
    root = tmp_path / data["run_id"]
    manifest = json.loads((root / "import-manifest.json").read_text())
    assert manifest["user_facts"] == sorted(
        ["draft_revision", "gpu_memory_utilization", "kv_bytes_per_token", "kv_cache_dtype",
         "max_model_len", "max_num_batched_tokens", "max_num_seqs", "system",
         "target_revision"])
    assert manifest["facts"]["engine_version"]["source"].startswith(
        "artifact identity.engine_version")
    profile = json.loads((root / "fpm_profile.json").read_text())
    deployment = profile["deployments"][0]
    assert profile["model_revision"] == REV_T
    assert profile["context_length"] == 2048
    assert deployment["execution_profile"] == {
        "kind": "speculative_round", "method": "eagle3", "num_draft_tokens": 3,
        "draft_model": str(root / "model" / "draft"), "draft_revision": REV_D,
        "timing_scope": "model_step_cuda"}
    resources = deployment["resources"]
    kv = data["kv_capacity"]
    assert resources["runtime_memory"]["kv_cache_bytes"] == \
        kv["num_blocks"] * kv["block_size"] * 118784
    assert (resources["max_num_tokens"], resources["max_batch_size"]) == (2048, 8)
    assert deployment["kv_cache_dtype"] == "bfloat16"
    assert deployment["tp"] == 1
    for role in ("target", "draft"):
        text = (root / "model" / role / "config.json").read_bytes()
        assert "sha256:" + hashlib.sha256(text).hexdigest() == \
            data["identity"][role]["config_digest"]["value"]
    rows = json.loads((root / manifest["table"]["parquet"]).with_name("rows.json").read_text())
    assert len(rows) == len(data["prefill"]) + len(data["decode"]) == manifest["table"]["rows"]
    execution = manifest["execution_identity"]
    for row in rows:
        obs = data[row["workload_kind"]][row["sdbench_point_index"]]
        assert row["latency_ms"] == obs["timing"]["seconds"] * 1000.0
        assert row["execution_profile"] == execution[1]
        assert (row["measurement_policy"], row["timing_scope"], row["measurement_reduction"],
                row["source_sample_count"]) == ("vllm_native_fpm_model_step_cuda_v1",
                                                "model_step_cuda", "single_sample", 1)
        reads_kv = row["workload_kind"] == "decode" or row["total_kv_read_tokens"] > 0
        assert row["kv_seed_regime"] == ("real_kv" if reads_kv else "n/a")
        assert row["cell_id"] == manifest["cells"][row["workload_kind"]]
    assert len({tuple(r[k] for k in ("cell_id", "batch_size", "total_prefill_tokens",
                                     "total_kv_read_tokens")) for r in rows}) == len(rows)
    assert_speculative(execution, 3)


def test_config_must_be_the_checkpoint_the_engine_ran(capsys, tmp_path, json_table):
    from pytest_sdbench.engine.presets import materialize
    tiny_target, _ = materialize("tiny", tmp_path / "models")
    code, out = export(capsys, [H200_EAGER], tmp_path / "out", "--system", "h200_sxm",
                       *REVISIONS, *V3_FACTS, "--target-config", str(tiny_target))
    assert code == 1
    assert ("identity.target.config_digest: sha256:7d32c73ed61579a4eb5592ae1cde9d1a0f4e4d46506"
            "abb2fc23b1424b7ee3dcb, but --target-config") in out



def test_config_not_at_hand_is_refused(tmp_path, cpu_artifact_data):
    data = cpu_artifact_data
    data["identity"]["draft"]["model"]["value"] = str(tmp_path / "absent" / "draft")
    options = ExportOptions(system="h200_sxm", known_configs={},
                                       user_facts={"target_revision": REV_T,
                                                   "draft_revision": REV_D})
    with pytest.raises(Refused) as refused:
        export_artifact(reseal(data, tmp_path), tmp_path / "out", options)
    assert any(r.startswith("identity.draft.config_digest: sha256:") and
               "no config.json with that digest is at hand" in r for r in refused.value.reasons)


def _with_revisions(tmp_path, target: str, source: str) -> Path:
    data = json.loads(H200_EAGER.read_text())
    for role, value in (("target", target), ("draft", REV_D)):
        data["identity"][role]["revision"] = {"status": "resolved", "value": value,
                                              "source": source, "reason": None}
    return reseal(data, tmp_path, "revised.json")


def test_resolved_revisions_are_the_artifacts_and_must_be_pinned(capsys, tmp_path, json_table):
    path = _with_revisions(tmp_path, REV_T, "user")   # given at collection time
    code, out = export(capsys, [path], tmp_path / "out", "--system", "h200_sxm", *V3_FACTS)
    assert code == 0, out
    run_id = json.loads(path.read_text())["run_id"]
    manifest = json.loads((tmp_path / "out" / run_id / "import-manifest.json").read_text())
    assert manifest["facts"]["target_revision"] == {
        "value": REV_T, "source": "artifact identity.target.revision (user)"}
    assert "target_revision" not in manifest["user_facts"]
    code, out = export(capsys, [path], tmp_path / "out", "--system", "h200_sxm", *V3_FACTS,
                       "--target-revision", "3" * 40)
    assert code == 1
    assert "the user's target_revision='3333" in out
    path = _with_revisions(tmp_path, "main", "vllm_config.model_config.revision")
    code, out = export(capsys, [path], tmp_path / "out2", "--system", "h200_sxm", *V3_FACTS)
    assert code == 1
    assert ("identity.target.revision: 'main' (artifact identity.target.revision "
            "(vllm_config.model_config.revision)) is not a pinned 40-hex commit") in out


@pytest.mark.parametrize("factors, want_repeat", [((1.5, 1.2), 2), ((0.9, 1.4, 0.8), 1)],
                         ids=["3-repeats-median", "4-repeats-lower-median"])
def test_repeats_export_one_real_observation(capsys, tmp_path, cpu_artifact_data, factors,
                                             want_repeat):
    data = forge.repeat_points(cpu_artifact_data, factors)
    path = reseal(data, tmp_path)
    code, out = export(capsys, [path], tmp_path / "out", *ENVELOPES)
    assert code == 0, out
    root = tmp_path / "out" / data["run_id"]
    manifest = json.loads((root / "import-manifest.json").read_text())
    n = len(factors) + 1
    for phase, envelope in _envelopes(root, manifest).items():
        for result in envelope["results"]:
            point = result["point"]
            items: dict[int, list[float]] = {}   # a sample: one work item's steps
            for o in data[phase]:
                if o["point_index"] == point["sdbench_point_index"]:
                    items.setdefault(o["repeat"], []).append(o["timing"]["seconds"])
            times = sorted(statistics.median_low(steps) for steps in items.values())
            assert point["sdbench_repeat"] == want_repeat
            assert point["sdbench_repeats"] == n
            assert result["fpms"][0]["wall_time"] == statistics.median_low(times)
            if n % 2:
                assert result["fpms"][0]["wall_time"] == statistics.median(times)
            assert point["sdbench_selection"] == ("median" if n % 2 else "median_low")


def test_preset_configs_are_the_files_a_preset_writes(tmp_path):
    from pytest_sdbench.engine.presets import PRESETS, config_texts, materialize
    texts = config_texts()
    for name in PRESETS:
        for folder in materialize(name, tmp_path):
            data = (folder / "config.json").read_bytes()
            assert texts[hashlib.sha256(data).hexdigest()][0].encode() == data


def test_tensor_parallel_maps_to_the_consumers_tp_preset(tmp_path, cpu_artifact_data):
    assert topology(2) == {"tp": 2, "pp": 1, "dp": 1, "moe_tp": 1, "moe_ep": 1,
                                      "cp": 1}
    assert (parallel_strategy(1), parallel_strategy(2)) == ("single", "tp")
    precision = {"gemm_quant_mode": "bfloat16", "kv_cache_dtype": "bfloat16"}
    ids = {cell_id(model_path="/m", system="h200_sxm", phase="decode", tp=tp,
                              precision=precision, execution=("", "x", "none", "text"))
           for tp in (1, 2)}
    assert len(ids) == 2     # the topology is part of the cell's identity
    data = cpu_artifact_data
    data["identity"]["pipeline_parallel_size"]["value"] = 2
    options = ExportOptions(envelope_only=True)
    with pytest.raises(Refused) as refused:
        export_artifact(reseal(data, tmp_path), tmp_path / "out", options)
    assert any(r.startswith("identity.pipeline_parallel_size: 2; the consumer's speculative")
               for r in refused.value.reasons)


def test_never_an_autoregressive_identity():
    with pytest.raises(AssertionError, match="must carry its speculative round"):
        assert_speculative(("", "full", "none", "text"), 3)
    spec = execution_profile(3, "/draft", REV_D)
    execution = speculative_identity(REV_T, spec)
    assert_speculative(execution, 3)
    with pytest.raises(AssertionError):
        assert_speculative(execution, 2)      # a round of another K
    with pytest.raises(AssertionError):
        execution_profile(0, "/draft", REV_D)


def test_a_failed_export_leaves_nothing_and_a_new_one_replaces_the_old(
        capsys, tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert export(capsys, [CPU], out, *ENVELOPES)[0] == 0
    run_id = json.loads(CPU.read_text())["run_id"]
    before = (out / run_id / "import-manifest.json").read_text()

    def broken(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(exporting, "build_envelope", broken)
    with pytest.raises(OSError, match="disk full"):
        export_artifact(CPU, out, ExportOptions(
            envelope_only=True, user_facts=USER_REVISIONS))
    assert written(out) == [run_id]     # no staging folder left, the old export intact
    assert (out / run_id / "import-manifest.json").read_text() == before
    monkeypatch.undo()
    assert export(capsys, [CPU], out, "--envelope-only", "--target-revision", REV_T,
                  "--draft-revision", "3" * 40)[0] == 0
    assert written(out) == [run_id]
    manifest = json.loads((out / run_id / "import-manifest.json").read_text())
    assert manifest["facts"]["draft_revision"]["value"] == "3" * 40


# --- planning with the consumer ----------------------------------------------------------------

PRODUCTION = ROOT / "docs/evidence/h200/production/sdbench-agg-36506276d78b.json.xz"
PRODUCTION_START_2 = ROOT / "docs/evidence/h200/production/sdbench-agg-3bb1fd58da6e.json.xz"
PRODUCTION_K1 = ROOT / "docs/evidence/h200/production/sdbench-agg-8b571b189cc2.json.xz"
PRODUCTION_ARGS = ["--system", "h200_sxm", *REVISIONS, "--acceptance-length", "2.78",
                   "--graph-mode", "prefill=eager"]


def _production(capsys, out, *extra, artifact: Path = PRODUCTION) -> tuple[Path, dict]:
    code, text = export(capsys, [artifact], out, *PRODUCTION_ARGS, *extra)
    assert code == 0, text
    root = next(p for p in out.iterdir() if p.is_dir() and not p.name.startswith("."))
    return root, json.loads((root / MANIFEST_FILE).read_text())


def test_the_consumers_plan_names_the_exported_points_and_binds_every_record(
        capsys, tmp_path, json_table):
    """One hash, the consumer's plan's, in the envelopes' provenance, the receipts, the rows
    and the checkpoint; the plan's frozen manifest is the exported coordinates (tests/consumer
    checks the hash itself with the consumer's validate_saved_plan)."""
    root, manifest = _production(capsys, tmp_path)
    plan = json.loads((root / "campaign" / "collection-plan.json").read_text())
    sha = plan["sha256"]
    assert manifest["plan_sha256"] == sha
    assert (plan["schema_name"], plan["schema_version"]) == ("aic_fpm_collection_plan", 11)
    assert json.loads((root / "campaign" / "generator-overrides.json").read_text()) == {}
    points = plan["options"]["benchmark_points"]
    text = json.dumps(points["payload"], sort_keys=True, separators=(",", ":"))
    assert hashlib.sha256(text.encode()).hexdigest() == points["sha256"]
    for phase in ("prefill", "decode"):
        exported = [(r["batch_size"], r["total_prefill_tokens"], r["total_kv_read_tokens"])
                    for r in manifest["rows"] if r["phase"] == phase]
        assert [(p["batch_size"], p.get("total_prefill_tokens", 0), p["total_kv_read_tokens"])
                for p in points["payload"][phase]] == exported
        raw = next((root / "campaign" / "cells" / manifest["cells"][phase] / "raw").iterdir())
        assert json.loads((raw / "collector-provenance.json").read_text())["plan_sha256"] == sha
        assert json.loads((raw / "point_manifest_receipt.json").read_text()) == {
            "plan_sha256": sha, "cell_id": manifest["cells"][phase],
            "attempt_id": manifest["attempt_id"], "sha256": points["sha256"], "phase": "after"}
    rows = json.loads((root / manifest["table"]["parquet"]).with_name("rows.json").read_text())
    assert {r["source_plan_sha256"] for r in rows} == {sha}
    checkpoint = json.loads((root / "checkpoint" / "fpm_forward.json").read_text())
    assert checkpoint["plan_sha256"] == sha
    assert set(checkpoint["cells"]) == set(manifest["cells"].values())
    assert checkpoint["database"]["row_count"] == len(rows)


def test_facts_the_consumer_reads_come_from_the_artifact(capsys, tmp_path, json_table):
    """The attention backend the engine resolved (not 'auto'), one sample a row beside the
    single_sample reduction, and nextn_accepted from the rows' acceptance."""
    root, manifest = _production(capsys, tmp_path)
    artifact = read_json(PRODUCTION)
    backend = artifact["identity"]["attention_backend"]["value"]
    assert manifest["facts"]["attention_backend"] == {
        "value": backend,
        "source": "artifact identity.attention_backend (model_runner.attn_groups)"}
    profile = json.loads((root / PROFILE_FILE).read_text())
    assert profile["deployments"][0]["attention_backend"] == backend
    rows = json.loads((root / manifest["table"]["parquet"]).with_name("rows.json").read_text())
    assert {(r["attention_backend"], r["measurement_reduction"], r["source_sample_count"],
             r["measurement_repeats"]) for r in rows} == {(backend, "single_sample", 1, 1)}
    runs = [r["sdbench_run_acceptance_length"] for r in rows if r["workload_kind"] == "decode"]
    config = json.loads((root / PREDICT_FILE).read_text())
    assert config["engine"]["nextn_accepted"] == round(statistics.fmean(runs) - 1, 4)
    assert config["engine"]["nextn"] == 3
    assert config["engine"]["enable_chunked_prefill"] is True
    assert manifest["user_facts"] == ["draft_revision", "system", "target_revision"]


def test_the_consumers_system_description_is_brought_in_when_its_package_is_found(
        capsys, tmp_path, json_table, monkeypatch):
    """`aisimulate predict -c predict.json` reads systems/<system>.yaml beside the table: the
    export copies the consumer's own (its package's systems/, found without importing it),
    and records where it came from."""
    package = tmp_path / "site" / "aisimulate_core"
    (package / "systems").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the export must not import me')\n")
    (package / "systems" / "h200_sxm.yaml").write_text("name: h200_sxm\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    root, manifest = _production(capsys, tmp_path / "out")
    assert (root / "systems" / "h200_sxm.yaml").read_text() == "name: h200_sxm\n"
    record = manifest["table"]["system_file"]
    assert record["path"] == "systems/h200_sxm.yaml"
    assert record["source"].endswith(": aisimulate_core/systems/h200_sxm.yaml")
    assert record["sha256"] == hashlib.sha256(b"name: h200_sxm\n").hexdigest()
    config = json.loads((root / PREDICT_FILE).read_text())
    assert config["engine"]["systems_paths"] == [str(root / "systems")]
    assert not any("h200_sxm.yaml" in w for w in manifest["warnings"])


def test_without_the_consumers_package_the_export_says_in_one_line_what_to_add(
        capsys, tmp_path, json_table, monkeypatch):
    monkeypatch.setattr(system, "SYSTEM_PACKAGE", "aisimulate_core_absent_here")
    code, out = export(capsys, [PRODUCTION], tmp_path, *PRODUCTION_ARGS)
    assert code == 0, out
    root = next(p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert not (root / "systems" / "h200_sxm.yaml").exists()
    manifest = json.loads((root / MANIFEST_FILE).read_text())
    assert manifest["table"]["system_file"] == {"path": "systems/h200_sxm.yaml", "source": None,
                                                "sha256": None}
    (line,) = [line for line in out.splitlines() if "h200_sxm.yaml" in line]
    assert line == ("  warning: systems/h200_sxm.yaml is not in the export: the consumer's "
                    "package (aisimulate_core_absent_here) is not importable here; before "
                    "`aisimulate predict -c predict.json`, copy aisimulate_core_absent_here/"
                    f"systems/h200_sxm.yaml from the consumer's environment to {root}/systems/ "
                    "(or export from that environment, which brings it in)")


def test_nextn_accepted_is_checked_against_the_rows(capsys, tmp_path, json_table):
    code, out = export(capsys, [PRODUCTION], tmp_path / "a", *PRODUCTION_ARGS,
                       "--nextn-accepted", "2.5")
    assert code == 1
    assert ("--nextn-accepted 2.5: the decode rows were measured at acceptance lengths "
            "2.000-3.000 (nextn_accepted 1.000-2.000, K=3)") in out
    assert written(tmp_path / "a") == []
    _, manifest = _production(capsys, tmp_path / "b", "--nextn-accepted", "1.95")
    assert manifest["acceptance"]["nextn_accepted"] == 1.95
    assert manifest["acceptance"]["source"] == "user"
    assert any("more than 5% off the rows' mean" in w for w in manifest["warnings"])


def test_repeatability_takes_one_sample_per_engine_start_of_back_to_back_repeats(
        capsys, tmp_path, json_table):
    """Schema v4 repeats are back to back: adjacent steps, not repetitions. Each engine start
    gives a point one sample; two starts are 2 of the 5 the consumer's rule needs."""
    root, manifest = _production(capsys, tmp_path, "--repeats-from", str(PRODUCTION_START_2))
    report = json.loads((root / "repeatability.json").read_text())
    assert [s["sample_kind"] for s in report["engine_starts"]] == ["engine_start"] * 2
    assert report["status"] == manifest["repeatability"]["status"] == "incomplete"
    for point in report["points"]:
        assert point["sample_count"] == 2
        first = point["samples"][0]
        assert first["back_to_back_repeats"] == 5
        assert first["seconds"] == point["source_seconds"]   # the exported row's observation
    code, out = export(capsys, [PRODUCTION], tmp_path / "k1", *PRODUCTION_ARGS,
                       "--repeats-from", str(PRODUCTION_K1))
    assert code == 1
    assert f"--repeats-from {PRODUCTION_K1}: integrity.identity_digest" in out


REPEATABILITY = ROOT / "docs/evidence/h200/repeatability"
# Issue 17's H200 pairs: two engine starts of 5 rounds each on the K=3 production grid
REPEATABILITY_PAIRS = {
    "qwen3-0.6b": (REPEATABILITY / "sdbench-agg-046e3aacf413.json.xz",
                   REPEATABILITY / "sdbench-agg-9aa6bd49eaa6.json.xz"),
    "qwen3-8b": (REPEATABILITY / "qwen3-8b-5rounds/sdbench-agg-k3-8200f51bb8f5.json.xz",
                 REPEATABILITY / "qwen3-8b-5rounds/sdbench-agg-k3-2427be80c94d.json.xz"),
}


# What docs/export.md ("Repeatability") publishes of each pair: the verdict, the exported
# points, how many of them are unstable, the median CV and agreement in percent.
PUBLISHED_REPEATABILITY = {"qwen3-0.6b": ("failed", 64, 40, 8.6, 3.1),
                           "qwen3-8b": ("failed", 64, 32, 5.0, 0.6)}


@pytest.mark.parametrize("preset", REPEATABILITY_PAIRS)
def test_repeatability_of_two_h200_starts_in_rounds_is_judged(capsys, tmp_path, json_table,
                                                               preset):
    """Issue 17's H200 pairs (5 rounds each, two engine starts): one sample per round, 10 a
    point, so the consumer's rule gives a verdict (passed or failed), never incomplete; the
    verdict follows from the points' own statuses, and is the one docs/export.md
    publishes."""
    first, second = REPEATABILITY_PAIRS[preset]
    root, _ = _production(capsys, tmp_path, "--repeats-from", str(second), artifact=first)
    report = json.loads((root / "repeatability.json").read_text())
    print(f"repeatability of the {preset} H200 pair: {report['status']} {report['point_counts']}, "
          f"CV {report['cv']}, agreement {report['source_relative_difference']}")
    assert [s["sample_kind"] for s in report["engine_starts"]] == ["round", "round"]
    for point in report["points"]:
        assert point["sample_count"] == 10
        assert sorted((s["engine_start"], s["round"]) for s in point["samples"]) == \
            [(start, r) for start in (0, 1) for r in range(5)]
        assert point["status"] in ("passed", "unstable")
    failed = report["point_counts"].get("unstable", 0) + report["source_agreement_failed"]
    assert report["status"] == ("failed" if failed else "passed")
    status, points, unstable, cv, agreement = PUBLISHED_REPEATABILITY[preset]
    assert (report["status"], len(report["points"]), report["point_counts"].get("unstable")) \
        == (status, points, unstable)
    assert (round(100 * report["cv"]["median"], 1),
            round(100 * report["source_relative_difference"]["median"], 1)) == (cv, agreement)


# The planning profile (issue 35): 5 rounds of the consumer's grid in one engine start, and
# what docs/export.md ("Repeatability") publishes of it.
PLANNING = ROOT / "docs/evidence/h200/aisimulate/sdbench-agg-k3-7747be92372d.json.xz"
PUBLISHED_PLANNING = ("failed", 957, 722, 235, 13.9, 0.0)


def test_repeatability_of_the_planning_profile_is_judged_for_every_point(capsys, tmp_path,
                                                                         json_table):
    """Five rounds, five samples a point: every point passed or unstable, none incomplete,
    and the verdict and counts are the ones docs/export.md publishes."""
    code, text = export(capsys, [PLANNING], tmp_path, "--system", "h200_sxm", *REVISIONS)
    assert code == 0, text
    root = next(p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("."))
    report = json.loads((root / "repeatability.json").read_text())
    assert {point["sample_count"] for point in report["points"]} == {5}
    assert {point["status"] for point in report["points"]} <= {"passed", "unstable"}
    status, points, unstable, passed, cv, agreement = PUBLISHED_PLANNING
    assert (report["status"], len(report["points"]), report["point_counts"]) == \
        (status, points, {"unstable": unstable, "passed": passed})
    assert (round(100 * report["cv"]["median"], 1),
            round(100 * report["source_relative_difference"]["median"], 1)) == (cv, agreement)


def test_repeatability_counts_five_samples_as_the_consumer_does():
    """The consumer's rule on constructed samples: CV with n - 1 against 5%, agreement of
    the median with the row against 5%."""
    from pytest_sdbench.aisimulate.repeatability import _point
    steady = [{"seconds": s} for s in (1.00, 1.01, 0.99, 1.02, 0.98)]
    assert _point("decode", 0, 1.0, steady)["status"] == "passed"
    assert _point("decode", 0, 1.0, steady)["source_agreement"] == "passed"
    assert _point("decode", 0, 1.1, steady)["source_agreement"] == "failed"
    noisy = [{"seconds": s} for s in (1.0, 1.2, 0.8, 1.1, 0.9)]
    assert _point("decode", 0, 1.0, noisy)["status"] == "unstable"
    assert _point("decode", 0, 1.0, steady[:4])["status"] == "incomplete"


def test_a_v3_artifact_has_a_plan_only_with_the_users_eager_fact(capsys, tmp_path, json_table):
    table = ["--system", "h200_sxm", *REVISIONS, *V3_FACTS]
    code, out = export(capsys, [H200_EAGER], tmp_path / "a", *table)
    assert code == 0, out
    assert "no consumer collection plan: identity.settings.enforce_eager unresolved" in out
    code, out = export(capsys, [H200_EAGER], tmp_path / "b", *table, "--fact",
                       "enforce_eager=true")
    assert code == 0, out
    root = next((tmp_path / "b").iterdir())
    plan = json.loads((root / "campaign" / "collection-plan.json").read_text())
    assert plan["options"]["enforce_eager"] is True
    assert plan["options"]["cudagraph_mode"] == "NONE"
    code, out = export(capsys, [H200_EAGER], tmp_path / "c", *table, "--fact",
                       "enforce_eager=maybe")
    assert code == 2
    assert "--fact enforce_eager: expected true or false, got 'maybe'" in out


def _selected(points):
    """Selected steps of made-up coordinates (batch, per-request new, per-request KV, mode)."""
    from types import SimpleNamespace
    chosen = []
    for i, (batch, new, kv, mode) in enumerate(points):
        requests = [SimpleNamespace(new_tokens=new, kv_tokens=kv) for _ in range(batch)]
        obs = SimpleNamespace(snapshot=SimpleNamespace(requests=requests), graph_mode=mode,
                              point_index=i)
        chosen.append(Selected("prefill", obs, ()))
    return chosen


def test_graph_modes_may_change_only_between_adjacent_token_counts():
    """A prefill token curve of batch 3 measured at 170 tokens a request (piecewise) and 171
    (eager): no query lies between; 170 and 200 leave room for one."""
    adjacent = _selected([(3, 64, 0, "piecewise"), (3, 170, 0, "piecewise"),
                          (3, 171, 0, "eager"), (3, 1024, 0, "eager")])
    assert _mode_crossings("prefill", adjacent) == []
    gap = _selected([(3, 170, 0, "piecewise"), (3, 200, 0, "eager")])
    assert _mode_crossings("prefill", gap) == [
        "batch 3: tokens 510 (piecewise) to 600 (eager)"]
    along_kv = _selected([(1, 64, 0, "piecewise"), (1, 64, 32, "eager")])
    assert _mode_crossings("prefill", along_kv) == [
        "batch 1: KV 0 (piecewise) to 32 (eager)"]


def test_rounds_give_one_sample_each_back_to_back_repeats_one_per_start():
    """Schema v5: observations carry `round` and the policy says
    repeat_order 'rounds': each round is a sample; back-to-back repeats are one."""
    from types import SimpleNamespace

    from pytest_sdbench.aisimulate.repeatability import assess

    def artifact(run_id, order, times):
        observations = [SimpleNamespace(point_index=0, repeat=i, round=i,
                                        timing=SimpleNamespace(seconds=t))
                        for i, t in enumerate(times)]
        policy = SimpleNamespace(repeat_order=order) if order else SimpleNamespace()
        return SimpleNamespace(run_id=run_id, measurement_policy=policy, decode=observations)
    rounds = artifact("a", "rounds", [1.00, 1.02, 0.99, 1.01, 0.98])
    report = assess(rounds, [], {"decode": [(0, 1.00)]})
    assert report["points"][0]["sample_count"] == 5
    assert report["status"] == "passed"
    noisy = artifact("b", "rounds", [1.0, 1.3, 0.8, 1.1, 0.9])
    assert assess(noisy, [], {"decode": [(0, 1.0)]})["status"] == "failed"
    back_to_back = artifact("c", "back_to_back", [1.00, 1.02, 0.99, 1.01, 0.98])
    report = assess(back_to_back, [artifact("d", None, [1.0, 1.1, 0.9])],
                    {"decode": [(0, 1.00)]})
    assert report["points"][0]["sample_count"] == 2
    assert report["status"] == "incomplete"


def test_a_link_planted_at_the_exports_name_is_replaced_not_followed(capsys, tmp_path):
    """In an output folder others can write, a link at <run_id> to a folder of the user's
    must not make the export move that folder aside and remove it."""
    out, victim = tmp_path / "out", tmp_path / "victim"
    out.mkdir()
    victim.mkdir()
    (victim / "precious").write_text("x")
    run_id = json.loads(CPU.read_text())["run_id"]
    (out / run_id).symlink_to(victim)
    assert export(capsys, [CPU], out, *ENVELOPES)[0] == 0
    assert (victim / "precious").read_text() == "x"
    assert not (out / run_id).is_symlink()
    assert (out / run_id / "import-manifest.json").is_file()
@pytest.mark.parametrize("where", ["file", "proc"])
def test_an_unwritable_out_is_one_line_and_exit_2(tmp_path, capsys, where):
    (tmp_path / "afile").write_text("")
    out, said = {"file": (tmp_path / "afile" / "e", f"{tmp_path / 'afile' / 'e'} cannot be "
                          f"created: {tmp_path / 'afile'} is not a directory"),
                 "proc": (Path("/proc/e"), "/proc is not writable (to create /proc/e)")}[where]
    code, printed = export(capsys, [CPU], out, *ENVELOPES)
    assert code == 2
    assert printed.splitlines() == [f"sdbench export: --out: {said}"]
