"""The pytest run's own state, as pytest-benchmark's BenchmarkSession and pytest-xdist's
DSession hold theirs: one SdbenchSession a process (the controller's, and each xdist
worker's), built at configure from the run's Inputs and registered as a plugin, so that its
hooks (the VRAM mark, engine revival, the sweep indexes, the summary) read typed fields.
plugin.py holds the options, the hooks that build it, and the fixtures.

Engines: one per process (per K of a sweep); on CUDA each xdist worker gets a GPU of its
own, and with more workers than GPUs no engine starts (every test that needs one fails at
once with the reason).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..run.inputs import Inputs
from ..run.options import DEFAULT_ARTIFACT_DIR
from ..run.service import CollectionService
from . import markers

RESTARTS_ALLOWED = 1   # a fresh engine after a failure; a second failure is final
WORKER_OUTPUT_KEY = "sdbench_session"   # the workeroutput key a worker hands its state under


def xdist_worker(holder: Any) -> str | None:
    """This process's pytest-xdist worker id (gw0, ...), by xdist's own helpers (they read
    holder.config); None in the controller, in a run without workers, or without xdist."""
    try:
        from xdist import get_xdist_worker_id, is_xdist_worker
    except ImportError:
        return None
    return get_xdist_worker_id(holder) if is_xdist_worker(holder) else None


@dataclass
class Summary:
    """The run's sdbench section of the terminal summary, by kind of line."""
    artifact: list[str] = field(default_factory=list)
    engine: list[str] = field(default_factory=list)
    vram: list[str] = field(default_factory=list)
    note: list[str] = field(default_factory=list)
    compare: list[str] = field(default_factory=list)

    def sections(self) -> Iterator[tuple[str, list[str]]]:
        for f in dataclasses.fields(self):
            yield f.name, getattr(self, f.name)

    def extend(self, other: dict[str, list[str]]) -> None:
        for name, lines in other.items():
            getattr(self, name).extend(lines)


@dataclass(frozen=True)
class CallKey:
    """What makes collections of a K sweep alike: the same call of sdbench_collect on each
    K's engine (its own grid, or the same given grid with K taken out)."""
    mode: str
    grid: str | None            # the digest of the given grid without K; None: the engine's
    decode_tokens: int | None
    repeats: str | None         # the repeats given to the call (repr); None: the options'


@dataclass(frozen=True)
class SweepRun:
    """One artifact sdbench_collect wrote, with what its K sweep groups it by."""
    call: CallKey
    draft_depth: int
    worker: str | None
    path: str

    def to_wire(self) -> list:   # xdist hands plain lists from a worker to the controller
        return [dataclasses.astuple(self.call), self.draft_depth, self.worker, self.path]

    @classmethod
    def from_wire(cls, data: list) -> SweepRun:
        call, k, worker, path = data
        return cls(CallKey(*call), k, worker, path)


class SdbenchSession:
    """The run's state (typed fields) and the hooks that use it; registered as a plugin."""

    name = "sdbench_session"

    def __init__(self, config: pytest.Config):
        self.config = config
        self._inputs: Inputs | None = None      # read at configure (read_inputs)
        self.worker = xdist_worker(self)        # gw0, ..., or None (the controller)
        self.summary = Summary()
        self.sweep_runs: list[SweepRun] = []
        self.engine: Any = None                 # the started engine (the current K's)
        self.reported_failure: str | None = None   # the engine failure already summarised
        self.engine_refused: str | None = None  # why no engine may start in this run

    @property
    def inputs(self) -> Inputs:
        """The run's Inputs: the options, read once at configure."""
        if self._inputs is None:
            raise RuntimeError("sdbench: the options were not read (pytest_configure)")
        return self._inputs

    @classmethod
    def of(cls, config: pytest.Config) -> SdbenchSession:
        return config.pluginmanager.getplugin(cls.name)

    # ---- configure ------------------------------------------------------------------------

    def assign_gpu(self) -> None:
        """pytest-xdist on CUDA: worker gwN gets visible GPU N as its only device (set before
        anything initialises CUDA here). With more workers than GPUs no engine starts:
        every test that needs one fails at once with the reason (refuse_engine); the rest of
        the run, which may not use sdbench at all, goes on."""
        from ..engine.host import CUDA_VISIBLE_ENV, gpu_for_worker, visible_gpus
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 0)) if self.worker else \
            int(getattr(self.config.option, "numprocesses", None) or 0)
        if workers < 1:
            return
        visible = visible_gpus()
        if not visible:
            return   # CPU: concurrent engines are measured and recorded (host.HostMonitor)
        try:
            device = gpu_for_worker(int(self.worker.removeprefix("gw")) if self.worker else 0,
                                    workers, visible)
        except ValueError as exc:
            self.engine_refused = f"sdbench: {exc}"
            return
        if self.worker:
            os.environ[CUDA_VISIBLE_ENV] = device

    def read_inputs(self, values: dict) -> None:
        """The options, read and checked once, before any engine starts: one usage error
        (exit 4), not an error per test after an engine start. The default artifact folder
        is no option the user gave: when it cannot be written, only the tests that need an
        engine are refused."""
        from ..run.inputs import read_inputs
        from ..run.options import InputError
        from ..wire.files import out_dir_problem
        chosen = values.get("artifact_dir")
        try:
            self._inputs = read_inputs(values, cli=False,
                                      out_dir=self.artifact_dir if chosen else None)
        except InputError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.service = CollectionService(self._inputs, worker=self.worker, say=self.notify)
        problem = None if chosen else out_dir_problem(self.artifact_dir)
        if problem and self.engine_refused is None:
            self.engine_refused = (f"sdbench: artifacts cannot be written: {problem}; "
                                   "pass --sdbench-artifact-dir")

    @property
    def artifact_dir(self) -> Path:
        chosen = self.config.getoption("sdbench_artifact_dir")   # a test may set it late
        if chosen:  # relative to where pytest was invoked, reported as an absolute path
            return (Path(self.config.invocation_params.dir) / chosen).resolve()
        return Path(self.config.rootpath) / DEFAULT_ARTIFACT_DIR

    # ---- the engine -----------------------------------------------------------------------

    def start_engine(self, spec):
        """The engine of this spec, started (run.service); vLLM missing, another user's
        engine registry or a known cause of a failed start fails the test in one line (with
        the fix); any other failure is raised as it came."""
        from ..run.service import EngineNotStarted
        try:
            self.engine = self.service.start(spec)
        except EngineNotStarted as exc:
            if not (exc.unusable or exc.known) and exc.__cause__ is not None:
                raise exc.__cause__ from None
            pytest.fail(str(exc) if exc.unusable else f"sdbench: {exc}", pytrace=False)
        return self.engine

    def stop_engine(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.shutdown()

    def refuse_engine(self, item: pytest.Item) -> None:
        """A test that needs the engine, in a run where none may start, fails before one
        does."""
        if self.engine_refused and markers.starts_engine(item):
            pytest.fail(self.engine_refused, pytrace=False)

    def revive_engine(self, item: pytest.Item) -> None:
        """A test that needs the engine after it failed gets a fresh one (RESTARTS_ALLOWED
        times a session), else fails fast with the first cause; never the failed engine."""
        engine = self.engine
        if engine is None or engine.failure is None or not markers.starts_engine(item):
            return
        cause = engine.failure
        if engine.restarts >= RESTARTS_ALLOWED:
            pytest.fail(f"sdbench engine unusable: it failed ({cause}) after {engine.restarts} "
                        "restart(s); not restarted again", pytrace=False)
        try:
            engine.restart()
        except Exception as exc:  # noqa: BLE001 (one line: the first cause and the restart's)
            from ..engine.surface import describe_failure
            pytest.fail(f"sdbench engine unusable: it failed ({cause}) and the restart failed "
                        f"too ({describe_failure(exc)})", pytrace=False)
        self.summary.engine.append(
            f"{item.nodeid}: a fresh engine started in {engine.start_seconds:.1f} s in place of "
            f"the one that failed ({cause})")

    # ---- the tests' hooks -----------------------------------------------------------------

    def pytest_runtest_setup(self, item):
        """A test that needs an engine where none may start fails; an engine that failed
        before this test's fixtures use it is replaced (the VRAM mark's sampler starts after
        this: plugin.vram_mark)."""
        self.refuse_engine(item)
        self.revive_engine(item)

    def pytest_runtest_teardown(self, item):
        engine = self.engine
        if engine is not None and engine.failure and self.reported_failure != engine.failure:
            self.reported_failure = engine.failure
            self.summary.engine.append(
                f"{item.nodeid}: the engine failed ({engine.failure}); it was shut down and is "
                "not reused")

    # ---- collections ----------------------------------------------------------------------

    def progress(self) -> Callable[[int, int, str], None] | None:
        return progress(self.config)

    def write_line(self, text: str) -> None:
        write_line(self.config, text)

    def notify(self, text: str) -> None:
        """Where a partial artifact was left: on the terminal now, and in the summary."""
        self.write_line(text)
        self.summary.artifact.append(text.removeprefix("sdbench: "))

    def record(self, run, call: CallKey) -> None:
        """A collection sdbench_collect wrote: in the summary, the sweep's runs and the
        artifact hook."""
        from ..run.collect import describe
        self.summary.artifact.append(describe(run))

        self.sweep_runs.append(SweepRun(call, run.artifact.speculative.draft_depth,
                                        self.worker, str(run.path)))
        self.config.hook.pytest_sdbench_artifact_written(
            config=self.config, path=run.path, artifact=run.artifact)

    # ---- the end --------------------------------------------------------------------------

    def pytest_sessionfinish(self, session):
        config = self.config
        if hasattr(config, "workeroutput"):  # an xdist worker hands its state to the controller
            config.workeroutput[WORKER_OUTPUT_KEY] = {
                "summary": dict(self.summary.sections()),
                "sweep_runs": [run.to_wire() for run in self.sweep_runs]}
            return
        if self._inputs is not None and len(self._inputs.depths) > 1:
            self.write_sweep_indexes()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        output = (getattr(node, "workeroutput", {}) or {}).get(WORKER_OUTPUT_KEY, {})
        self.summary.extend(output.get("summary", {}))
        self.sweep_runs.extend(SweepRun.from_wire(run) for run in output.get("sweep_runs", ()))

    def write_sweep_indexes(self) -> None:
        """A K sweep's index for each kind of collection its tests made on every K (the same
        sdbench_collect call on each K's engine; sdbench_collection's among them), written
        by the controller from every worker's runs. Where a K was collected more than once
        (every worker ran every K: --dist each), one index per worker."""
        from ..artifact import validate_path
        groups: dict[CallKey, list[SweepRun]] = {}
        for run in self.sweep_runs:
            groups.setdefault(run.call, []).append(run)
        for runs in groups.values():
            ks = [r.draft_depth for r in runs]
            parts = [runs] if len(set(ks)) == len(ks) else \
                [[r for r in runs if r.worker == w] for w in dict.fromkeys(r.worker for r in runs)]
            for part in parts:
                first = {r.draft_depth: r.path for r in reversed(part)}   # each K's first run
                if len(first) < 2:
                    continue
                loaded = [(a, Path(path)) for path in first.values()
                          if (a := validate_path(path).artifact) is not None]
                line = self.service.write_sweep_index(loaded, self.artifact_dir)
                self.summary.artifact.append(f"K-sweep index {line}")

    def pytest_terminal_summary(self, terminalreporter, config):
        if not any(lines for _, lines in self.summary.sections()):
            return
        terminalreporter.section("sdbench")
        for section, lines in self.summary.sections():
            for line in lines:
                terminalreporter.write_line(f"{section}: {line}")


def progress(config) -> Callable[[int, int, str], None] | None:
    """Progress lines on the terminal while a long collection runs (capture suspended),
    under -v: at pytest's default verbosity they would break its lines of dots."""
    if config.getoption("verbose") < 1:
        return None
    started = time.perf_counter()

    def show(done: int, total: int, label: str) -> None:
        write_line(config, f"sdbench [{done}/{total}] {label} "
                           f"({time.perf_counter() - started:.1f} s)")
    return show


def write_line(config, text: str) -> None:
    """A line on the terminal now, past output capture."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    if capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.write_line(text)
    else:
        reporter.write_line(text)


class SdbenchCollect:
    """The sdbench_collect fixture, as pytest-benchmark's `benchmark` fixture is a class:
    collect(mode=None, grid=None, decode_tokens=None, repeats=None) -> CollectionRun collects
    on the session's engine, validates, checks the engine is restored, and writes the
    artifact atomically (.artifact, .path, .result). mode: the run's (--sdbench-mode) when
    None; grid: the session's grid, or a Grid, a dict in the manifest's shape or a manifest's
    path; repeats: the run's repeat plan (the --sdbench-repeats options), a number of rounds,
    or a RepeatPlan (pytest_sdbench.wire.rounds).

    Each collection is said to the user (a line in the sdbench summary, progress under -v,
    the artifact hook) and counted in the run (K-sweep indexes, --sdbench-compare), unless
    the fixture is `quietly(folder)`'s: collections as machinery (a package's own tests),
    written into that folder and said to no one."""

    def __init__(self, session: SdbenchSession, engine, grid, out_dir: Path | None = None):
        self.session, self.engine, self.grid = session, engine, grid
        self.out_dir = out_dir      # None: the run's artifact folder, and said to the user

    def quietly(self, out_dir: str | Path) -> SdbenchCollect:
        return SdbenchCollect(self.session, self.engine, self.grid, Path(out_dir))

    def __call__(self, mode: str | None = None, grid=None, decode_tokens: int | None = None,
                 repeats=None):
        from ..wire.rounds import RepeatPlan
        given = grid
        if grid is not None:   # a Grid, or a dict in the manifest's shape: one line if not
            from ..grid import as_grid
            from ..wire.points import GridError
            try:
                grid = as_grid(grid)
            except GridError as exc:
                pytest.fail(f"sdbench_collect(grid=...): {exc}", pytrace=False)
        plan = None if repeats is None else \
            repeats if isinstance(repeats, RepeatPlan) else RepeatPlan(repeats=repeats)
        session = self.session
        quiet = self.out_dir is not None
        run = session.service.collect(
            self.engine, mode, grid or self.grid, decode_tokens, plan,
            out_dir=self.out_dir if quiet else session.artifact_dir,
            progress=None if quiet else session.progress(), quiet=quiet)
        if not quiet:
            session.record(run, _call_key(mode or session.inputs.mode,
                                          grid if given is not None else None,
                                          decode_tokens, repeats))
        return run


def _call_key(mode: str, grid, decode_tokens: int | None, repeats) -> CallKey:
    from ..grid.shared import without_depth
    from ..wire import typed
    return CallKey(mode, None if grid is None else typed.digest(without_depth(grid)),
                   decode_tokens, None if repeats is None else repr(repeats))
