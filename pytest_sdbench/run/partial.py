"""The partial artifact of a running collection: rewritten atomically as it goes, so that an
interruption loses nothing measured (only a SIGKILL loses the samples since the last write).
It is <name>.partial.json while points remain, <name>.unchecked.json once every point is
measured but the run has not yet checked and written the final artifact."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path

from ..artifact.build import build_artifact
from ..artifact.store import ArtifactText, write_artifact
from ..engine.host import HostMonitor
from ..engine.surface import InProcessEngine
from ..measure.result import CollectionResult
from ..wire.contract import PHASES, STATUS_COMPLETE
from ..wire.model import Artifact, SkippedPoint

PARTIAL_SUFFIX, UNCHECKED_SUFFIX = ".partial.json", ".unchecked.json"


def partial_name(name: str) -> str:
    """The checkpoint beside an artifact while points remain: sdbench-agg-k3-<run>.partial.json."""
    return name.removesuffix(".json") + PARTIAL_SUFFIX


def unchecked_name(name: str) -> str:
    """The checkpoint once every point was measured but the run did not finish (its engine's
    restoration, validation and the final write): <name>.unchecked.json. Its status is
    'complete' (every point measured); the name says it was never checked."""
    return name.removesuffix(".json") + UNCHECKED_SUFFIX


# The partial artifact is rewritten at most this often while a collection runs (and whenever a
# round ends): a profile of 94 points x 5 rounds is 1.7 MB of JSON, and rewriting it after
# every sample cost more than the samples. An interruption or an engine failure rewrites it
# at once from what was measured (_leave_partial), so only a hard kill (SIGKILL) loses
# anything: the samples since the last write.
PARTIAL_WRITE_SECONDS = 10.0
# Writing the partial artifact writes every sample taken so far, each encoded once (ArtifactText:
# 0.2 s for the planning profile's 8,625 observations on the 2-core CPU machine, where
# encoding them all took 3.2 s), so it takes at most this share of the run's time: the next
# one waits fifty times as long as the last took, and never less than PARTIAL_WRITE_SECONDS.
# (At a share of 0.05 the H100 plan-grade run spent 20.3 s of its 650.9 s writing; encoding
# every sample at each write, the H200's 61.9 s of 828.5 at 0.1.) Only a SIGKILL loses the
# samples since the last write.
PARTIAL_WRITE_SHARE = 0.02


class PartialArtifact:
    """The partial artifact of a running collection, rewritten atomically as it goes (every
    PARTIAL_WRITE_SECONDS, or later where writing takes longer than PARTIAL_WRITE_SHARE of the
    time, and at the end of every round): the samples taken, and every point
    not measured yet skipped as 'not reached: <cause>'. It is <name>.partial.json while
    points remain, <name>.unchecked.json once every point is measured (status complete, but
    not checked: the run may still stop before the final artifact). A write that fails (a
    full disk) is reported once and the collection goes on."""

    def __init__(self, engine: InProcessEngine, folder: Path, name: str, run_id: str,
                 worker: str | None, monitor: HostMonitor, notify: Callable[[str], None]):
        self.engine, self.folder, self.name = engine, folder, name
        self.run_id, self.worker = run_id, worker
        self.monitor, self.notify = monitor, notify
        self.path = folder / partial_name(name)   # the file written last (or to be)
        self.text = ArtifactText()   # each sample encoded once, for every write
        self.result: CollectionResult | None = None
        self.written = False
        self.kept = 0                   # the points the file written last holds
        self.error: OSError | None = None
        self._last_write = -math.inf   # when the last write ended (time.monotonic)
        self._last_cost = 0.0           # how long it took
        self._rounds_ended = 0   # rounds ended at the last write: a round's end writes

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
            write_artifact(artifact, path, self.text)
        except OSError as exc:
            if self.error is None:
                self.notify(f"sdbench: could not write the checkpoint {self.path} ({exc}); "
                            "the collection goes on")
            self.error = exc
            return None
        if self.written and path != self.path:
            self.path.unlink(missing_ok=True)   # the partial, now that every point is in
        self.path, self.written, self.kept = path, True, artifact.coverage.completed
        return artifact

    def on_point(self, result: CollectionResult) -> None:
        self.result = result
        now = time.monotonic()
        ended = sum(r.canary_after is not None for r in result.rounds)
        wait = max(PARTIAL_WRITE_SECONDS, self._last_cost / PARTIAL_WRITE_SHARE)
        if now - self._last_write < wait and ended == self._rounds_ended:
            return
        self._rounds_ended = ended
        self.write("the collection was still running when this checkpoint was written")
        self._last_write = time.monotonic()
        self._last_cost = self._last_write - now

    def remove(self) -> None:
        if self.written:
            self.path.unlink(missing_ok=True)
