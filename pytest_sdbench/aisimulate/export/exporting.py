"""One artifact's export to out/<run_id>/, built in a staging folder and swapped into
place atomically."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ... import __version__
from ...wire import typed
from ...wire.contract import PACKAGE_NAME, SOURCE_USER
from ...wire.model import Artifact
from .. import consumer_plan as cplan
from .. import repeatability
from .checks import check
from .deployment import Deployment, resolve_deployment, resolve_facts
from .envelopes import build_envelope
from .facts import Fact, identity_field
from .fpm_profile import (
    build_consumer_plan,
    build_profile,
    measured_acceptance,
    predict_config,
    selection_rule,
)
from .manifest import build_manifest
from .options import Exported, ExportOptions
from .round_identity import canonical_hash, cell_id
from .selecting import (
    Selected,
    export_name,
    exported_phases,
    read_artifact,
    select,
    select_acceptance,
    select_graph_modes,
)
from .system import bring_system
from .table import pyarrow_missing, table_rows, write_json, write_table
from .vocabulary import (
    AIC_REVISION,
    ENVELOPE_FILE,
    MANIFEST_FILE,
    PREDICT_FILE,
    PROFILE_FILE,
    PROVENANCE_FILE,
    PROVENANCE_SCHEMA,
    REPEATABILITY_FILE,
    TABLE_COORDINATES,
    TABLE_FILE,
    TABLE_METADATA_FILE,
    TABLE_POLICY,
    TABLE_SCHEMA,
    TIMING_SCOPE,
    Refused,
    UnusableInput,
)

# --- Export -----------------------------------------------------------------------------------

def export_artifact(path: Path, out: Path, options: ExportOptions) -> Exported:
    """Export one artifact to out/<run_id>/, atomically (a temporary folder renamed into
    place). Refused (nothing written) when the consumer cannot take it truthfully."""
    artifact, legacy, raw = read_artifact(path)
    # the two phases the consumer imports; mixed rows stay in the artifact, and the manifest
    # says so (phases_not_exported)
    selected = {phase: select(artifact, phase) for phase in exported_phases(artifact)}
    reasons: list[str] = []
    left_out = select_acceptance(artifact, selected, options.acceptance_length, reasons)
    left_out += select_graph_modes(selected, options.graph_modes, reasons)
    check(artifact, selected, options, reasons)
    acceptance = measured_acceptance(artifact, selected, options.nextn_accepted, reasons)
    others = []
    for other_path in options.repeats_from:
        other, _, _ = read_artifact(other_path)
        reasons += repeatability.same_collection_errors(artifact, other, str(other_path))
        others.append(other)
    repeats = repeatability.assess(artifact, others, {
        phase: [(item.observation.point_index, item.observation.timing.seconds)
                for item in chosen] for phase, chosen in selected.items()})
    deployment = None
    if options.envelope_only:
        facts = resolve_facts(artifact, options, reasons)
        if options.system is not None:
            facts["system"] = Fact(options.system, SOURCE_USER)
    else:
        deployment = resolve_deployment(artifact, options, reasons)
        facts = deployment.facts
    if reasons:
        raise Refused(reasons)
    if deployment is not None and pyarrow_missing():
        raise UnusableInput("writing the consumer's parquet table needs pyarrow: pip install "
                            "'pytest-sdbench[export]' (or pass --envelope-only)")
    out.mkdir(parents=True, exist_ok=True)
    name = export_name(artifact.run_id, options.acceptance_length, options.graph_modes)
    # The folder resolved, not the export's own name: a link planted there (in a folder
    # others can write) is replaced, never followed to the folder it names.
    final = out.resolve() / name
    staging = Path(tempfile.mkdtemp(prefix=f".{artifact.run_id}.", suffix=".tmp", dir=out))
    try:
        write_json(staging / REPEATABILITY_FILE, repeats)
        manifest = _build(artifact, legacy, raw, path, selected, deployment, facts, options,
                          staging, final, left_out, acceptance)
        manifest["repeatability"] = {
            "file": REPEATABILITY_FILE,
            **{key: repeats[key] for key in ("status", "point_counts", "source_agreement_failed",
                                             "cv", "source_relative_difference",
                                             "engine_starts", "sample_rule", "policy")}}
        write_json(staging / MANIFEST_FILE, manifest)
        umask = os.umask(0)
        os.umask(umask)
        # mkdtemp makes 0700; an export is for sharing, once built (while it is built,
        # nobody else can plant a link where one of its files is written).
        os.chmod(staging, 0o777 & ~umask)
        _swap_into_place(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Exported(final, manifest)


def _swap_into_place(staging: Path, final: Path) -> None:
    """Rename the finished export into place; an earlier export of the same run is moved
    aside first and removed after, so a reader sees the old tree or the new, never half."""
    if final.exists():
        aside = Path(tempfile.mkdtemp(prefix=f".{final.name}.old.", dir=final.parent))
        os.replace(final, aside / final.name)
        os.replace(staging, final)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(staging, final)


def _build(a: Artifact, legacy: str | None, raw: bytes, path: Path,
           selected: Mapping[str, list[Selected]], deployment: Deployment | None,
           facts: Mapping[str, Fact], options: ExportOptions, staging: Path,
           final: Path, left_out: list[str], acceptance: dict | None) -> dict:
    k = a.speculative.draft_depth
    run12 = a.run_id[:12]
    pod, attempt = f"sdbench-{run12}", f"sdbench-{a.run_id}"
    cells = {phase: f"sdbench-envelope-{phase}-{run12}" for phase in selected}
    built = build_profile(a, deployment, final) if deployment is not None else None
    profile, identity = built if built is not None else (None, None)
    artifact_sha = hashlib.sha256(raw).hexdigest()
    plan: dict | None = None
    notes: list[str] = []
    if deployment is not None and identity is not None and profile is not None:
        cells = {phase: cell_id(model_path=identity.model_path, system=identity.system,
                                phase=phase, tp=identity.tp, precision=identity.precision,
                                execution=identity.execution,
                                attention_backend=identity.attention_backend)
                 for phase in selected}
        for role, (data, _source) in deployment.configs.items():
            (staging / "model" / role).mkdir(parents=True, exist_ok=True)
            (staging / "model" / role / "config.json").write_bytes(data)
        plan, notes = build_consumer_plan(a, deployment, identity, profile, cells, selected)
    if plan is not None:
        plan_sha = str(plan["sha256"])
        write_json(staging / "campaign" / cplan.PLAN_FILE, plan)
        write_json(staging / "campaign" / cplan.OVERRIDES_FILE, {})
    else:   # envelopes only, or no consumer plan: a hash of the export's own inputs
        plan_sha = canonical_hash({"artifact_sha256": artifact_sha, "cells": cells,
                                   "fpm_profile": profile})
    worker = f"{pod}-rank0"
    version = str(identity_field(a, "identity.engine_version").value)
    for phase, chosen in selected.items():
        raw_dir = staging / "campaign" / "cells" / cells[phase] / "raw" / pod
        write_json(raw_dir / ENVELOPE_FILE, build_envelope(a, legacy, phase, chosen, worker))
        write_json(raw_dir / PROVENANCE_FILE, {
            "schema_name": PROVENANCE_SCHEMA[0], "schema_version": PROVENANCE_SCHEMA[1],
            "cell_id": cells[phase], "plan_sha256": plan_sha, "attempt_id": attempt,
            "runtime": {"backend": "vllm", "backend_version": version},
            "producer": {"package": PACKAGE_NAME, "version": __version__,
                         "artifact_run_id": a.run_id, "artifact_sha256": artifact_sha}})
        if plan is not None:
            write_json(raw_dir / cplan.RECEIPT_FILE, cplan.receipt(plan, cells[phase], attempt))
    run = {"source_plan_sha256": plan_sha, "collector_attempt_id": attempt,
           "runtime_run_id": a.run_id, "runtime_grid_digest": a.integrity.grid_digest}
    table = None
    if identity is not None:
        write_json(staging / PROFILE_FILE, profile)
        rows = table_rows(a, selected, identity=identity, cells=cells, run=run)
        dest = Path("systems") / "data" / identity.system / "vllm" / version
        write_table(rows, staging / dest, {
            "schema_name": TABLE_SCHEMA[0], "schema_version": TABLE_SCHEMA[1],
            "coordinate_system": TABLE_COORDINATES, "measurement_policy": TABLE_POLICY,
            "timing_scope": TIMING_SCOPE,
            "warmup_repeats": a.measurement_policy.warmup.min_passes,
            # each row is one observation (single_sample, source_sample_count 1)
            "measurement_repeats": 1,
            "sdbench_selection": selection_rule(a),
            "sdbench_measurement_policy": typed.encode(a.measurement_policy),
            "source_plan_sha256": [plan_sha], "collector_attempt_ids": [attempt],
            "runtime_run_ids": [a.run_id], "runtime_grid_digests": [a.integrity.grid_digest],
            "aic_revision": AIC_REVISION,
            "model_paths": [identity.model_path], "system": identity.system,
            "backend": "vllm", "backend_version": version,
            "producer": {"package": PACKAGE_NAME, "version": __version__}})
        table = {"systems_root": "systems", "parquet": str(dest / TABLE_FILE),
                 "metadata": str(dest / TABLE_METADATA_FILE), "rows": len(rows)}
        if deployment is not None and acceptance is not None and profile is not None:
            write_json(staging / PREDICT_FILE, predict_config(
                a, deployment, profile, identity, final / "systems", acceptance))
            table["system_file"], missing = bring_system(staging / "systems", identity.system,
                                                         final)
            notes += [missing] if missing else []
        if plan is not None:
            write_json(staging / cplan.CHECKPOINT_DIR / cplan.CHECKPOINT_FILE, cplan.checkpoint(
                plan, attempt_id=attempt, started_at=a.started_at or a.created_at,
                artifact_dirs={cells[p]: str(final / "campaign" / "cells" / cells[p])
                               for p in selected},
                pods=[pod], counts={p: len(chosen) for p, chosen in selected.items()},
                table={"parquet": str(final / dest / TABLE_FILE),
                       "metadata": str(final / dest / TABLE_METADATA_FILE)}, rows=rows))
    manifest = build_manifest(a, legacy, path, artifact_sha, selected, deployment, facts, options,
                         identity=identity, cells=cells, plan_sha=plan_sha, attempt=attempt,
                         pod=pod, table=table, k=k, left_out=left_out, plan=plan, notes=notes,
                         acceptance=acceptance)
    write_json(staging / MANIFEST_FILE, manifest)
    return manifest

