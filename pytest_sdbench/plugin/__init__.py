"""The pytest plugin: options, markers, the hooks that build the run's SdbenchSession
(pytest_session.py: its state and its hooks) and the fixtures. Installed through the
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
  sdbench_emulated_server  server(profile) -> URL: `vllm serve` at the profile's prices
Markers:
  sdbench_vram(gib)   skip when the CUDA device has less free memory; fail when the NVML
                      peak while the test runs exceeds the mark
  sdbench_cuda        needs a CUDA device; skipped with the reason otherwise
  sdbench_engine      starts a vLLM engine: applied to every test whose fixtures start one
                      (markers.py); select with -m, --sdbench-skip or --sdbench-only
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..run.options import OPTIONS, add_pytest_options, k_window_note
from . import hookspecs as hooks
from . import markers
from .compare_gate import CompareGate
from .session import SdbenchCollect, SdbenchSession
from .vram_mark import VramMark


def pytest_addhooks(pluginmanager):
    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser):
    group = parser.getgroup("sdbench", "speculative-decoding forward-pass profile (vLLM EAGLE3)")
    add_pytest_options(group)


def pytest_generate_tests(metafunc):
    """A K sweep (--sdbench-k 1-5): every test that uses the engine runs once per K, on an
    engine of that K; pytest groups the tests by K and frees one engine before the next."""
    depths = SdbenchSession.of(metafunc.config).inputs.depths
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
    session = SdbenchSession(config)
    config.pluginmanager.register(session, SdbenchSession.name)
    session.assign_gpu()   # before anything here initialises CUDA
    session.read_inputs({o.dest: config.getoption(f"sdbench_{o.dest}") for o in OPTIONS})
    inputs = session.inputs
    config.pluginmanager.register(VramMark(inputs.engine.tp, session.summary.vram),
                                  VramMark.name)
    if inputs.compare is not None and session.worker is None:   # the controller judges
        config.pluginmanager.register(
            CompareGate(inputs.compare, Path(config.invocation_params.dir),
                        lambda: [run.path for run in session.sweep_runs],
                        session.summary.compare), CompareGate.name)
    note = k_window_note(session.inputs.depths, cli=False)
    if note and session.worker is None:   # the controller's, once (not per worker)
        session.summary.note.append(note)


def pytest_collection_modifyitems(config, items):
    markers.mark_and_select(config, items)


# ---- fixtures -----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def sdbench_session(pytestconfig) -> SdbenchSession:
    """The run's SdbenchSession: its Inputs (.inputs), summary, engine and collections."""
    return SdbenchSession.of(pytestconfig)


@pytest.fixture(scope="session")
def sdbench_k(request, sdbench_session) -> int:
    """The draft depth K of this engine: the one --sdbench-k names, or under a sweep
    (--sdbench-k 1-5) the K of this parametrisation."""
    return getattr(request, "param", sdbench_session.inputs.depths[0])


@pytest.fixture(scope="session")
def sdbench_engine_spec(sdbench_session, sdbench_k):
    """The EngineSpec built from the --sdbench-* options for this K (not started)."""
    try:
        return sdbench_session.inputs.engine.spec(sdbench_k)
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def sdbench_engine(sdbench_session, sdbench_engine_spec):
    """The started target + EAGLE3 engine (SdbenchEngine: .llm, .identity, .kv_capacity,
    .probe()), shut down at the end of the session (or before the next K of a sweep). One
    that fails is shut down at once and replaced before the next test (revive_engine)."""
    engine = sdbench_session.start_engine(sdbench_engine_spec)
    try:
        yield engine
    finally:
        sdbench_session.stop_engine()


@pytest.fixture(scope="session")
def sdbench_grid(sdbench_session, sdbench_engine):
    """The grid of points: --sdbench-grid (read at configure), or the default grid for this
    engine."""
    from ..wire.points import GridError
    try:
        return sdbench_session.service.grid(sdbench_engine)
    except GridError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.fixture(scope="session")
def sdbench_collect(sdbench_session, sdbench_engine, sdbench_grid) -> SdbenchCollect:
    """collect(mode=None, grid=None, decode_tokens=None, repeats=None) -> CollectionRun:
    collect on the engine, validate, check the engine is restored, and write the artifact
    atomically (.artifact, .path, .result). repeats: a number of rounds, or a RepeatPlan
    (pytest_sdbench.wire.rounds); default: the --sdbench-repeats options (SdbenchCollect)."""
    return SdbenchCollect(sdbench_session, sdbench_engine, sdbench_grid)


@pytest.fixture(scope="session")
def sdbench_collection(sdbench_collect):
    """The collection for --sdbench-mode, run once per session (per K in a sweep; the
    sweep's index of these artifacts is written at the end of the session)."""
    return sdbench_collect()


@pytest.fixture(scope="session")
def sdbench_note(sdbench_session):
    """note(text): add a line to the run's sdbench summary (figures a test measured)."""
    return sdbench_session.summary.note.append


@pytest.fixture(scope="session")
def sdbench_fidelity(sdbench_session, sdbench_engine):
    """fidelity(profile, workloads=None, out_dir=None, consumer_python=None,
    warmup_requests=8, plots=True) -> FidelityReport: on the session's engine, which must be
    configured as the profile's (refused otherwise, naming the field), serve each workload
    (fidelity.workload.Workload; default: a short Poisson one for the device), and write the
    report beside the profile (<stem>-fidelity/, or out_dir). `profile` is an artifact path
    or a CollectionRun. report.errors(predictor, kind) holds the figures a gate asserts on:
    median_abs_error, p90_abs_error, bias, steps, priced_steps."""
    from ..fidelity.run import default_workload, run_fidelity

    def fidelity(profile, workloads=None, out_dir=None, consumer_python=None,
                 warmup_requests: int = 8, plots: bool = True):
        path = Path(getattr(profile, "path", profile))
        done = run_fidelity(sdbench_engine, path,
                            workloads or [default_workload(sdbench_engine.device)],
                            Path(out_dir) if out_dir else None, consumer_python,
                            warmup_requests=warmup_requests, plots=plots,
                            say=sdbench_session.write_line)
        sdbench_session.summary.artifact.append(f"fidelity report {done.path}")
        return done
    return fidelity


@pytest.fixture(scope="session")
def sdbench_emulated_server(sdbench_session, tmp_path_factory):
    """server(profile, *vllm_serve_args) -> base URL (plugin/emulated.py EmulatedServers)."""
    from .emulated import EmulatedServers
    servers = EmulatedServers(tmp_path_factory, sdbench_session.write_line)
    yield servers
    servers.close()


@pytest.hookimpl(trylast=True)
def pytest_sdbench_artifact_written(config, path, artifact):
    """With --sdbench-plots, the artifact's plots beside it (run.service's plot)."""
    session = SdbenchSession.of(config)
    page = session.service.plot(path, artifact)
    if page is not None:
        session.summary.artifact.append(f"plots: {page}")
