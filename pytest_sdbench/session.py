"""What the plugin and the CLI share: an engine spec from user choices, and one collection
turned into a validated artifact file."""

from __future__ import annotations

import json
import os
import re
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import jsonschema

from .artifact import Artifact, Report, build_artifact, schema, validate_data, write_artifact
from .collector import CollectionResult, Collector
from .engine import AUTO_PRESET, PRESET_FOR_DEVICE, PRESETS, EngineSpec, materialize, ranks
from .engine.compat import BLOCK_SIZE
from .engine.tp import TensorParallelEngine
from .files import atomic_write_text
from .host import HostMonitor
from .options import spelled
from .points import EngineLimits, Grid, default_grid, derived_grid, load_grid
from .testing import restoration_violations
from .vram import cuda_available
from .wire import typed
from .wire.contract import DEFAULT_DRAFT_DEPTH, REVISION_PATTERN
from .wire.model import utc_now

MODEL_ROOT_ENV = "SDBENCH_MODEL_ROOT"  # where presets are written (default: a temp folder)


def model_root() -> Path:
    return Path(os.environ.get(MODEL_ROOT_ENV) or Path(tempfile.gettempdir()) / "sdbench-models")


# CUDA graphs: batches 1, 2 and 4 of uniform decode steps (1 + K tokens each) are captured.
GRAPH_BATCHES = (1, 2, 4)


def resolve_preset(preset: str | None) -> str:
    if preset in (None, AUTO_PRESET):
        return PRESET_FOR_DEVICE["cuda" if cuda_available() else "cpu"]
    return preset


def _revision(name: str, value: str | None) -> str | None:
    if value is not None and not re.fullmatch(REVISION_PATTERN, value):
        raise ValueError(f"{name}: a revision is a full 40-hex git commit, got {value!r}")
    return value


def engine_spec(preset: str | None = AUTO_PRESET, model: str | None = None,
                draft: str | None = None, draft_depth: int = DEFAULT_DRAFT_DEPTH,
                cuda_graphs: bool = False, acceptance_length: float | None = None,
                vllm_defaults: bool = False, user_engine_args: dict | None = None,
                target_revision: str | None = None, draft_revision: str | None = None,
                cli: bool = False, **settings) -> EngineSpec:
    """A spec from a preset name ('auto': by device), or from the user's own target and
    draft directories. A preset runs under its oracle limits (small KV cache, batch and
    length caps, eager unless cuda_graphs) unless vllm_defaults; a user's checkpoint runs
    with vLLM's defaults. The user's engine arguments apply over either."""
    opt = lambda name: spelled(name, cli)  # noqa: E731
    if (model is None) != (draft is None):
        raise ValueError(f"{opt('model')} and {opt('draft')} go together: give both a target "
                         f"and an EAGLE3 draft directory (got {model!r} and {draft!r})")
    device = "cuda" if cuda_available() else "cpu"
    if acceptance_length is not None and device != "cuda":
        raise ValueError(f"{opt('acceptance-length')}: vLLM's synthetic rejection sampler runs "
                         f"on CUDA only; this machine has no CUDA device")
    if model is not None and draft is not None:  # both or neither (checked above)
        for name, path in (("model", model), ("draft", draft)):
            if not (Path(path) / "config.json").is_file():
                raise ValueError(f"{opt(name)}: {path!r} is not a checkpoint directory with a "
                                 "config.json")
        target, draft_path, preset = str(model), str(draft), None
    else:
        preset = resolve_preset(preset)
        target_dir, draft_dir = materialize(preset, model_root())
        target, draft_path = str(target_dir), str(draft_dir)
        settings = {"load_format": "dummy", **settings}
        if not vllm_defaults:
            graphs = dict(enforce_eager=False, cudagraph_capture_sizes=tuple(
                (draft_depth + 1) * b for b in GRAPH_BATCHES)) if cuda_graphs \
                else dict(enforce_eager=True)
            settings = {**dict(PRESETS[preset].engine_limits),
                        "block_size": BLOCK_SIZE[device], **graphs, **settings}
    return EngineSpec(target=target, draft=draft_path, preset=preset, draft_depth=draft_depth,
                      synthetic_acceptance_length=acceptance_length,
                      oracle_limits=preset is not None and not vllm_defaults,
                      target_revision=_revision(opt("target-revision"), target_revision),
                      draft_revision=_revision(opt("draft-revision"), draft_revision),
                      user_engine_args=dict(user_engine_args or {}), **settings)


def grid_for(engine, manifest: str | None = None) -> Grid:
    """The grid manifest if given; else the oracle presets' small grid, or the grid derived
    from the engine's own limits (points.derived_grid)."""
    if manifest:
        return load_grid(manifest)
    al = engine.spec.synthetic_acceptance_length
    if engine.spec.oracle_limits:
        return default_grid(engine.spec.draft_depth, engine.block_size, (al,),
                            large=engine.spec.preset != "tiny",
                            max_batched_tokens=engine.max_num_batched_tokens)
    return derived_grid(engine_limits(engine), acceptance_length=al)


@dataclass
class CollectionRun:
    result: CollectionResult
    artifact: Artifact
    report: Report
    path: Path


class InvalidArtifact(AssertionError):
    """The validator refused an artifact this package wrote."""


class EngineNotRestored(AssertionError):
    """After a collection the engine does not hold or serve what it did at start-up."""


def engine_limits(engine) -> EngineLimits:
    """The started engine's own limits, as the grid derivation needs them."""
    sizes = engine.identity.settings.cudagraph_capture_sizes
    eager = engine.identity.cudagraph_mode.value in ("none", None)
    return EngineLimits(
        draft_depth=engine.spec.draft_depth, block_size=engine.block_size,
        max_num_seqs=engine.max_num_seqs, max_num_batched_tokens=engine.max_num_batched_tokens,
        max_model_len=engine.max_model_len, kv_tokens=engine.kv_capacity.tokens,
        capture_sizes=() if eager or not sizes.resolved else tuple(sizes.value),
        synthetic=engine.spec.synthetic_acceptance_length is not None)


def artifact_name(mode: str, run_id: str, worker: str | None) -> str:
    return f"sdbench-{mode}-{run_id[:12]}" + (f"-{worker}" if worker else "") + ".json"


def collect_to_artifact(engine, mode: str, grid: Grid, out_dir: str | Path,
                        worker: str | None = None, progress=None,
                        decode_tokens: int | None = None, repeats: int = 1) -> CollectionRun:
    """Collect (under tensor parallel, on every rank; rank 0 returns the run), build the
    artifact, check it against the validator and the published JSON
    Schema, and write it atomically. An artifact either refuses is written as
    ``*.invalid.json`` and raised as InvalidArtifact.

    A tensor-parallel engine's proxy runs this on every rank (the same collection, SPMD);
    rank 0 builds, checks and writes the artifact, the other ranks return None."""
    if isinstance(engine, TensorParallelEngine):
        return engine.collect_to_artifact(mode, grid, out_dir, worker=worker, progress=progress,
                                          decode_tokens=decode_tokens, repeats=repeats)
    # Every rank's devices and processes belong to this engine, not to its contention.
    peers = ranks.gather_from_ranks((os.getpid(), tuple(engine.gpu_indices)))
    gpus = tuple(i for _, indices in peers for i in indices)
    with HostMonitor(gpus, own_pids=tuple(pid for pid, _ in peers)) as monitor:
        result = Collector(engine, progress=progress, decode_tokens=decode_tokens,
                           repeats=repeats).collect(mode, grid)
    problems = restoration_violations(engine)  # every rank's, on every rank
    if problems:
        raise EngineNotRestored("after the collection: " + "; ".join(problems))
    if ranks.rank() != 0:  # only rank 0's run reaches the caller (the TP proxy)
        return None  # type: ignore[return-value]
    artifact = build_artifact(result, engine, monitor.environment(), worker=worker)
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


SWEEP_INDEX_KIND = "pytest-sdbench/k-sweep-index"


def write_sweep_index(runs: list[CollectionRun], out_dir: str | Path) -> Path:
    """The index of a K sweep: one artifact per K, over one shared grid shape."""
    entries = sorted(({"draft_depth": r.artifact.speculative.draft_depth,
                       "path": r.path.name, "run_id": r.artifact.run_id,
                       "status": r.artifact.status, "mode": r.artifact.mode,
                       "grid_digest": r.artifact.integrity.grid_digest} for r in runs),
                     key=lambda e: e["draft_depth"])
    index = {"kind": SWEEP_INDEX_KIND, "created_at": utc_now(),
             "draft_depths": [e["draft_depth"] for e in entries], "artifacts": entries,
             "why": "vLLM fixes K (num_speculative_tokens) when the engine starts: its "
                    "drafter, CUDA graphs and KV layout are built for it, so each K is "
                    "measured on an engine of its own"}
    path = Path(out_dir) / f"sdbench-sweep-{uuid.uuid4().hex[:12]}.json"
    return atomic_write_text(path, json.dumps(index, indent=1) + "\n")


def describe(run: CollectionRun) -> str:
    a = run.artifact
    return (f"{run.path} (mode {a.mode}, {a.coverage.completed}/{a.coverage.expected} points, "
            f"status {a.status}, device {a.device}, timing {_source(a)}, "
            f"collection {a.elapsed_seconds:.1f} s)")


def _source(a: Artifact) -> str:
    samples = [o.timing.source for o in a.prefill] + [o.timing.source for o in a.decode]
    return samples[0] if samples else "none"
