"""`sdbench export --to aisimulate`, imported by the consumer's own code: AISimulate's
validate_native_collection and select_native_measurements on the envelopes, its collector
route (aggregate_cell, write_formal_database, validate_formal_database_commit), and its Rust
loader on the exporter's speculative table at nextn=K, whose every predicted step time must
equal the measured one. Also: the consumer refuses the counterparts of our refusals, takes
what only our refusals guard (mixed graph modes, a synthetic prefix: asserted and printed),
and our exporter never writes an autoregressive identity for K > 0.

Runs only in the consumer's environment (scripts/consumer-test.sh, tox -e consumer); the main
suite never collects it (tests/conftest.py), because the consumer's wheel registers a
top-level package named `collector`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import importlib.metadata
import io
import json
import math
import os
import shutil
import statistics
from pathlib import Path

import pytest

os.environ.setdefault("AIC_ALLOW_UNLISTED_VERSIONS", "1")  # vLLM 0.26.0 is an unlisted version

import aisimulate_core
import pyarrow.parquet as pq
from aisimulate_core.fpm_profile import load_fpm_profile
from aisimulate_core.sdk.fpm_identity import LEGACY_EXECUTION_IDENTITY
from aisimulate_core.sdk.rust_engine_step import (
    ForwardPassPerfModelConfig,
    RustForwardPassPerfModel,
)
from collector.fpm_forward.capabilities import resolve_model_capability
from collector.fpm_forward.config import FPMCollectionOptions
from collector.fpm_forward.database import (
    aggregate_cell,
    validate_formal_database_commit,
    write_formal_database,
)
from collector.fpm_forward.native_artifact import (
    select_native_measurements,
    validate_native_collection,
)
from collector.fpm_forward.planner import FPMCell, _backend_policies, _cell_id
from collector.fpm_forward.repeatability import (
    load_repeatability_deployment,
    load_repeatability_source,
)
from collector.fpm_forward.runtime_memory import validate_saved_plan
from collector.fpm_forward.types import ParallelTopology

from pytest_sdbench.aisimulate.export.round_identity import assert_speculative, execution_profile
from pytest_sdbench.aisimulate.export.selecting import export_name
from pytest_sdbench.aisimulate.export.vocabulary import (
    CONSUMER,
    CONSUMER_VERSION,
    ENVELOPE_FILE,
    MANIFEST_FILE,
    PROFILE_FILE,
    PROVENANCE_FILE,
    SELECTOR_PREFIX,
    TABLE_POLICY,
)
from pytest_sdbench.artifact.store import read_json
from pytest_sdbench.cli import main

ROOT = Path(__file__).resolve().parents[2]
CPU_ARTIFACT = ROOT / "tests" / "fixtures" / "cpu-agg-v4.json"
PACKAGED_SYSTEMS = Path(aisimulate_core.__file__).parent / "systems"
SYSTEM = "h200_sxm"
# Presets run with dummy weights: they have no revision, so the user gives one.
REVISIONS = ["--target-revision", "1" * 40, "--draft-revision", "2" * 40]
# Schema v3 artifacts do not record the engine settings nor KV bytes per token. The committed
# v3 H200 artifacts are oracle runs of the qwen3-0.6b preset: its oracle limits (presets.py),
# vLLM's kv_cache_dtype 'auto', vLLM 0.26's gpu_memory_utilization default (0.92, as the v4
# artifacts of the same host record it), and 2 (K, V) x 29 layers (28 target + 1 draft) x 8
# KV heads x 128 x 2 bytes per token. Given as the user's facts, recorded as such.
V3_QWEN3_FACTS = ["max_num_seqs=8", "max_num_batched_tokens=2048", "max_model_len=2048",
                  "gpu_memory_utilization=0.92", "kv_cache_dtype=auto",
                  "kv_bytes_per_token=118784"]


def _header(path: Path) -> dict:
    data = read_json(path)
    return {"schema_version": data.get("schema_version"), "device": data.get("device")}


def _h200(version: int) -> list[Path]:
    committed = (p for pattern in ("sdbench-*.json", "sdbench-*.json.gz", "sdbench-*.json.xz")
                 for p in ROOT.glob(f"docs/evidence/h200*/**/{pattern}"))
    return [p for p in sorted(committed)
            if _header(p) == {"schema_version": version, "device": "cuda"}]


def _params(paths: list[Path], what: str) -> list:
    if not paths:
        return [pytest.param(None, marks=pytest.mark.skip(
            reason=f"no {what} is committed under docs/evidence/h200*/ yet"))]
    return [pytest.param(p, id=str(p.relative_to(ROOT / "docs" / "evidence"))) for p in paths]


# --- running the exporter (the real CLI) ------------------------------------------------------

def sdbench_export(paths: list[Path], out: Path, *extra: str) -> tuple[int, str]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["export", *map(str, paths), "--to", "aisimulate", "--out", str(out),
                     *extra])
    return code, buffer.getvalue()


def export_h200(path: Path, out: Path, acceptance_length: float | None = None,
                graph_modes: dict[str, str] | None = None) -> tuple[Path, dict, str]:
    """Export as a user would: revisions (and, for v3, the engine facts) given. Refused first
    where a phase mixes graph modes or an AL sweep collides (only for those reasons), then
    exported one acceptance length and one graph mode of a phase at a time."""
    graph_modes = graph_modes or {}
    identity = read_json(path)["identity"]
    extra = ["--system", SYSTEM]
    for role, (option, revision) in {"target": REVISIONS[:2], "draft": REVISIONS[2:]}.items():
        if identity[role]["revision"]["status"] != "resolved":   # a preset's dummy weights
            extra += [option, revision]
    if _header(path)["schema_version"] == 3:
        extra += [arg for fact in V3_QWEN3_FACTS for arg in ("--fact", fact)]
        # the oracle presets run eager unless --sdbench-cuda-graphs: mode 'none' is eager
        eager = identity["cudagraph_mode"]["value"] == "none"
        extra += ["--fact", f"enforce_eager={str(eager).lower()}"]
    code, text = sdbench_export([path], out, *extra)
    if code == 1:
        reasons = [line for line in text.splitlines() if line.startswith("  - ")]
        mixed = any(".graph_mode: steps ran in" in line for line in reasons)
        collided = any("land on one consumer coordinate" in line for line in reasons)
        assert all(".graph_mode:" in line or "consumer coordinate" in line
                   for line in reasons), text
        assert collided == (acceptance_length is not None), text
        assert mixed or not graph_modes, text
        for phase, mode in graph_modes.items():
            extra += ["--graph-mode", f"{phase}={mode}"]
        if collided:
            extra += ["--acceptance-length", f"{acceptance_length}"]
        code, text = sdbench_export([path], out, *extra)
    assert code == 0, text
    root = out / export_name(read_json(path)["run_id"],
                                      acceptance_length, graph_modes)
    return root, json.loads((root / MANIFEST_FILE).read_text()), text


def acceptance_sweep(path: Path) -> list[float | None]:
    """The requested acceptance lengths of an artifact whose decode points collide (an AL
    sweep), each exported on its own; [None] when nothing collides."""
    decode = read_json(path)["grid"]["decode"]
    coordinates = [(p["batch_size"], p["context_tokens"]) for p in decode]
    if len(set(coordinates)) == len(coordinates):
        return [None]
    return sorted({p["acceptance_length"] for p in decode})


def graph_selections(path: Path, acceptance_length: float | None) -> list[dict[str, str]]:
    """The --graph-mode selections that export every point of a phase that ran in several
    CUDA-graph modes (among the points of the acceptance length), one mode at a time: as
    few exports as the phase with the most modes needs. [{}] when no phase mixes."""
    data = read_json(path)
    mixed = {}
    for phase in ("prefill", "decode"):
        modes = sorted({o["graph_mode"] for o in data.get(phase) or []
                        if acceptance_length is None or phase == "prefill"
                        or o["point"]["acceptance_length"] == acceptance_length})
        if len(modes) > 1:
            mixed[phase] = modes
    count = max((len(modes) for modes in mixed.values()), default=1)
    return [{phase: modes[min(i, len(modes) - 1)] for phase, modes in mixed.items()}
            for i in range(count)]


def _exports(paths: list[Path], what: str) -> list:
    """One test parameter per export: an artifact, one acceptance length of a sweep, one
    graph mode of each phase that mixes them."""
    params = [pytest.param(p, al, graph, id=f"{p.relative_to(ROOT / 'docs' / 'evidence')}"
                           f"{'' if al is None else f'-al{al:g}'}"
                           + "".join(f"-{phase}-{mode}" for phase, mode in graph.items()))
              for p in paths for al in acceptance_sweep(p) for graph in graph_selections(p, al)]
    return params or [pytest.param(None, None, None, marks=pytest.mark.skip(
        reason=f"no {what} is committed under docs/evidence/h200*/ yet"))]


# --- the consumer's plan of the exported cells ------------------------------------------------

def saved_plan(root: Path):
    """The export's collection plan as the consumer reads a campaign it did not plan
    (repeatability.load_repeatability_source: validate_saved_plan's hash, and an exact
    rebuild of every field)."""
    return load_repeatability_source(root / "campaign")


def check_plan_is_the_consumers(root: Path, manifest: dict, execution: tuple[str, ...]):
    """The export's plan under the consumer's own rules: its hash, its capability of the
    shipped config.json, its cell ids; the manifest's plan identity is that hash."""
    plan = saved_plan(root)
    saved = json.loads((root / "campaign" / "collection-plan.json").read_text())
    validate_saved_plan(saved)
    assert plan.sha256 == saved["sha256"] == manifest["plan_sha256"]
    precision = manifest["precision"]
    capability = resolve_model_capability(
        backend="vllm", model_path=manifest["model_path"], model_architecture=None,
        selected_ops=set(), has_model_cases=True, system=manifest["system"],
        requested_weight_quantizations=(precision["gemm_quant_mode"],),
        requested_kv_cache_dtypes=(precision["kv_cache_dtype"],),
        database_version=manifest["backend_version"], checkpoint_native_dtypes=True)
    assert capability.to_dict() == saved["capability"]
    topology = ParallelTopology(**manifest["topology"])
    for cell in plan.cells:
        assert cell.cell_id == _cell_id(
            backend="vllm", model_path=manifest["model_path"], system=manifest["system"],
            phase=cell.workload_kind, topology=topology,
            weight_quantization=capability.dtype.gemm_quant_mode,
            kv_cache_dtype=precision["kv_cache_dtype"], policy=plan.backend_policies[0],
            execution=execution)
        assert cell.execution_identity == tuple(execution)
    assert load_repeatability_deployment(root / "campaign") == {}
    return plan, capability


def legacy_plan(plan, profile: dict):
    """The consumer's plan of the same cells under its autoregressive (legacy) identity, for
    the trap the exporter never takes."""
    cells = tuple(dataclasses.replace(
        cell, execution_identity=LEGACY_EXECUTION_IDENTITY,
        cell_id=_cell_id(backend="vllm", model_path=plan.model_path, system=plan.system,
                         phase=cell.workload_kind, topology=cell.topology,
                         weight_quantization=cell.weight_quantization,
                         kv_cache_dtype=cell.kv_cache_dtype, policy=cell.backend_policy,
                         execution=LEGACY_EXECUTION_IDENTITY)) for cell in plan.cells)
    return dataclasses.replace(plan, cells=cells,
                               _fpm_profile_json=json.dumps(profile, sort_keys=True))


def rust_model(manifest: dict, profile: dict, *, nextn: int, systems: Path):
    config = ForwardPassPerfModelConfig(
        model=manifest["model_path"], system=manifest["system"], backend="vllm",
        worker_type="aggregated", backend_version=manifest["backend_version"],
        fpm_profile=profile, tp=manifest["topology"]["tp"], pp=1, attention_dp=1, nextn=nextn,
        estimation_mode="fpm_interpolation", database_mode="SILICON", fallback_policy="deny",
        estimator_config={"fpm_interpolation": {"method": "direct"}},
        systems_paths=(str(systems),))
    return RustForwardPassPerfModel.best_available(config)


def with_system_yaml(systems: Path, system: str) -> Path:
    """A consumer systems path: the export's data/ beside the consumer's own system YAML."""
    shutil.copy(PACKAGED_SYSTEMS / f"{system}.yaml", systems / f"{system}.yaml")
    return systems


def predict(model, row: dict) -> float:
    if row["workload_kind"] == "prefill":
        return model.predict_prefill_latency_total(
            row["batch_size"], row["total_prefill_tokens"], row["total_kv_read_tokens"])
    return model.predict_decode_latency_total(row["batch_size"], row["total_kv_read_tokens"])


def refused(function) -> str:
    """The consumer's own refusal message; fails the test when it accepts."""
    try:
        function()
    except Exception as error:  # noqa: BLE001 - any refusal of the consumer counts
        return f"{type(error).__name__}: {str(error).splitlines()[0][:240]}"
    pytest.fail("the consumer accepted it")


def validate_cells(plan, manifest: dict, root: Path) -> dict:
    collections = {}
    for cell in plan.cells:
        raw = root / "campaign" / "cells" / cell.cell_id / "raw"
        collection = validate_native_collection(cell, raw, expected_plan_sha256=plan.sha256,
                                                expected_attempt_id=manifest["attempt_id"])
        kept = select_native_measurements(collection, cell_id=cell.cell_id)
        points = [r for r in manifest["rows"] if r["phase"] == cell.workload_kind]
        assert len(kept) == len(collection.points) == len(points)
        assert sorted(p.rank_wall_times[0][1] for p in kept) == sorted(
            r["seconds"] for r in points)
        collections[cell.cell_id] = collection
    return collections


def measured_by_row(artifact_path: Path) -> dict:
    """(phase, point, repeat) -> the step time as the artifact file holds it, and each
    point's repeats (read from the JSON itself, not through the exporter's reader)."""
    data = read_json(artifact_path)
    times, repeats = {}, {}
    for phase in ("prefill", "decode"):
        for obs in data[phase]:
            seconds = obs["timing"]["seconds"]
            times[(phase, obs["point_index"], obs.get("repeat", 0))] = seconds
            repeats.setdefault((phase, obs["point_index"]), []).append(seconds)
    return {"times": times, "repeats": repeats, "k": data["speculative"]["draft_depth"]}


# --- the tests -----------------------------------------------------------------------------

def test_consumer_is_the_version_the_exporter_maps():
    assert importlib.metadata.version(CONSUMER) == CONSUMER_VERSION


def test_cpu_artifact_is_refused_and_its_envelopes_import(tmp_path):
    code, text = sdbench_export([CPU_ARTIFACT], tmp_path, "--system", SYSTEM, *REVISIONS)
    assert code == 1, text
    assert "device: 'cpu' (timing source host_perf_counter" in text
    assert not any(tmp_path.iterdir()), "a refused export leaves nothing behind"
    code, text = sdbench_export([CPU_ARTIFACT], tmp_path, "--envelope-only")
    assert code == 1, text     # a preset's dummy weights: no revision, even for envelopes
    assert "identity.target.revision: unresolved" in text
    code, text = sdbench_export([CPU_ARTIFACT], tmp_path, "--envelope-only", *REVISIONS)
    assert code == 0, text
    run_id = json.loads(CPU_ARTIFACT.read_text())["run_id"]
    manifest = json.loads((tmp_path / run_id / MANIFEST_FILE).read_text())
    assert manifest["mode"] == "envelope_only"
    assert manifest["table"] is None
    assert {manifest["facts"][n]["source"] for n in ("target_revision", "draft_revision")} == {
        "user"}
    for phase, cell in manifest["cells"].items():
        collection = validate_native_collection(
            envelope_cell(cell, phase), tmp_path / run_id / "campaign" / "cells" / cell / "raw",
            expected_plan_sha256=manifest["plan_sha256"],
            expected_attempt_id=manifest["attempt_id"])
        kept = select_native_measurements(collection, cell_id=cell)
        print(f"CPU envelope {phase}: validate_native_collection + select_native_measurements "
              f"kept {len(kept)} points")
        assert len(kept) == sum(r["phase"] == phase for r in manifest["rows"]) > 0
    # The truthful labels of a CPU step are ones the consumer's profile refuses.
    for scope in ("worker_model_step", "host_perf_counter"):
        profile = minimal_profile()
        profile["deployments"][0]["execution_profile"]["timing_scope"] = scope
        message = refused(lambda p=profile: load_fpm_profile(p))
        print(f"consumer refuses timing_scope={scope!r}: {message}")


def envelope_cell(cell_id: str, phase: str) -> FPMCell:
    """A consumer cell that names an envelope-only export's cell. No consumer identity
    exists for it (a CPU step has no timing scope the consumer knows): the identity here is
    neither the autoregressive one nor a round, and validate_native_collection reads only
    that it is not config-bound."""
    topology = ParallelTopology(tp=1, pp=1, dp=1, moe_tp=1, moe_ep=1, cp=1)
    policy = _backend_policies(FPMCollectionOptions(
        max_gpus=1, gpu_counts=(1,), parallel_presets=("tp",), parallel_axes=(),
        moe_backend="auto", attention_backend="auto", enable_wideep="false",
        enable_eplb="false", weight_quantizations=("bfloat16",), kv_cache_dtypes=("bfloat16",),
        vllm_max_model_len=4096, max_num_batched_tokens=4096, max_num_seqs=16,
        gpu_memory_utilization=0.9, worker_type="aggregated"), {}, backend="vllm")[0]
    return FPMCell(cell_id=cell_id, workload_kind=phase, topology=topology,
                   weight_quantization="bfloat16", kv_cache_dtype="bfloat16",
                   backend_policy=policy, gemm_quant_mode="bfloat16",
                   parallel_strategy="single",
                   execution_identity=("", "sdbench_envelope_only", "none", "text"))


def minimal_profile() -> dict:
    spec = execution_profile(3, "/draft", "2" * 40)
    return {"schema_version": 1, "model": "/target", "model_revision": "1" * 40,
            "architecture": "Qwen3ForCausalLM", "context_length": 2048, "num_experts": 0,
            "provenance": "test", "deployments": [{
                "system": SYSTEM, "backend": "vllm", "backend_version": "0.26.0",
                "tp": 1, "dp": 1, "moe_tp": 1, "moe_ep": 1, "gemm_quant_mode": "bfloat16",
                "moe_quant_mode": "bfloat16", "fmha_quant_mode": "bfloat16",
                "comm_quant_mode": "half", "kv_cache_dtype": "bfloat16",
                "worker_type": "aggregated", "execution_profile": spec,
                "resources": {"runtime_memory": {"kv_cache_bytes": 1 << 30,
                                                 "gpu_memory_utilization": 0.9,
                                                 "max_model_len": 2048, "provenance": "test"},
                              "kv_bytes_per_token": 118784, "cache_layout": "linear",
                              "max_num_tokens": 2048, "max_batch_size": 8,
                              "provenance": "test"}}]}


def check_import(root: Path, manifest: dict, artifact_path: Path) -> list[tuple]:
    """Every consumer step on one export; returns the predicted-vs-measured rows."""
    k = manifest["nextn"]
    profile = json.loads((root / PROFILE_FILE).read_text())
    model_profile = load_fpm_profile(profile)
    execution = model_profile.deployments[0].execution_identity(model_profile.model_revision)
    # Our selector is the consumer's Rust-normalized one, our cells its planner's.
    assert list(execution) == manifest["execution_identity"]
    assert_speculative(execution, k)
    plan, capability = check_plan_is_the_consumers(root, manifest, execution)
    assert {c.workload_kind: c.cell_id for c in plan.cells} == manifest["cells"]
    dtype = capability.dtype
    kv = manifest["precision"]["kv_cache_dtype"]
    assert manifest["precision"] == {
        "gemm_quant_mode": dtype.gemm_quant_mode, "moe_quant_mode": dtype.moe_quant_mode,
        "fmha_quant_mode": dtype.fmha_by_kv_dtype[kv], "comm_quant_mode": dtype.comm_quant_mode,
        "kv_cache_dtype": kv}
    assert manifest["fmha_resolution"] == dtype.fmha_resolution_by_kv_dtype[kv]
    assert manifest["parallel_strategy"] == plan.cells[0].parallel_strategy
    validate_cells(plan, manifest, root)

    # The consumer's collector route takes the envelopes as far as its own code goes: its
    # table carries the autoregressive policy, which its loader refuses for a round.
    attempts = {c.cell_id: manifest["attempt_id"] for c in plan.cells}
    collector_root = root.parent / f"{root.name}-collector-route"
    rows = [row for cell in plan.cells for row in aggregate_cell(
        plan, cell, root / "campaign" / "cells" / cell.cell_id,
        expected_attempt_id=manifest["attempt_id"])]
    parquet, metadata, skipped = write_formal_database(plan, rows,
                                                       systems_root=collector_root / "data")
    committed = validate_formal_database_commit(parquet, metadata, plan,
                                                expected_attempt_ids=attempts)
    assert not skipped
    assert committed["row_count"] == len(rows) == len(manifest["rows"])
    assert {json.loads(metadata.read_text())["measurement_policy"]} == {
        "dynamo_native_single_sample_v1"}
    message = refused(lambda: rust_model(manifest, profile, nextn=k,
                                         systems=with_system_yaml(collector_root, SYSTEM)))
    assert "speculative-round identity requires the native CUDA measurement policy" in message
    print(f"  collector route: aggregate_cell {len(rows)} rows -> write_formal_database -> "
          f"validate_formal_database_commit ok; its Rust loader refuses it: {message}")

    # The exporter's speculative table: committed, loaded at nextn=K, exact.
    table = manifest["table"]
    parquet, metadata = root / table["parquet"], root / table["metadata"]
    checkpoint = json.loads((root / "checkpoint" / "fpm_forward.json").read_text())
    assert checkpoint["plan_sha256"] == plan.sha256
    committed = validate_formal_database_commit(
        parquet, metadata, plan, expected_attempt_ids=attempts,
        expected_cell_rows=checkpoint["database"]["cell_rows"])
    assert committed["row_count"] == table["rows"] == len(manifest["rows"])
    model = rust_model(manifest, profile, nextn=k,
                       systems=with_system_yaml(root / table["systems_root"], SYSTEM))
    assert model.diagnostics()["provenance"]["selected_estimation_mode"] == "fpm_interpolation"
    measured = measured_by_row(artifact_path)
    assert measured["k"] == k
    table_rows = pq.read_table(parquet).to_pylist()
    # Each cell's rows ran in the CUDA-graph modes the manifest names (one, or 'mixed:A,B'
    # where the modes change only between adjacent coordinates).
    assert {phase: {r["sdbench_graph_mode"] for r in table_rows if r["workload_kind"] == phase}
            for phase in manifest["cells"]} == {
        phase: set(mode.removeprefix("mixed:").split(","))
        for phase, mode in manifest["graph_modes"].items()}
    compared = []
    for row in sorted(table_rows, key=lambda r: (r["workload_kind"] != "prefill",
                                                 r["sdbench_point_index"])):
        assert row["execution_profile"] == execution[1]
        assert row["measurement_policy"] == TABLE_POLICY
        phase, point = row["workload_kind"], row["sdbench_point_index"]
        seconds = measured["times"][(phase, point, row["sdbench_repeat"])]
        repeats = measured["repeats"][(phase, point)]
        # The row is one observation: for an odd count of repeats, the median one.
        if len(repeats) % 2:
            assert seconds == statistics.median(repeats)
        else:
            assert seconds == statistics.median_low(repeats)
        ours = seconds * 1000.0
        predicted = predict(model, row)
        compared.append((phase, point, row["batch_size"], row["total_prefill_tokens"],
                         row["total_kv_read_tokens"], row["sdbench_graph_mode"],
                         len(repeats), ours, predicted))
    print_table(root.name, k, compared)
    unequal = [c for c in compared if c[-1] != c[-2]]
    assert not unequal, f"{len(unequal)} predicted step times differ from the measured ones"
    return compared


def print_table(run_id: str, k: int, compared: list[tuple]) -> None:
    print(f"\n  run {run_id}, Rust loader at nextn={k}: predicted vs measured step time (ms)")
    print(f"  {'phase':7} {'pt':>3} {'B':>3} {'new':>6} {'kv':>7} {'graph':9} {'N':>2} "
          f"{'measured (artifact)':>22} {'predicted (loader)':>22}  equal")
    for phase, point, b, new, kv, graph, n, ours, predicted in compared:
        print(f"  {phase:7} {point:>3} {b:>3} {new:>6} {kv:>7} {graph:9} {n:>2} "
              f"{ours:>22.15f} {predicted:>22.15f}  {ours == predicted}")


def _agg(paths: list[Path]) -> list[Path]:
    return [p for p in paths if read_json(p)["mode"] == "agg"]


def _one_phase(paths: list[Path]) -> list[Path]:
    return [p for p in paths if read_json(p)["mode"] != "agg"]


@pytest.mark.parametrize("artifact_path, acceptance_length, graph_modes",
                         _exports(_agg(_h200(3)), "schema v3 H200 agg artifact"))
def test_v3_h200_artifact_with_user_facts_imports_exactly(artifact_path, acceptance_length,
                                                          graph_modes, tmp_path):
    root, manifest, text = export_h200(artifact_path, tmp_path, acceptance_length, graph_modes)
    print(text)
    assert set(manifest["user_facts"]) >= {"target_revision", "draft_revision",
                                           "max_num_seqs", "kv_bytes_per_token", "system"}
    assert all(manifest["facts"][n]["source"] == "user" for n in manifest["user_facts"])
    check_import(root, manifest, artifact_path)


@pytest.mark.parametrize("artifact_path", _params(_one_phase(_h200(3) + _h200(4)),
                                                  "one-phase H200 artifact"))
def test_one_phase_h200_artifact_is_refused_and_its_envelopes_import(artifact_path, tmp_path):
    """The consumer's loader needs both phases (see the table counterpart below): a prefill-
    or decode-only artifact is refused as a table, and its envelopes still validate."""
    code, text = sdbench_export([artifact_path], tmp_path, "--system", SYSTEM, *REVISIONS)
    assert code == 1, text
    assert "mode: " in text
    run_id = read_json(artifact_path)["run_id"]
    for graph in graph_selections(artifact_path, None):
        code, text = sdbench_export([artifact_path], tmp_path, "--envelope-only", *REVISIONS,
                                    *(f"--graph-mode={phase}={mode}"
                                      for phase, mode in graph.items()))
        assert code == 0, text
        root = tmp_path / export_name(run_id, None, graph)
        manifest = json.loads((root / MANIFEST_FILE).read_text())
        for phase, cell in manifest["cells"].items():
            collection = validate_native_collection(
                envelope_cell(cell, phase), root / "campaign" / "cells" / cell / "raw",
                expected_plan_sha256=manifest["plan_sha256"],
                expected_attempt_id=manifest["attempt_id"])
            kept = select_native_measurements(collection, cell_id=cell)
            assert len(kept) == sum(r["phase"] == phase for r in manifest["rows"]) > 0


@pytest.mark.parametrize("artifact_path, acceptance_length, graph_modes",
                         _exports(_agg(_h200(4)), "schema v4 H200 agg artifact"))
def test_v4_h200_artifact_imports_exactly(artifact_path, acceptance_length, graph_modes,
                                          tmp_path):
    """Every legacy v4 H200 agg artifact (the legacy production profiles, decode at the
    first decode step, among them) exported and imported exactly."""
    root, manifest, text = export_h200(artifact_path, tmp_path, acceptance_length, graph_modes)
    print(text)
    if acceptance_length is not None:
        assert manifest["selection"]["acceptance_length"] == acceptance_length
        assert manifest["selection"]["left_out"], "a sweep leaves the other ALs out"
        rows = pq.read_table(root / manifest["table"]["parquet"]).to_pylist()
        assert {r["sdbench_requested_acceptance_length"] for r in rows
                if r["workload_kind"] == "decode"} == {acceptance_length}
    # v4 records the engine's settings and KV bytes per token itself.
    for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len",
                 "gpu_memory_utilization", "kv_cache_dtype", "kv_bytes_per_token"):
        assert manifest["facts"][name]["source"].startswith("artifact "), name
    check_import(root, manifest, artifact_path)


def _first_h200() -> tuple[Path, float | None, dict[str, str]]:
    """The first legacy v4 H200 agg artifact (a legacy production profile: decode at the
    first decode step, `steady_step`), or the first v3 one: the export's mapping, not its
    figures, is what the tests on it check."""
    path = (_agg(_h200(4)) or _agg(_h200(3)))[0]
    sweep = acceptance_sweep(path)
    acceptance_length = sweep[len(sweep) // 2]
    return path, acceptance_length, graph_selections(path, acceptance_length)[0]


@pytest.fixture(scope="module")
def _exported_once(tmp_path_factory) -> tuple[Path, Path]:
    """The first H200 artifact (legacy v4, `_first_h200`) exported once for the module (about
    4 s an export): its root and a pristine copy of it."""
    path, acceptance_length, graph_modes = _first_h200()
    root, manifest, _ = export_h200(path, tmp_path_factory.mktemp("exported"),
                                    acceptance_length, graph_modes)
    with_system_yaml(root / manifest["table"]["systems_root"], SYSTEM)
    pristine = tmp_path_factory.mktemp("pristine") / root.name
    shutil.copytree(root, pristine)
    return root, pristine


@pytest.fixture
def exported(_exported_once):
    """The export as it was written, for each test (a test may edit it, or write beside
    it): restored in place from the pristine copy, since the export names its own absolute
    paths (the model folders). Its root, manifest, profile and systems folder."""
    root, pristine = _exported_once
    for entry in root.parent.iterdir():   # the export and what the last test wrote beside it
        shutil.rmtree(entry)
    shutil.copytree(pristine, root)
    manifest = json.loads((root / MANIFEST_FILE).read_text())
    profile = json.loads((root / PROFILE_FILE).read_text())
    return root, manifest, profile, root / manifest["table"]["systems_root"]


def test_consumer_refuses_a_draft_depth_it_was_not_measured_at(exported):
    _root, manifest, profile, systems = exported
    k = manifest["nextn"]
    for n in sorted({0, max(1, k - 1), min(5, k + 1)} - {k}):
        message = refused(lambda n=n: rust_model(manifest, profile, nextn=n, systems=systems))
        assert "nextn must match num_draft_tokens" in message
        print(f"nextn={n} against a K={k} table: {message}")
    for bad in (0, 6):
        wrong = copy.deepcopy(profile)
        wrong["deployments"][0]["execution_profile"]["num_draft_tokens"] = bad
        print(f"num_draft_tokens={bad}: {refused(lambda p=wrong: load_fpm_profile(p))}")


def test_consumer_refuses_unpinned_revisions(exported):
    _, _, profile, _ = exported
    for revision in ("main", "unresolved"):
        wrong = copy.deepcopy(profile)
        wrong["deployments"][0]["execution_profile"]["draft_revision"] = revision
        print(f"draft_revision={revision!r}: {refused(lambda p=wrong: load_fpm_profile(p))}")
    wrong = copy.deepcopy(profile)
    wrong["model_revision"] = "main"
    print(f"model_revision='main': {refused(lambda: load_fpm_profile(wrong))}")
    wrong["model_revision"] = "v1.0"   # pydantic takes it; the Rust selector does not
    message = refused(lambda: load_fpm_profile(wrong).deployments[0].execution_identity(
        wrong["model_revision"]))
    assert "40-hex" in message


def edited_cell(exported, phase: str, name: str, edit) -> tuple[FPMCell, Path, object]:
    """A copy of the export's cell of a phase (envelope and provenance) whose envelope
    edit(envelope) changes, its measured total resealed: the consumer's cell, the copy's
    raw folder and the consumer's plan."""
    root = exported[0]
    plan = saved_plan(root)
    cell = next(c for c in plan.cells if c.workload_kind == phase)
    raw = root.parent / name / "raw"
    shutil.copytree(root / "campaign" / "cells" / cell.cell_id / "raw", raw)
    envelope_path = next(raw.glob(f"*/{ENVELOPE_FILE}"))
    envelope = json.loads(envelope_path.read_text())
    edit(envelope)
    envelope["timing"]["measured_iteration_seconds"] = math.fsum(
        g["wall_time"] for g in envelope["iteration_groups"])
    envelope_path.write_text(json.dumps(envelope))
    return cell, raw, plan


def consumer_validates(manifest: dict, cell: FPMCell, raw: Path, plan) -> list:
    """The consumer's envelope validator and its per-coordinate selection; its refusal
    propagates."""
    collection = validate_native_collection(cell, raw, expected_plan_sha256=plan.sha256,
                                            expected_attempt_id=manifest["attempt_id"])
    return select_native_measurements(collection, cell_id=cell.cell_id)


def relabel_point(envelope: dict, index: int, **labels) -> None:
    """Change a result's point labels, and its iteration group's copy of that point."""
    envelope["results"][index]["point"].update(labels)
    envelope["iteration_groups"][index]["point"] = envelope["results"][index]["point"]


def test_consumer_takes_a_cell_of_mixed_graph_modes(exported):
    """Our graph-mode refusal has no consumer counterpart: a cell whose steps ran in two
    CUDA-graph modes, labelled per row and in execution_mode, passes the consumer's
    validator and selection, which read no graph label. Our refusal is the only guard."""
    _, manifest, _, _ = exported
    names = {"eager": "NONE", "piecewise": "PIECEWISE", "full": "FULL"}
    ours = manifest["graph_modes"]["decode"]
    other = next(mode for mode in names if mode != ours)

    def mix(envelope: dict) -> None:
        relabel_point(envelope, 0, sdbench_graph_mode=other,
                      expected_cudagraph_mode=names[other])
        envelope["execution_mode"] = f"mixed:{','.join(sorted({ours, other}))}"
    cell, raw, plan = edited_cell(exported, "decode", "mixed-graph-modes", mix)
    kept = consumer_validates(manifest, cell, raw, plan)
    modes = {m.point["sdbench_graph_mode"] for m in kept}
    assert modes == {ours, other}
    print(f"consumer ACCEPTS a decode cell of graph modes {sorted(modes)} ({len(kept)} points): "
          "only our export's refusal guards it")


def _skip_last(envelope: dict) -> None:
    """The envelope a run that skipped its last point writes: that point's result gone,
    the coverage and skipped_points saying so."""
    last = envelope["results"].pop()
    envelope["iteration_groups"].pop()
    expected = envelope["coverage"]["expected_points"]
    envelope["coverage"].update(completed_points=expected - 1, skipped_points=1)
    envelope["skipped_points"] = [{"benchmark_id": last["point"]["benchmark_id"],
                                   "reason": "timing never arrived"}]


def _partial(envelope: dict) -> None:
    _skip_last(envelope)
    envelope["status"] = "partial"


def _complete_but_skipped(envelope: dict) -> None:
    _skip_last(envelope)


def _short_coverage(envelope: dict) -> None:
    _skip_last(envelope)
    envelope["skipped_points"] = []
    envelope["coverage"]["skipped_points"] = 0


@pytest.mark.parametrize("edit, message", [
    (_partial, "invalid native terminal result envelope"),
    (_complete_but_skipped, "native result skipped work"),
    (_short_coverage, "native benchmark coverage is incomplete"),
], ids=["status-partial", "complete-with-skipped-points", "coverage-short"])
def test_consumer_refuses_a_partial_envelope(exported, edit, message):
    """Our refusal of a status other than complete has a consumer counterpart: its
    validator refuses an envelope that skipped a point, however it is labelled."""
    _, manifest, _, _ = exported
    cell, raw, plan = edited_cell(exported, "decode", edit.__name__.strip("_"), edit)
    refusal = refused(lambda: consumer_validates(manifest, cell, raw, plan))
    assert message in refusal
    print(f"{edit.__name__.strip('_')}: validate_native_collection refuses: {refusal}")


def test_consumer_takes_a_synthetic_prefix(exported):
    """Our synthetic-prefix refusal has no counterpart in the consumer's envelope path: a
    cached prefill result seeded with a fake prefix (Dynamo's fake_prefix, stamped
    prefill_fake_prefix) passes its validator and selection, and its collector route
    records the row as n/a, as it records a real prefix. The loader checks the table's
    label (it refuses a cached prefill row not labelled real_kv), and the table carries no
    other seed provenance: our export's refusal, and its real_kv label written for verified
    prefixes only, are the guard."""
    root, manifest, profile, systems = exported
    fake = {}

    def seed_fake_prefix(envelope: dict) -> None:
        index = next(i for i, r in enumerate(envelope["results"])
                     if r["point"]["total_kv_read_tokens"] > 0)
        result = envelope["results"][index]
        assert result["kv_seed_regime"] == "real_prefix"
        result["kv_seed_regime"] = "fake_prefix"
        relabel_point(envelope, index, sample_reasons=["explicit", "prefill_fake_prefix"],
                      sdbench_kv_seed_regime="synthetic_prefix")
        fake.update(result["point"])
    cell, raw, plan = edited_cell(exported, "prefill", "synthetic-prefix", seed_fake_prefix)
    kept = consumer_validates(manifest, cell, raw, plan)
    taken = [m for m in kept if m.point["benchmark_id"] == fake["benchmark_id"]]
    assert [m.kv_seed_regime for m in taken] == ["fake_prefix"]
    print(f"consumer ACCEPTS a fake-prefix cached prefill (B={fake['batch_size']}, new "
          f"{fake['total_prefill_tokens']}, KV {fake['total_kv_read_tokens']}): "
          f"validate_native_collection + select_native_measurements kept {len(kept)} points")
    rows = aggregate_cell(plan, cell, raw.parent, expected_attempt_id=manifest["attempt_id"])
    cached = {r["kv_seed_regime"] for r in rows if r["total_kv_read_tokens"] > 0}
    assert cached == {"n/a"}
    print(f"  its collector route (aggregate_cell) records every cached prefill row, fake or "
          f"real, as {sorted(cached)}")
    table = pq.read_table(root / manifest["table"]["parquet"]).to_pylist()
    row = next(r for r in table if r["workload_kind"] == "prefill"
               and r["total_kv_read_tokens"] > 0)
    assert row["kv_seed_regime"] == "real_kv"
    row["kv_seed_regime"] = "n/a"
    rewrite_table(root, manifest, table)
    message = refused(lambda: rust_model(manifest, profile, nextn=manifest["nextn"],
                                         systems=systems))
    assert "requires real_kv provenance" in message
    print(f"  its Rust loader reads the table's label only: a cached prefill row labelled "
          f"n/a: {message[:160]}")


def test_consumer_refuses_colliding_coordinates(exported):
    """Our collision refusal's counterparts: two decode points that differ only by
    acceptance length are refused by select_native_measurements and by the loader."""
    root, manifest, profile, systems = exported

    def collide(envelope: dict) -> None:
        clone = copy.deepcopy(envelope["results"][0])
        new_id = len(envelope["results"]) + 1
        clone["point"].update(benchmark_id=new_id, sdbench_requested_acceptance_length=1.0)
        clone["fpms"][0]["counter_id"] = new_id
        group = copy.deepcopy(envelope["iteration_groups"][0])
        group.update(benchmark_id=new_id, point=clone["point"])
        group["rank_results"][0]["fpms"] = clone["fpms"]
        envelope["results"].append(clone)
        envelope["iteration_groups"].append(group)
        envelope["coverage"].update(expected_points=new_id, completed_points=new_id)
    cell, raw, plan = edited_cell(exported, "decode", "collision", collide)
    message = refused(lambda: consumer_validates(manifest, cell, raw, plan))
    assert "conflicting FPM measurements" in message
    print(f"select_native_measurements: {message}")
    rows = pq.read_table(root / manifest["table"]["parquet"]).to_pylist()
    twin = dict(next(r for r in rows if r["workload_kind"] == "decode"), latency_ms=1.0)
    rewrite_table(root, manifest, [*rows, twin])
    message = refused(lambda: rust_model(manifest, profile, nextn=manifest["nextn"],
                                         systems=systems))
    assert "duplicate physical row key" in message
    print(f"Rust loader: {message[:160]}")


def rewrite_table(root: Path, manifest: dict, rows: list[dict]) -> None:
    """Replace the export's rows and reseal its commit record (a consumer-side edit)."""
    import pyarrow as pa
    table = root / manifest["table"]["parquet"]
    pq.write_table(pa.Table.from_pylist(rows), table, compression="zstd")
    metadata = root / manifest["table"]["metadata"]
    meta = json.loads(metadata.read_text())
    meta.update(row_count=len(rows),
                parquet_sha256=hashlib.sha256(table.read_bytes()).hexdigest())
    metadata.write_text(json.dumps(meta))


def test_consumer_refuses_a_table_of_one_phase(exported):
    """The counterpart of our refusal of one-phase artifacts: the loader needs both."""
    root, manifest, profile, systems = exported
    rows = pq.read_table(root / manifest["table"]["parquet"]).to_pylist()
    rewrite_table(root, manifest, [r for r in rows if r["workload_kind"] == "decode"])
    message = refused(lambda: rust_model(manifest, profile, nextn=manifest["nextn"],
                                         systems=systems))
    assert "no genuine measurements" in message
    print(f"decode rows only: {message[:200]}")


def test_exporter_never_writes_an_autoregressive_identity(exported, tmp_path):
    """The consumer's trap: the same envelopes under its autoregressive (legacy) identity are
    imported without complaint and load at nextn=0, returning EAGLE3 rounds as plain steps.
    Our export carries the round in every row and the profile, and refuses to write the
    legacy identity at all."""
    root, manifest, profile, systems = exported
    k = manifest["nextn"]
    assert profile["deployments"][0]["execution_profile"]["num_draft_tokens"] == k
    rows = pq.read_table(root / manifest["table"]["parquet"]).to_pylist()
    assert all(r["execution_profile"].startswith(SELECTOR_PREFIX) for r in rows)
    assert all(r["execution_profile"] != LEGACY_EXECUTION_IDENTITY[1] for r in rows)
    with pytest.raises(AssertionError, match="must carry its speculative round"):
        assert_speculative(LEGACY_EXECUTION_IDENTITY, k)
    ar = copy.deepcopy(profile)
    del ar["deployments"][0]["execution_profile"]
    message = refused(lambda: rust_model(manifest, ar, nextn=k, systems=systems))
    print(f"an autoregressive profile at nextn={k}: {message}")
    refused(lambda: rust_model(manifest, ar, nextn=0, systems=systems))
    # The trap itself, on the consumer's side: legacy identity cells over our envelopes.
    legacy_manifest = dict(manifest, cells={})
    plan = legacy_plan(saved_plan(root), ar)
    legacy_root = tmp_path / "legacy-route"
    for cell in plan.cells:
        ours = manifest["cells"][cell.workload_kind]
        raw = legacy_root / "campaign" / "cells" / cell.cell_id / "raw"
        shutil.copytree(root / "campaign" / "cells" / ours / "raw", raw)
        provenance = next(raw.glob(f"*/{PROVENANCE_FILE}"))
        provenance.write_text(json.dumps(dict(json.loads(provenance.read_text()),
                                              cell_id=cell.cell_id)))
        legacy_manifest["cells"][cell.workload_kind] = cell.cell_id
    legacy_rows = [row for cell in plan.cells for row in aggregate_cell(
        plan, cell, legacy_root / "campaign" / "cells" / cell.cell_id,
        expected_attempt_id=manifest["attempt_id"])]
    write_formal_database(plan, legacy_rows, systems_root=legacy_root / "systems" / "data")
    model = rust_model(manifest, ar, nextn=0,
                       systems=with_system_yaml(legacy_root / "systems", SYSTEM))
    silent = all(predict(model, row) == row["latency_ms"] for row in legacy_rows)
    print(f"legacy identity (execution_profile {LEGACY_EXECUTION_IDENTITY[1]!r}) over K={k} "
          f"envelopes loads at nextn=0 and returns the rounds as plain steps: {silent}")
    assert silent, "the consumer's silent autoregressive path changed; revisit the exporter"
