"""What the plugin and the CLI share: an engine spec from user choices, and one collection
turned into a validated artifact file."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jsonschema

from . import typed
from .artifact import Artifact, Report, build_artifact, schema, validate_data, write_artifact
from .collector import CollectionResult, Collector
from .contract import DEFAULT_DRAFT_DEPTH
from .engine import AUTO_PRESET, PRESET_FOR_DEVICE, PRESETS, EngineSpec, materialize
from .points import Grid, default_grid, load_grid

MODEL_ROOT_ENV = "SDBENCH_MODEL_ROOT"  # where presets are written (default: a temp folder)


def model_root() -> Path:
    return Path(os.environ.get(MODEL_ROOT_ENV) or Path(tempfile.gettempdir()) / "sdbench-models")


# CUDA graphs: batches 1, 2 and 4 of uniform decode steps (1 + K tokens each) are captured.
GRAPH_BATCHES = (1, 2, 4)


def resolve_preset(preset: str | None) -> str:
    if preset in (None, AUTO_PRESET):
        from .vram import cuda_available
        return PRESET_FOR_DEVICE["cuda" if cuda_available() else "cpu"]
    return preset


def engine_spec(preset: str | None = AUTO_PRESET, model: str | None = None,
                draft: str | None = None, draft_depth: int = DEFAULT_DRAFT_DEPTH,
                cuda_graphs: bool = False, acceptance_length: float | None = None,
                **limits) -> EngineSpec:
    """A spec from a preset name ('auto': by device), or from the user's own target and
    draft directories."""
    if (model is None) != (draft is None):
        raise ValueError("--sdbench-model and --sdbench-draft go together: give both a target "
                         f"and an EAGLE3 draft directory (got model={model!r}, draft={draft!r})")
    if model is not None:
        for name, path in (("model", model), ("draft", draft)):
            if not (Path(path) / "config.json").is_file():
                raise ValueError(f"{name}: {path!r} is not a checkpoint directory with a "
                                 "config.json")
        target, draft_path, preset = str(model), str(draft), None
    else:
        preset = resolve_preset(preset)
        target_dir, draft_dir = materialize(preset, model_root())
        target, draft_path = str(target_dir), str(draft_dir)
        limits = {**dict(PRESETS[preset].engine_limits), **limits}
    graphs = dict(enforce_eager=False, cudagraph_capture_sizes=limits.pop(
        "cudagraph_capture_sizes", tuple((draft_depth + 1) * b for b in GRAPH_BATCHES))) \
        if cuda_graphs else {}
    return EngineSpec(target=target, draft=draft_path, preset=preset, draft_depth=draft_depth,
                      synthetic_acceptance_length=acceptance_length, **graphs, **limits)


def grid_for(engine, manifest: str | None = None) -> Grid:
    if manifest:
        return load_grid(manifest)
    large = engine.spec.preset != "tiny"
    return default_grid(engine.spec.draft_depth, engine.block_size,
                        (engine.spec.synthetic_acceptance_length,), large=large,
                        max_batched_tokens=engine.spec.max_num_batched_tokens)


@dataclass
class CollectionRun:
    result: CollectionResult
    artifact: Artifact
    report: Report
    path: Path


class InvalidArtifact(AssertionError):
    """The validator refused an artifact this package wrote."""


def artifact_name(mode: str, run_id: str, worker: str | None) -> str:
    return f"sdbench-{mode}-{run_id[:12]}" + (f"-{worker}" if worker else "") + ".json"


def collect_to_artifact(engine, mode: str, grid: Grid, out_dir: str | Path,
                        worker: str | None = None, progress=None,
                        decode_tokens: int | None = None) -> CollectionRun:
    """Collect, build the artifact, check it against the validator and the published JSON
    Schema, and write it atomically. An artifact either refuses is written as
    ``*.invalid.json`` and raised as InvalidArtifact."""
    result = Collector(engine, progress=progress, decode_tokens=decode_tokens).collect(mode, grid)
    artifact = build_artifact(result, engine, worker=worker)
    data = typed.encode(artifact)
    report = validate_data(data)
    errors = list(report.errors) + [
        f"JSON Schema: {'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in jsonschema.Draft202012Validator(schema.load()).iter_errors(data)]
    name = artifact_name(mode, artifact.run_id, worker)
    if errors:
        bad = write_artifact(artifact, Path(out_dir) / name.replace(".json", ".invalid.json"))
        raise InvalidArtifact(f"the artifact failed validation ({bad}): " + "; ".join(errors))
    path = write_artifact(artifact, Path(out_dir) / name)
    return CollectionRun(result, artifact, report, path)


def describe(run: CollectionRun) -> str:
    a = run.artifact
    return (f"{run.path} (mode {a.mode}, {a.coverage.completed}/{a.coverage.expected} points, "
            f"status {a.status}, device {a.device}, timing {_source(a)}, "
            f"collection {a.elapsed_seconds:.1f} s)")


def _source(a: Artifact) -> str:
    samples = [o.timing.source for o in (*a.prefill, *a.decode)]
    return samples[0] if samples else "none"
