"""What an export derives for the consumer beside the envelopes and the table: the
measured acceptance, the FpmModelProfile, the consumer's collection plan and its predict
config."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ... import __version__
from ...wire.contract import PACKAGE_NAME, PHASE_DECODE, SOURCE_USER
from ...wire.model import Artifact, DecodeObservation
from .. import consumer_plan as cplan
from .checks import tp_of
from .deployment import Deployment
from .envelopes import RowIdentity
from .round_identity import execution_profile, speculative_identity
from .selecting import Selected, coordinates
from .vocabulary import AIC_REVISION, REDUCTION, parallel_strategy, topology


def measured_acceptance(a: Artifact, selected: Mapping[str, list[Selected]],
                        nextn_accepted: float | None, reasons: list[str]) -> dict | None:
    """The acceptance the exported decode rows ran at: the consumer prices a decode step from
    them at nextn_accepted (accepted drafts per request and step = AL - 1), which it takes
    from its config. The rows' mean run AL gives the value; a user's value outside the
    rows' measured range is refused, one off their mean by more than 5% warned."""
    observations = [item.observation for item in selected.get(PHASE_DECODE, [])
                    if isinstance(item.observation, DecodeObservation)]
    runs = [o.run_acceptance_length for o in observations]
    if not runs:
        return None
    low, high, mean = min(runs), max(runs), math.fsum(runs) / len(runs)
    k = a.speculative.draft_depth
    result: dict[str, Any] = {
        "rows_run_acceptance_length": {"min": low, "max": high, "mean": mean,
                                       "rows": len(runs)},
        "nextn_accepted": round(mean - 1, 4),
        "source": "the exported decode rows' mean run acceptance length - 1", "warnings": []}
    if nextn_accepted is not None:
        if not (0 <= nextn_accepted <= k and low - 1 <= nextn_accepted <= high - 1):
            reasons.append(f"--nextn-accepted {nextn_accepted:g}: the decode rows were measured "
                           f"at acceptance lengths {low:.3f}-{high:.3f} (nextn_accepted "
                           f"{low - 1:.3f}-{high - 1:.3f}, K={k}); the consumer would price "
                           "steps at an acceptance no row ran at")
        elif abs(nextn_accepted + 1 - mean) > 0.05 * mean:
            result["warnings"].append(
                f"nextn_accepted {nextn_accepted:g} is more than 5% off the rows' mean run "
                f"acceptance length {mean:.3f} (nextn_accepted {mean - 1:.3f})")
        result.update(nextn_accepted=nextn_accepted, source=SOURCE_USER)
    return result


def predict_config(a: Artifact, d: Deployment, profile: dict, identity: RowIdentity,
                   systems: Path, acceptance: dict) -> dict:
    """The consumer's predict config of this export (aisimulate predict -c): every engine
    value from the artifact (or the user's facts), direct interpolation with fallback
    denied. The traffic is a placeholder for the user's workload."""
    f: dict[str, Any] = {name: fact.value for name, fact in d.facts.items()}
    chunked = a.identity.settings.enable_chunked_prefill
    engine: dict[str, Any] = {
        "mode": "aggregated", "model": identity.model_path, "fpm_profile": profile,
        "hardware": identity.system, "backend": "vllm", "backend_version": identity.version,
        "nextn": a.speculative.draft_depth, "nextn_accepted": acceptance["nextn_accepted"],
        "systems_paths": [str(systems)], "estimation_mode": "fpm_interpolation",
        "fallback_policy": "deny",
        "estimator_config": {"fpm_interpolation": {"method": "direct"}},
        "workers": {"aggregated": {
            "scheduler": {"max_batched_tokens": f["max_num_batched_tokens"],
                          "max_sequences": f["max_num_seqs"]},
            "kv_cache": {"capacity": {"memory_fraction": f["gpu_memory_utilization"]}}}}}
    if chunked.resolved and isinstance(chunked.value, bool):
        engine["enable_chunked_prefill"] = chunked.value
    return {"traffic": {"source": {"type": "synthetic", "input_tokens": 1024,
                                   "output_tokens": 128},
                        "load": {"type": "concurrency", "concurrency": 1},
                        "stop": {"requests": 8}},
            "engine": engine}


def selection_rule(a: Artifact) -> dict:
    """How a row's one observation was chosen among the point's repeats."""
    return {"rule": "the observation at the lower median of the point's repeats by time",
            "repeats_per_point": a.measurement_policy.repeats,
            "reduction": REDUCTION, "source_sample_count": 1}


def build_consumer_plan(a: Artifact, d: Deployment, identity: RowIdentity, profile: dict,
                   cells: Mapping[str, str], selected: Mapping[str, list[Selected]]
                   ) -> tuple[dict | None, list[str]]:
    """The consumer's collection plan of this export (export.consumer_plan), or None with
    the reason where the artifact cannot state it."""
    f: dict[str, Any] = {name: fact.value for name, fact in d.facts.items()}
    mode, sizes = a.identity.cudagraph_mode, a.identity.settings.cudagraph_capture_sizes
    target = d.configs.get("target")
    if "enforce_eager" not in f or not mode.resolved or mode.value not in cplan.CUDAGRAPH_MODE:
        what = ("identity.settings.enforce_eager unresolved (pass --fact enforce_eager=...)"
                if "enforce_eager" not in f else f"identity.cudagraph_mode {mode.value!r}")
        return None, [f"no consumer collection plan: {what}"]
    if target is None:
        return None, ["no consumer collection plan: no target config.json"]
    # the engine's capture sizes where the artifact has them; else the plan names the mode
    captures = tuple(sizes.value) if isinstance(sizes.value, (list, tuple)) else ()
    plan = cplan.collection_plan(cplan.PlanInputs(
        model_path=identity.model_path, system=identity.system, version=identity.version,
        tp=identity.tp, strategy=parallel_strategy(identity.tp),
        architecture=str(f["architecture"]), config=json.loads(target[0]),
        precision=identity.precision, attention_backend=identity.attention_backend,
        cells={phase: (cells[phase], identity.execution) for phase in selected},
        max_model_len=int(f["max_model_len"]),
        max_num_batched_tokens=int(f["max_num_batched_tokens"]),
        max_num_seqs=int(f["max_num_seqs"]),
        gpu_memory_utilization=float(f["gpu_memory_utilization"]),
        cudagraph_mode=cplan.CUDAGRAPH_MODE[str(mode.value)], capture_sizes=captures,
        enforce_eager=bool(f["enforce_eager"]),
        warmup_iterations=a.measurement_policy.warmup.min_passes,
        points={phase: [coordinates(phase, item.observation) for item in chosen]
                for phase, chosen in selected.items()},
        profile=profile, aic_revision=AIC_REVISION))
    if plan is None:
        return None, [f"no consumer collection plan: this exporter does not map the consumer's "
                      f"capability of architecture {f['architecture']!r} "
                      f"(known: {', '.join(sorted(cplan.CAPABILITY_BY_ARCHITECTURE))})"]
    return plan, []


def build_profile(a: Artifact, d: Deployment, final: Path) -> tuple[dict, RowIdentity]:
    """The FpmModelProfile (one aggregated deployment with the speculative round) and the
    identity its rows carry."""
    f: dict[str, Any] = {name: fact.value for name, fact in d.facts.items()}
    k = a.speculative.draft_depth
    model_path, draft_path = str(final / "model" / "target"), str(final / "model" / "draft")
    spec = execution_profile(k, draft_path, str(f["draft_revision"]))
    execution = speculative_identity(str(f["target_revision"]), spec)
    kv_cache_bytes = a.kv_capacity.num_blocks * a.kv_capacity.block_size * int(
        f["kv_bytes_per_token"])
    sources = "; ".join(f"{name} from {fact.source}" for name, fact in sorted(d.facts.items()))
    al = a.speculative.synthetic_acceptance_length
    profile = {
        "schema_version": 1, "model": model_path, "model_revision": f["target_revision"],
        "architecture": f["architecture"], "context_length": f["max_model_len"],
        "num_experts": 0,   # dense: a mixture-of-experts config is refused
        "provenance": (f"{PACKAGE_NAME} {__version__} export of run {a.run_id} "
                       f"(K={k}, acceptance {a.speculative.acceptance_control}"
                       f"{'' if al is None else f' AL={al:g}'}); {sources}"),
        "deployments": [{
            "system": f["system"], "backend": "vllm", "backend_version": f["engine_version"],
            **topology(tp_of(a)),
            **d.precision, "attention_backend": f["attention_backend"],
            "worker_type": "aggregated", "execution_profile": spec,
            "resources": {
                "runtime_memory": {
                    "kv_cache_bytes": kv_cache_bytes,
                    "gpu_memory_utilization": f["gpu_memory_utilization"],
                    "max_model_len": f["max_model_len"],
                    "provenance": ("kv_cache_bytes = kv_capacity.num_blocks "
                                   f"({a.kv_capacity.num_blocks}) x block_size "
                                   f"({a.kv_capacity.block_size}) x kv_bytes_per_token "
                                   f"({f['kv_bytes_per_token']}, "
                                   f"{d.facts['kv_bytes_per_token'].source})")},
                "kv_bytes_per_token": f["kv_bytes_per_token"], "cache_layout": "linear",
                "max_num_tokens": f["max_num_batched_tokens"],
                "max_batch_size": f["max_num_seqs"],
                "provenance": "engine limits: " + "; ".join(
                    f"{n} from {d.facts[n].source}" for n in
                    ("max_num_batched_tokens", "max_num_seqs"))}}],
    }
    return profile, RowIdentity(model_path, draft_path, str(f["system"]),
                                str(f["engine_version"]), d.precision, execution, tp_of(a),
                                str(f["attention_backend"]))

