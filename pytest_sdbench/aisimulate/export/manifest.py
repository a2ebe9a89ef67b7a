"""The export's import manifest: what was exported, from which artifact, with which facts
and their sources, and what was left out or warned."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ... import __version__
from ...wire.contract import PACKAGE_NAME, PHASE_DECODE, SOURCE_USER, WARMUP_RULES_SINCE_V4
from ...wire.model import Artifact, DecodeObservation
from .. import consumer_plan as cplan
from .checks import tp_of
from .envelopes import one_graph_mode
from .facts import Fact, identity_field
from .options import ExportOptions
from .selecting import Selected, coordinates, phases_not_exported
from .vocabulary import (
    CONSUMER,
    CONSUMER_ENVIRONMENT,
    CONSUMER_VERSION,
    FMHA_RESOLUTION,
    MANIFEST_KIND,
    MANIFEST_VERSION,
    PREDICT_FILE,
    PROFILE_FILE,
    parallel_strategy,
    topology,
)


def build_manifest(a: Artifact, legacy, path: Path, artifact_sha: str, selected, deployment,
              resolved: Mapping[str, Fact], options: ExportOptions, *, identity, cells,
              plan_sha, attempt, pod, table, k: int, left_out: list[str], plan: dict | None,
              notes: list[str], acceptance: dict | None) -> dict:
    warnings = _warnings(a, selected) + notes + (acceptance or {}).get("warnings", [])
    facts = {name: {"value": fact.value, "source": fact.source}
             for name, fact in sorted(resolved.items())}
    user = sorted(name for name, fact in facts.items() if fact["source"] == SOURCE_USER)
    if deployment:
        for role, (_text, source) in deployment.configs.items():
            facts[f"{role}_config"] = {"value": f"model/{role}/config.json", "source": source}
        facts["precision"] = {"value": deployment.precision, "source": (
            "derived by the consumer's capability rules for an unquantized dense checkpoint "
            "from identity.target.dtype/quantization and kv_cache_dtype ('auto' = the model's "
            "dtype in vLLM)")}
    return {
        "kind": MANIFEST_KIND, "version": MANIFEST_VERSION,
        "producer": {"package": PACKAGE_NAME, "version": __version__},
        "consumer": {"package": CONSUMER, "version": CONSUMER_VERSION,
                     "environment": CONSUMER_ENVIRONMENT},
        "mode": "envelope_only" if deployment is None else "table",
        "artifact": {"path": str(path), "sha256": artifact_sha, "run_id": a.run_id,
                     "schema_version": a.schema_version, "legacy": legacy,
                     "device": a.device, "status": a.status,
                     "coverage": f"{a.coverage.completed}/{a.coverage.expected}",
                     "integrity": {
                         "grid_digest": a.integrity.grid_digest,
                         "identity_digest": a.integrity.identity_digest,
                         "kv_capacity_digest": a.integrity.kv_capacity_digest}},
        "draft_depth": k, "nextn": k,
        "facts": facts, "user_facts": user,
        "system": identity.system if identity else None, "backend": "vllm",
        "backend_version": str(identity_field(a, "identity.engine_version").value),
        "model_path": identity.model_path if identity else None,
        "draft_path": identity.draft_path if identity else None,
        "precision": identity.precision if identity else None,
        "fmha_resolution": FMHA_RESOLUTION if identity else None,
        "topology": topology(tp_of(a)), "parallel_strategy": parallel_strategy(tp_of(a)),
        "execution_identity": list(identity.execution) if identity else None,
        "cells": cells, "plan_sha256": plan_sha, "attempt_id": attempt, "pod": pod,
        "consumer_plan": None if plan is None else {
            "collection_plan": f"campaign/{cplan.PLAN_FILE}",
            "generator_overrides": f"campaign/{cplan.OVERRIDES_FILE}",
            "checkpoint": f"{cplan.CHECKPOINT_DIR}/{cplan.CHECKPOINT_FILE}",
            "hash_rule": ("the consumer's canonical hash (runtime_memory.validate_saved_plan) "
                          "of the plan's immutable inputs"),
            "points": "the exported rows' coordinates as its frozen explicit manifest"},
        "fpm_profile": PROFILE_FILE if identity else None, "table": table,
        "predict_config": PREDICT_FILE if identity and acceptance else None,
        "acceptance": None if acceptance is None else
        {key: value for key, value in acceptance.items() if key != "warnings"},
        "graph_modes": {phase: one_graph_mode(chosen) for phase, chosen in selected.items()},
        "selection": {
            "rule": ("per point the observation at the lower median of its repeats' times "
                     "(the median for an odd count)"),
            "acceptance_length": options.acceptance_length,
            "graph_modes": dict(options.graph_modes), "left_out": left_out},
        "rows": [_row_record(phase, item) for phase, chosen in selected.items()
                 for item in chosen],
        # phases of the artifact no export takes (mixed): counted and why, never dropped
        # silently, never written as prefill or decode rows
        "phases_not_exported": phases_not_exported(a),
        "warnings": warnings,
    }


def _row_record(phase: str, item: Selected) -> dict:
    obs = item.observation
    batch, new, kv = coordinates(phase, obs)
    return {"phase": phase, "point_index": obs.point_index, "repeat": obs.repeat,
            "native_iteration_id": obs.native_iteration_id, "batch_size": batch,
            "total_prefill_tokens": new, "total_kv_read_tokens": kv,
            "graph_mode": obs.graph_mode, "seconds": obs.timing.seconds,
            "repeats_seconds": list(item.repeats_seconds)}


def _warnings(a: Artifact, selected) -> list[str]:
    warnings = [f"{phase}: {n['rows']} rows of {n['points']} {phase} points not exported: "
                f"{n['reason']}; they stay in the artifact, in no envelope, table or plan of "
                "this export" + (f" (skipped in the artifact: {'; '.join(n['skipped'])})"
                                 if n["skipped"] else "")
                for phase, n in phases_not_exported(a).items()]
    if a.measurement_policy.warmup.rule in WARMUP_RULES_SINCE_V4:
        unsettled = [f"{phase}[{item.observation.point_index}]" for phase, chosen in
                     selected.items() for item in chosen if not item.observation.warmup_settled]
        if unsettled:
            shown = ", ".join(unsettled[:8]) + (", ..." if len(unsettled) > 8 else "")
            warnings.append(f"warm-up did not settle before {len(unsettled)} point(s): {shown}")
    if a.environment is not None and a.environment.contended:
        warnings.append(f"environment: contended collection ({a.environment.reason})")
    requested = sorted({al for item in selected.get(PHASE_DECODE, [])
                        if isinstance(item.observation, DecodeObservation)
                        and (al := item.observation.point.acceptance_length) is not None})
    if requested:
        warnings.append(f"decode rows were measured at synthetic acceptance length(s) "
                        f"{', '.join(f'{al:g}' for al in requested)}; the consumer's identity "
                        "has no acceptance-length axis")
    return warnings

