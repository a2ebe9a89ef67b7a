"""The run the plugin and the CLI share: one collection turned into a validated artifact
file, written as it goes (a checkpoint after every point), so that an interruption loses
nothing measured. The user's input is checked before (inputs.py), the engine's spec built
from it (engine/spec.py)."""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..artifact import schema
from ..artifact.build import build_artifact
from ..artifact.store import parse_json, write_artifact
from ..artifact.sweep import k_label
from ..artifact.validate.report import Report, validate_data
from ..engine import ranks
from ..engine.host import HostMonitor
from ..engine.restoration import restoration_violations
from ..engine.surface import Engine, describe_failure, in_process
from ..grid.choice import GridChoice
from ..grid.defaults import default_grid, derived_grid
from ..measure.collector import Collector
from ..measure.result import CollectionResult, check_grid_fits
from ..wire.contract import (
    PHASES,
    REPEAT_BACK_TO_BACK,
    STATUS_COMPLETE,
    STOP_PINNED,
    collected_phases,
)
from ..wire.model import Artifact
from ..wire.points import Grid, GridError, check_grid_for_mode
from ..wire.rounds import ONE_ROUND, RepeatPlan
from .partial import PartialArtifact


def grid_for(engine: Engine, choice: GridChoice | None = None,
             mixed: GridChoice | None = None) -> Grid:
    """The grid --grid chose (read before the engine started: inputs.Inputs.grid) for this
    engine; else the oracle presets' small grid, or the grid derived from the engine's own
    limits (grid.defaults.derived_grid); and the mixed points --mixed chose beside it."""
    al, k = engine.spec.synthetic_acceptance_length, engine.spec.draft_depth
    if choice is not None:
        grid = choice.grid(k, engine.limits, al)
    elif engine.spec.oracle_limits:
        grid = default_grid(k, engine.block_size, (al,), large=engine.spec.preset != "tiny",
                            max_batched_tokens=engine.max_num_batched_tokens)
    else:
        grid = derived_grid(engine.limits, acceptance_length=al)
    if mixed is None:
        return grid
    added = mixed.grid(k, engine.limits, al).mixed
    return dataclasses.replace(grid, mixed=tuple(dict.fromkeys((*grid.mixed, *added))))


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


class ArtifactNotWritten(OSError):
    """The final artifact could not be written (a full disk, an unwritable folder); the
    measured data is in .partial_path when a checkpoint was written, and in .artifact."""

    def __init__(self, message: str, artifact: Artifact, partial_path: Path | None):
        super().__init__(message)
        self.artifact, self.partial_path = artifact, partial_path


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def collect_to_artifact(engine: Engine, mode: str, grid: Grid, out_dir: str | Path,
                        worker: str | None = None, progress=None,
                        decode_tokens: int | None = None, repeats: RepeatPlan = ONE_ROUND,
                        notify: Callable[[str], None] | None = None) -> CollectionRun:
    """Collect with a checkpoint after every point (PartialArtifact), build the artifact, check
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
    if not in_process(engine):
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
    check_grid_fits(grid.only(collected_phases(mode, bool(grid.mixed))), engine, decode_tokens)
    with HostMonitor(gpus, own_pids=tuple(pid for pid, _ in peers)) as monitor:
        checkpoint = PartialArtifact(engine, Path(out_dir), name, run_id, worker, monitor, notify)
        try:
            if engine.observer_cost is None:
                # Before anything is measured: the observer's own host time a step on this
                # engine (every rank of a tensor-parallel engine runs the probe, rank 0's is
                # recorded). Inside the try: an engine that fails or is interrupted in the
                # probe is failed and shut down like one that does so in the collection.
                from ..measure.observer_cost import measure
                engine.observer_cost = measure(engine)
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
                     checkpoint: PartialArtifact) -> CollectionRun:
    """Check the text that is written (ArtifactText makes it again, the same): the validator
    here, the published JSON Schema beside it (in worker processes for a long artifact)."""
    text = checkpoint.text.text(artifact)
    data = parse_json(text, str(final_path))
    with ThreadPoolExecutor(1) as beside:
        published = beside.submit(schema.violations, data)
        report = validate_data(data)
        errors = [*report.errors, *(f"JSON Schema: {m}" for m in published.result())]
    if errors:
        bad = write_artifact(artifact, final_path.with_suffix(".invalid.json"), checkpoint.text)
        checkpoint.remove()
        raise InvalidArtifact(f"the artifact failed validation ({bad}): " + "; ".join(errors))
    try:
        path = write_artifact(artifact, final_path, checkpoint.text)   # the text checked
    except OSError as exc:
        path = _rescue(artifact, final_path, exc, checkpoint)
    checkpoint.remove()
    return CollectionRun(result, artifact, report, path)


def _rescue(artifact: Artifact, final_path: Path, exc: OSError,
            checkpoint: PartialArtifact) -> Path:
    """The final write failed (a full disk): keep every measured point somewhere, and say
    where and how many. A checkpoint that already holds them all is where they are. A stale
    one (the disk filled after it was written: it holds fewer) is removed, which frees its
    space, and the final write is tried again; then the validated artifact goes to the temp
    folder. Returns final_path when the second try wrote it; raises ArtifactNotWritten
    otherwise, naming the file that holds the points (partial_path), or none."""
    measured, expected = artifact.coverage.completed, artifact.coverage.expected
    if checkpoint.written and checkpoint.kept == measured:
        raise ArtifactNotWritten(
            f"could not write {final_path} ({exc}); the measured points are in "
            f"{checkpoint.path} (its last checkpoint: {measured}/{expected} points)", artifact,
            checkpoint.path) from exc
    stale = (f"its stale checkpoint {checkpoint.path} ({checkpoint.kept}/{expected} points) was "
             "removed; ")
    if checkpoint.written:
        checkpoint.remove()
        checkpoint.written = False
        try:
            path = write_artifact(artifact, final_path)
        except OSError:
            pass
        else:
            checkpoint.notify(f"sdbench: the first write of {final_path} failed ({exc}); it "
                              f"was written once the stale checkpoint {checkpoint.path} was "
                              "removed")
            return path
    else:
        stale = ""
    rescue = Path(tempfile.gettempdir()) / final_path.name
    try:
        kept = write_artifact(artifact, rescue)
    except OSError as second:
        raise ArtifactNotWritten(
            f"could not write {final_path} ({exc}) nor {rescue} ({second.strerror or second}); "
            f"{stale}the {measured}/{expected} measured points are on no disk", artifact,
            None) from exc
    raise ArtifactNotWritten(
        f"could not write {final_path} ({exc}); {stale}the {measured}/{expected} measured "
        f"points are kept in {kept} (the checked artifact, written to the temp folder "
        "instead)", artifact, kept) from exc


def _leave_partial(checkpoint: PartialArtifact, exc: BaseException, notify) -> None:
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


def describe_time(result: CollectionResult) -> str:
    """Where the collection's wall time went, and its ratio to the retained steps' time."""
    parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in
                      sorted(result.breakdown.seconds.items(), key=lambda kv: -kv[1]))
    reseeds = result.breakdown.counts.get("reseeds", 0)
    ratio = (f"{result.elapsed_seconds / result.measured_seconds:.1f}"
             if result.measured_seconds else "n/a")
    return (f"collection {result.elapsed_seconds:.1f} s, retained steps "
            f"{result.measured_seconds:.2f} s (wall : retained steps = {ratio}); {parts}; "
            f"{reseeds} re-seed(s) after a cache miss")


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
    samples = [o.timing.source for phase in PHASES for o in getattr(a, phase)]
    return samples[0] if samples else "none"
