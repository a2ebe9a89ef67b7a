"""Dynamo's native rank envelopes, one per phase, and the identity every row carries."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ... import __version__
from ...wire.contract import PACKAGE_NAME, PHASE_DECODE, PHASE_PREFILL, SOURCE_CUDA_EVENT
from ...wire.model import Artifact, DecodeObservation, Observation
from .selecting import Selected, coordinates, seed_regime
from .vocabulary import (
    AUTO_BACKEND,
    DECODE_SEED_REGIME,
    ENVELOPE_SCHEMA_VERSION,
    GRAPH_MODE_NAME,
    ROW_SEED_REGIME,
    SEED_STAMP,
    TIMING_SCOPE,
)

# --- Envelopes --------------------------------------------------------------------------------

def _point(phase: str, item: Selected, benchmark_id: int, k: int) -> dict:
    obs = item.observation
    batch, new, kv = coordinates(phase, obs)
    rows: list[list[int]] | None = None
    if phase == PHASE_PREFILL:
        stamp = SEED_STAMP.get(seed_regime(obs) or "")
        reasons = ["explicit", stamp] if stamp else ["explicit"]
        rows = [[r.new_tokens, r.kv_tokens] for r in obs.snapshot.requests]
    else:
        reasons = ["explicit", SEED_STAMP[PHASE_DECODE]]
    return {
        "point_type": phase, "benchmark_id": benchmark_id, "batch_size": batch,
        "total_prefill_tokens": new, "total_kv_read_tokens": kv, "rows": rows,
        "sample_reasons": reasons,
        # Dynamo's graph labels, here the mode the engine reported for this very step;
        # capture size and padding are not recorded.
        "expected_cudagraph_mode": GRAPH_MODE_NAME[obs.graph_mode],
        "expected_capture_size": None, "padding_tokens": None,
        **row_labels(phase, item, k),
    }


def row_labels(phase: str, item: Selected, k: int) -> dict:
    """sdbench's own labels of a row (the consumer ignores them; they keep the audit trail).
    Every row carries every label (None where a phase has none): one parquet schema."""
    obs = item.observation
    decode = obs if isinstance(obs, DecodeObservation) else None
    return {
        "sdbench_point_index": obs.point_index, "sdbench_repeat": obs.repeat,
        "sdbench_repeats": len(item.repeats_seconds),
        "sdbench_selection": "median" if len(item.repeats_seconds) % 2 else "median_low",
        "sdbench_native_iteration_id": obs.native_iteration_id,
        "sdbench_graph_mode": obs.graph_mode, "sdbench_timing_source": obs.timing.source,
        "sdbench_warmup_passes": obs.warmup_passes,
        "sdbench_warmup_settled": obs.warmup_settled,
        "sdbench_draft_depth": k,
        "sdbench_kv_seed_regime": seed_regime(obs),
        "sdbench_requested_acceptance_length": (decode.point.acceptance_length if decode
                                                else None),
        "sdbench_observed_acceptance_length": (decode.observed_acceptance_length if decode
                                               else None),
        "sdbench_run_acceptance_length": decode.run_acceptance_length if decode else None,
    }


def _fpm(phase: str, obs: Observation, benchmark_id: int, worker_id: str) -> dict:
    batch, new, kv = coordinates(phase, obs)
    prefill = phase == PHASE_PREFILL
    return {
        "version": 1, "worker_id": worker_id, "dp_rank": 0, "counter_id": benchmark_id,
        "wall_time": obs.timing.seconds,
        "timing_scope": (TIMING_SCOPE if obs.timing.source == SOURCE_CUDA_EVENT
                         else obs.timing.scope),
        "scheduled_requests": {
            "num_prefill_requests": batch if prefill else 0,
            "sum_prefill_tokens": new,
            "sum_prefill_kv_tokens": kv if prefill else 0,
            "num_decode_requests": 0 if prefill else batch,
            "sum_decode_kv_tokens": 0 if prefill else kv,
        },
        "queued_requests": {"num_waiting": obs.snapshot.queue.waiting},
        "sdbench_timing": {"seconds": obs.timing.seconds, "scope": obs.timing.scope,
                           "source": obs.timing.source,
                           "rank_seconds": list(obs.timing.rank_seconds)},
        "sdbench_provenance": {"device": obs.provenance.device,
                               "device_name": obs.provenance.device_name,
                               "timer": obs.provenance.timer},
    }


def build_envelope(a: Artifact, legacy: str | None, phase: str, chosen: list[Selected],
                   worker_id: str) -> dict:
    """Dynamo's native rank envelope of one phase: benchmark IDs 1..N in grid order, one
    local FPM per point, iteration groups equal to the results, measured totals."""
    k = a.speculative.draft_depth
    results, groups = [], []
    for benchmark_id, item in enumerate(chosen, start=1):
        point = _point(phase, item, benchmark_id, k)
        fpm = _fpm(phase, item.observation, benchmark_id, worker_id)
        regime = ROW_SEED_REGIME.get(seed_regime(item.observation) or "", DECODE_SEED_REGIME)
        results.append({"point": point, "fpms": [fpm], "kv_seed_regime": regime})
        groups.append({"benchmark_id": benchmark_id, "point": point, "expected_dp_ranks": [0],
                       "complete": True, "wall_time": fpm["wall_time"],
                       "rank_results": [{"dp_rank": 0, "fpms": [fpm]}]})
    mode = one_graph_mode(chosen)
    envelope = {
        "schema_version": ENVELOPE_SCHEMA_VERSION, "artifact_type": "rank",
        "status": "complete", "valid": True, "usable": True, "timing_valid": True,
        "stop_reason": None, "error": None, "skipped_points": [], "missing_phases": [],
        "run_id": a.run_id, "grid_digest": a.integrity.grid_digest,
        "config": {"mode": phase},
        "coverage": {"expected_points": len(results), "completed_points": len(results),
                     "skipped_points": 0},
        "dp": {"rank": 0, "size": 1},
        "timing": {
            "started_at": a.started_at or a.created_at,
            # The artifact times the whole collection, not each phase: an upper bound.
            "benchmark_elapsed_seconds": a.elapsed_seconds,
            "benchmark_elapsed_scope": "sdbench_collection_all_phases",
            "measured_iteration_seconds": math.fsum(g["wall_time"] for g in groups),
        },
        "timing_boundary": "sdbench_worker_model_step",
        "execution_mode": mode,
        "results": results, "iteration_groups": groups,
        "sdbench": {"package": PACKAGE_NAME, "version": __version__, "run_id": a.run_id,
                    "schema_version": a.schema_version, "legacy": legacy,
                    "measurement_policy": getattr(a.measurement_policy, phase),
                    "repeats": a.measurement_policy.repeats,
                    "speculative": {"method": a.speculative.method, "draft_depth": k,
                                    "acceptance_control": a.speculative.acceptance_control,
                                    "synthetic_acceptance_length":
                                        a.speculative.synthetic_acceptance_length}},
    }
    if phase == PHASE_DECODE:
        # Every decode request reads KV the engine computed from its own prompt tokens.
        method = ("sdbench_same_request_prefill_then_steady_step" if legacy else
                  "sdbench_seeded_prompt_readmitted_from_prefix_cache_then_steady_step")
        envelope["kvwarm"] = {"enabled": True, "warm_eligible": True, "skip_reason": None,
                              "method": method}
    return envelope


def one_graph_mode(chosen: list[Selected]) -> str:
    """The CUDA-graph mode of a phase's exported steps, or 'mixed:A,B' for a phase whose
    modes change only where no query falls between (check refuses any other mix)."""
    modes = sorted({item.observation.graph_mode for item in chosen})
    return modes[0] if len(modes) == 1 else "mixed:" + ",".join(modes)


@dataclass(frozen=True)
class RowIdentity:
    """What every row of the table and the cell ids carry."""
    model_path: str
    draft_path: str
    system: str
    version: str
    precision: dict[str, str]
    execution: tuple[str, str, str, str]
    tp: int
    attention_backend: str = AUTO_BACKEND

