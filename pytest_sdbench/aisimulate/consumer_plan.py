"""The consumer's records of a collection, for an export: its collection plan
(collector/fpm_forward/planner.py, schema 11) hashed by its own canonical rule
(runtime_memory.validate_saved_plan), the deployment inputs that hash names
(generator-overrides.json), the per-cell receipts of a frozen point manifest
(runner._validate_points_receipts) and its collector checkpoint (runner, schema v3).

Written here, never imported from the consumer (the plugin's environment has no AISimulate);
tests/consumer/test_aisimulate_plan.py loads every record with the consumer's own readers
(validate_saved_plan, load_repeatability_source, validate_native_collection with the plan's
hash, validate_formal_database_commit with the checkpoint's row digests).

The plan states what this package collected in the consumer's words: the engine's limits as
its FPMCollectionOptions, the engine's own CUDA graphs (its runtime prefill policy), the
exported points as its frozen explicit manifest, the cells of the speculative identity, and
the profile. Its point_generation names Dynamo's scheduler as the owner because that block
is a fixed vocabulary of the consumer's schema (its reader rebuilds it verbatim); the
producer of the points is recorded in the envelopes' provenance and the export manifest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .grids import prefill_sampling

PLAN_SCHEMA = ("aic_fpm_collection_plan", 11)
PLAN_FILE, OVERRIDES_FILE = "collection-plan.json", "generator-overrides.json"
CHECKPOINT_DIR, CHECKPOINT_FILE = "checkpoint", "fpm_forward.json"
CHECKPOINT_SCHEMA = "aic-fpm-collector-checkpoint-v3"
RECEIPT_FILE = "point_manifest_receipt.json"
POINTS_SCHEMA_VERSION = 3
POINT_SOURCE = "dynamo_native_self_benchmark"
EXECUTION_COLUMNS = ("model_config_sha256", "execution_profile", "engram_residency",
                     "input_modality")
# Its deployment-input defaults (config.with_kv_warmup_defaults): real-KV warm-up for decode
# and real-prefix seeding for cached prefill, both what this package's collector does.
KV_WARMUP_DEFAULTS = (("DYN_BENCH_KV_WARMUP", "on"), ("DYN_BENCH_PREFILL_REAL_SEED", "on"))
# vLLM's cudagraph_mode as the artifact records it -> the consumer's spelling.
CUDAGRAPH_MODE = {"none": "NONE", "piecewise": "PIECEWISE", "full": "FULL",
                  "full_decode_only": "FULL_DECODE_ONLY",
                  "full_and_piecewise": "FULL_AND_PIECEWISE"}
# The consumer's capability of the architectures this exporter maps (its
# capabilities.resolve_model_capability for an unquantized dense checkpoint with no exact
# collector case: the registered family template). tests/consumer checks each against it.
CAPABILITY_BY_ARCHITECTURE: dict[str, dict[str, object]] = {
    "Qwen3ForCausalLM": {
        "model_family": "LLAMA", "is_moe": False, "attention_source": "dense_attention",
        "attention_kind": "dense_gqa", "support_level": "family_template",
        "template_id": "aic_family:llama:dense_gqa", "template_version": 1,
        "support_reason": ("no exact collector model case; derived from the registered AIC "
                           "model family"),
        "allow_pure_tp": False},
}


def canonical_hash(payload: object) -> str:
    """The consumer's canonical hash (planner._canonical_hash)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def generator_overrides() -> dict:
    """The deployment inputs of an export: none of the user's, with the consumer's resolved
    warm-up defaults, as its semantic_generator_overrides freezes them."""
    return {"K8sConfig": {"extra_env": [{"name": n, "value": v} for n, v in KV_WARMUP_DEFAULTS]}}


def points_manifest(coordinates: Mapping[str, Sequence[tuple[int, int, int]]]
                    ) -> tuple[dict, str]:
    """Its benchmark-points manifest of (batch, new, KV) totals per phase and the sha256 of
    its canonical text (config._freeze_benchmark_points)."""
    payload: dict[str, object] = {"schema_version": POINTS_SCHEMA_VERSION}
    for phase in ("prefill", "decode"):
        payload[phase] = [
            {"batch_size": b, "total_prefill_tokens": n, "total_kv_read_tokens": kv}
            if phase == "prefill" else {"batch_size": b, "total_kv_read_tokens": kv}
            for b, n, kv in coordinates.get(phase, ())]
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return payload, hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class PlanInputs:
    """What the plan states, each taken from the artifact or the export's resolved facts."""
    model_path: str
    system: str
    version: str
    tp: int
    strategy: str
    architecture: str
    config: dict                       # the target's config.json
    precision: Mapping[str, str]       # gemm/moe/fmha/comm quant modes, kv_cache_dtype
    attention_backend: str             # the engine's, or 'auto' where unresolved
    cells: Mapping[str, tuple[str, tuple[str, ...]]]   # phase -> (cell_id, execution identity)
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    gpu_memory_utilization: float
    cudagraph_mode: str                # the consumer's spelling
    capture_sizes: tuple[int, ...]     # the engine's (empty: eager)
    enforce_eager: bool
    warmup_iterations: int
    points: Mapping[str, Sequence[tuple[int, int, int]]]
    profile: dict
    aic_revision: str


def capability(inputs: PlanInputs) -> dict | None:
    """Its ModelCapabilityProfile.to_dict of the checkpoint, or None for an architecture this
    exporter does not map."""
    known = CAPABILITY_BY_ARCHITECTURE.get(inputs.architecture)
    if known is None:
        return None
    config_json = json.dumps(inputs.config, sort_keys=True, separators=(",", ":"),
                             ensure_ascii=False)
    return {"architecture": inputs.architecture, **known,
            "aic_database_version": inputs.version,
            "model_config": {"source_kind": "local",
                             "sha256": hashlib.sha256(config_json.encode()).hexdigest(),
                             "payload": inputs.config},
            "dtype": dtype_profile(inputs)}


def dtype_profile(inputs: PlanInputs) -> dict:
    """Its ResolvedDTypeProfile.to_dict for an unquantized checkpoint (checkpoint-native
    fmha)."""
    p, kv = inputs.precision, inputs.precision["kv_cache_dtype"]
    return {"gemm_quant_mode": p["gemm_quant_mode"], "moe_quant_mode": p["moe_quant_mode"],
            "fmha_quant_mode": p["fmha_quant_mode"], "comm_quant_mode": p["comm_quant_mode"],
            "native_kv_cache_dtype": p["gemm_quant_mode"], "kv_cache_dtypes": [kv],
            "fmha_resolution": "checkpoint_native",
            "fmha_by_kv_dtype": {kv: p["fmha_quant_mode"]},
            "fmha_resolution_by_kv_dtype": {kv: "checkpoint_native"}}


def backend_policy(attention_backend: str) -> dict:
    """Its BackendPolicy.to_dict: the engine's attention backend recorded as resolved (the
    consumer's own planner pins none; it records 'auto', engine decided)."""
    resolved = attention_backend != "auto"
    return {"policy_id": (f"resolved-attention_backend={attention_backend}" if resolved
                          else "baseline_auto"),
            "generator_overrides": {}, "expected_markers": {},
            "aic_fields": {"moe_backend": None,
                           "attention_backend": attention_backend if resolved else None,
                           "enable_wideep": False, "enable_eplb": False},
            "admission_reason": ("the attention backend the engine resolved at start-up "
                                 "(artifact identity.attention_backend), not pinned"
                                 if resolved else
                                 "AIC automatic baseline for the selected model/backend")}


def topology(tp: int) -> dict[str, int]:
    return {"tp": tp, "pp": 1, "dp": 1, "moe_tp": 1, "moe_ep": 1, "cp": 1}


def _cell(inputs: PlanInputs, phase: str, cell_id: str, execution: tuple[str, ...]) -> dict:
    p, kv = inputs.precision, inputs.precision["kv_cache_dtype"]
    return {"cell_id": cell_id,
            "execution_identity": dict(zip(EXECUTION_COLUMNS, execution, strict=True)),
            "input_text_sha256": "", "workload_kind": phase, "point_source": POINT_SOURCE,
            "topology": topology(inputs.tp), "parallel_strategy": inputs.strategy,
            "weight_quantization": p["gemm_quant_mode"], "kv_cache_dtype": kv,
            "resolved_dtypes": {"gemm_quant_mode": p["gemm_quant_mode"],
                                "moe_quant_mode": p["moe_quant_mode"],
                                "fmha_quant_mode": p["fmha_quant_mode"],
                                "comm_quant_mode": p["comm_quant_mode"],
                                "kvcache_quant_mode": kv,
                                "fmha_resolution": "checkpoint_native"},
            "backend_policy": backend_policy(inputs.attention_backend)}


def options(inputs: PlanInputs, points: dict, points_sha256: str) -> dict:
    """Its FPMCollectionOptions.to_dict for the engine this package ran: its limits, the
    engine's own graphs (runtime prefill policy), the frozen points."""
    sampling = prefill_sampling(inputs.max_num_batched_tokens, inputs.max_num_seqs,
                                policy="runtime").to_dict()
    p = inputs.precision
    result: dict[str, object] = {
        "decoder_replay": False, "executor": "kubernetes", "slurm_container_image": "",
        "slurm_container_mounts": [], "max_gpus": inputs.tp, "gpu_counts": [inputs.tp],
        "parallel_presets": ["tp"], "parallel_axes": [], "moe_backend": "auto",
        "attention_backend": inputs.attention_backend, "enable_wideep": "false",
        "enable_eplb": "false", "weight_quantizations": [p["gemm_quant_mode"]],
        "kv_cache_dtypes": [p["kv_cache_dtype"]], "tp_sizes": None, "pp_sizes": None,
        "dp_sizes": None, "moe_tp_sizes": None, "moe_ep_sizes": None, "cp_sizes": None,
        "global_warmup_iterations": inputs.warmup_iterations,
        "vllm_max_model_len": inputs.max_model_len, "max_decode_batch_size": None,
        "warmup_repeats": 0, "measurement_repeats": 1, "point_source": POINT_SOURCE,
        "prefill_sampling": sampling, "worker_type": "aggregated",
        "cudagraph_mode": inputs.cudagraph_mode,
    }
    if inputs.capture_sizes and not inputs.enforce_eager:
        result["cudagraph_capture_sizes"] = list(inputs.capture_sizes)
        result["max_cudagraph_capture_size"] = max(inputs.capture_sizes)
    result.update(max_num_batched_tokens=inputs.max_num_batched_tokens,
                  max_num_seqs=inputs.max_num_seqs,
                  gpu_memory_utilization=inputs.gpu_memory_utilization)
    if inputs.enforce_eager:
        result["enforce_eager"] = True
    result["benchmark_points"] = {"payload": points, "sha256": points_sha256}
    return result


def collection_plan(inputs: PlanInputs) -> dict | None:
    """The consumer's saved collection plan (FPMCollectionPlan.to_dict) with its sha256, or
    None where this exporter does not map the architecture's capability."""
    cap = capability(inputs)
    if cap is None:
        return None
    points, points_sha = points_manifest(inputs.points)
    opts = options(inputs, points, points_sha)
    cells = [_cell(inputs, phase, cell_id, execution)
             for phase, (cell_id, execution) in inputs.cells.items()]
    policy = backend_policy(inputs.attention_backend)
    generator_sha = canonical_hash(generator_overrides())
    canonical = {  # runtime_memory.validate_saved_plan's canonical form
        "backend": "vllm", "model_path": inputs.model_path, "system": inputs.system,
        "aic_revision": inputs.aic_revision, "generator_config_sha256": generator_sha,
        "options": opts, "capability": cap, "dtype_profile": cap["dtype"], "cells": cells,
        "point_generation": POINT_SOURCE, "policies": [policy],
        "topologies": [topology(inputs.tp)], "topology_memory_admission": [],
        "fpm_profile": inputs.profile, "runtime_backend_version": inputs.version,
        "backend_version": inputs.version,
    }
    sampling = opts["prefill_sampling"]
    assert isinstance(sampling, dict)
    count = sum(len(v) for v in inputs.points.values())
    return {
        "schema_name": PLAN_SCHEMA[0], "schema_version": PLAN_SCHEMA[1], "backend": "vllm",
        "model_path": inputs.model_path, "system": inputs.system,
        "aic_revision": inputs.aic_revision, "generator_config_sha256": generator_sha,
        "options": opts, "capability": cap, "dtype_profile": cap["dtype"],
        "point_generation": {
            "owner": "dynamo.vllm.instrumented_scheduler.InstrumentedScheduler",
            "method": "native_self_benchmark", "source": "frozen_explicit_manifest",
            "manifest_sha256": points_sha,
            "coordinates": ["batch_size", "total_prefill_tokens", "total_kv_read_tokens"],
            "partition_policy": "balanced_v1", "point_admission": "dynamo_live_scheduler",
            "precondition": "vllm_engine_initialized", "prefill_sampling": sampling,
            "planned_point_count": count},
        "topologies": [{**topology(inputs.tp), "strategy": inputs.strategy}],
        "topology_memory_admission": [], "backend_policies": [policy], "cells": cells,
        "counts": {"candidate_topologies": 0, "topologies": 1, "memory_rejected_topologies": 0,
                   "memory_unknown_topologies": 0, "backend_policies": 1, "cells": len(cells),
                   "prefill_cudagraph_capture_sizes": sampling["cudagraph_capture_size_count"],
                   "prefill_new_token_axis_points": sampling["new_token_axis_point_count"],
                   "points": "runtime-determined"},
        "sha256": canonical_hash(canonical),
        "fpm_profile": inputs.profile, "runtime_backend_version": inputs.version,
        "backend_version": inputs.version,
    }


def receipt(plan: dict, cell_id: str, attempt_id: str) -> dict:
    """A cell's runtime receipt that it measured the plan's frozen points."""
    return {"plan_sha256": plan["sha256"], "cell_id": cell_id, "attempt_id": attempt_id,
            "sha256": plan["options"]["benchmark_points"]["sha256"], "phase": "after"}


def cell_rows_digest(rows: Sequence[Mapping]) -> str:
    """database.validate_formal_database_commit's digest of a cell's committed rows."""
    canonical = sorted(json.dumps(row, sort_keys=True, separators=(",", ":"), allow_nan=False)
                       for row in rows)
    return hashlib.sha256("\n".join(canonical).encode()).hexdigest()


def checkpoint(plan: dict, *, attempt_id: str, started_at: str, artifact_dirs: Mapping[str, str],
               pods: Sequence[str], counts: Mapping[str, int], table: Mapping[str, str],
               rows: Sequence[Mapping]) -> dict:
    """Its collector checkpoint of a passed campaign whose table is published."""
    cells = {}
    for cell in plan["cells"]:
        cell_id, phase = cell["cell_id"], cell["workload_kind"]
        cells[cell_id] = {
            "status": "passed", "started_at": started_at, "attempt_id": attempt_id,
            "total_gpus": plan["options"]["max_gpus"], "point_source": POINT_SOURCE,
            "global_warmup_iterations": plan["options"]["global_warmup_iterations"],
            "benchmark_points_sha256": plan["options"]["benchmark_points"]["sha256"],
            "requested_point_count": counts[phase], "artifact_dir": artifact_dirs[cell_id],
            "pods": list(pods), "measured_point_count": counts[phase]}
    by_cell: dict[str, list[Mapping]] = {}
    for row in rows:
        by_cell.setdefault(str(row["cell_id"]), []).append(row)
    return {"schema": CHECKPOINT_SCHEMA, "plan_sha256": plan["sha256"], "cells": cells,
            "database": {"status": "passed", "parquet": table["parquet"],
                         "metadata": table["metadata"], "row_count": len(rows),
                         "published_cells": len(cells), "plan_cells": len(cells),
                         "missing_cells": [], "skipped_first_publisher_wins": [],
                         "cell_rows": {cell_id: cell_rows_digest(cell_rows)
                                       for cell_id, cell_rows in sorted(by_cell.items())}}}
