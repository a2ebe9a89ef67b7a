"""The plugin as a downstream repository uses it: options, markers, fixtures, the hook,
xdist workers, and a clean shutdown. Engine runs go through subprocesses (one engine each).

Three pytest processes of their own, each for a reason no shared run could keep:
- the CUDA markers' run: it imports torch (not twice in one process) and starts no engine,
  so it stays out of the engine runs (it runs, quickly, under --sdbench-skip / -m 'not
  sdbench_engine' too);
- the downstream run: one process, mode decode; its claims are about that process (the
  summary at default verbosity, the hook, no child left at session finish);
- the xdist run: `-n 2 --dist each`, mode prefill, a conftest that holds both engines alive
  together; its claims are about two workers' engines timing each other.
The other cases run in this process (pytester.runpytest): they start no engine."""

import json
import os
import re
from importlib.metadata import entry_points

import pytest

from pytest_sdbench.artifact import validate_path
from pytest_sdbench.cli import main
from pytest_sdbench.engine import host
from pytest_sdbench.run.options import OPTIONS, PYTEST_PREFIX

GRID = {"prefill": [{"batch_size": 2, "new_tokens": 48, "cached_prefix_tokens": 0}],
        "decode": [{"batch_size": 2, "context_tokens": 64, "draft_depth": 3,
                    "acceptance_length": None}]}

DOWNSTREAM_TEST = """
from pytest_sdbench.wire.contract import STATUS_COMPLETE

def test_profile(sdbench_collection, sdbench_engine):
    a = sdbench_collection.artifact
    assert a.status == STATUS_COMPLETE
    assert a.mode == "{mode}"
    assert sdbench_engine.spec.draft_depth == 3
"""

DOWNSTREAM_CONFTEST = """
import json, pathlib, psutil

def pytest_sdbench_artifact_written(config, path, artifact):
    with open("written.txt", "a") as f:
        f.write(f"{path} {artifact.status}\\n")

def pytest_sessionfinish(session):
    # Session fixtures (the engine) are finalised before this hook runs.
    kids = psutil.Process().children(recursive=True)
    pathlib.Path("children.json").write_text(json.dumps([p.name() for p in kids]))
"""


class _Parser:
    """A plugin that keeps pytest's own option parser (pytest_addoption is historic: it is
    called for a plugin registered after the others too)."""

    def pytest_addoption(self, parser):
        self.parser = parser


def test_every_option_of_the_table_is_registered_with_its_default_and_type(pytester):
    """pytest's own parser, not a stand-in: each Option of the table, and nothing else, in
    the sdbench group under --sdbench-NAME (dest sdbench_NAME) with the table's default,
    type and choices; a run that gives none reads every default, and a value given is
    parsed by the table's type."""
    kept = _Parser()
    pytester.plugins.append(kept)
    config = pytester.parseconfig()
    registered = {a.names()[0]: a for a in kept.parser.getgroup("sdbench").options}
    assert sorted(registered) == sorted(PYTEST_PREFIX + o.name for o in OPTIONS)
    for option in OPTIONS:
        arg = registered[PYTEST_PREFIX + option.name]
        assert (arg.dest, arg.type, arg.attrs().get("choices")) == \
            (f"sdbench_{option.dest}", option.type, option.choices), option.name
        assert arg.default == option.default == config.getoption(arg.dest), option.name
    given = pytester.parseconfig("--sdbench-stall-seconds=2.5", "--sdbench-k=1-3")
    assert (given.getoption("sdbench_stall_seconds"), given.getoption("sdbench_k")) == \
        (2.5, (1, 2, 3))


def test_markers_are_registered(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.sdbench_vram(gib)*", "@pytest.mark.sdbench_cuda*",
                                 "@pytest.mark.sdbench_engine*"])


def test_pytest_loads_the_plugin_through_its_entry_point(pytestconfig):
    (entry,) = entry_points(group="pytest11", name="sdbench")
    assert entry.value == "pytest_sdbench.plugin"
    assert pytestconfig.pluginmanager.get_plugin("sdbench") is entry.load()


def test_every_sdbench_fixture_has_a_docstring(pytester):
    lines = pytester.runpytest("--fixtures").stdout.lines
    fixtures = {line.split()[0]: lines[i + 1].strip() for i, line in enumerate(lines[:-1])
                if line.startswith("sdbench_")}
    assert {"sdbench_engine", "sdbench_collect", "sdbench_collection", "sdbench_grid",
            "sdbench_note", "sdbench_engine_spec", "sdbench_k"} <= set(fixtures)
    assert [name for name, doc in fixtures.items() if doc == "no docstring available"] == []


def test_bad_mode_is_refused_naming_the_value(pytester):
    result = pytester.runpytest("--sdbench-mode=both")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--sdbench-mode: invalid choice: 'both'*"])


def test_vram_and_cuda_markers_skip_with_a_reason_on_cpu(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.sdbench_vram(3.6)
        def test_needs_vram():
            raise AssertionError("must not run without CUDA")

        @pytest.mark.sdbench_cuda
        def test_needs_cuda():
            raise AssertionError("must not run without CUDA")
    """)
    # In a process of its own: the markers import torch, and an in-process run drops what it
    # imported from sys.modules afterwards; torch cannot be imported twice in one process
    # (SystemError), so a later engine start in this process would fail.
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*needs a CUDA device; none is visible*"])


def test_model_without_draft_is_a_usage_error(pytester):
    pytester.makepyfile("def test_x(sdbench_engine_spec): pass")
    result = pytester.runpytest(f"--sdbench-model={pytester.path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --sdbench-model and --sdbench-draft go together*"])

# Each worker's collection runs while the other's engine is registered, so each sees exactly
# one other engine: both wait until the other's registration is in their registry folder (the
# test's own: no other engine of the host is counted), and each keeps its engine until the
# other's collection is done. Each wait has an event to wait for, and fails naming it.
ENGINES_OVERLAP = """
import time
from pathlib import Path

import pytest

from pytest_sdbench.engine import host

WAIT_S = 300


def _wait_for(what, seen):
    deadline = time.monotonic() + WAIT_S
    while not seen():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {{WAIT_S}} s for {{what}}", pytrace=False)
        time.sleep(0.2)


@pytest.fixture(scope="session", autouse=True)
def _engines_overlap(sdbench_engine, worker_id):
    other = {{"gw0": "gw1", "gw1": "gw0"}}[worker_id]
    _wait_for(f"{{other}}'s engine registration in {{host.registry_dir()}}",
              lambda: host.other_engines() >= 1)
    yield
    done = Path({done!r})
    (done / worker_id).touch()
    _wait_for(f"{{other}}'s collection to end ({{done / other}})", (done / other).exists)
"""


def _downstream(pytester, mode):
    pytester.makeconftest(DOWNSTREAM_CONFTEST)
    pytester.makepyfile(test_downstream=DOWNSTREAM_TEST.format(mode=mode))
    (pytester.path / "grid.json").write_text(json.dumps(GRID))
    return ["-p", "no:cacheprovider", f"--sdbench-mode={mode}", "--sdbench-grid=grid.json",
            "--sdbench-artifact-dir=out"]


@pytest.mark.slow
@pytest.mark.sdbench_engine
def test_downstream_collection_writes_a_valid_artifact_and_shuts_down(pytester):
    args = _downstream(pytester, "decode")
    result = pytester.runpytest_subprocess(*args, timeout=600)
    result.assert_outcomes(passed=1)
    (artifact,) = (pytester.path / "out").glob("sdbench-decode-*.json")
    assert validate_path(artifact).ok
    assert artifact.name.startswith("sdbench-decode-k3-")
    result.stdout.fnmatch_lines(["*= sdbench =*", f"artifact: {artifact} (mode decode, K=3, "
                                 "1/1 points, status complete, device cpu*"])
    # at pytest's default verbosity no progress line breaks its row of dots
    assert not [line for line in result.outlines if line.startswith("sdbench [")]
    assert (pytester.path / "written.txt").read_text().split() == [str(artifact), "complete"]
    assert json.loads((pytester.path / "children.json").read_text()) == []


@pytest.mark.slow
@pytest.mark.sdbench_engine
def test_xdist_workers_each_run_an_engine_and_the_controller_reports_all(pytester, capsys,
                                                                         monkeypatch):
    """Two engines on one 2-core CPU time each other: both artifacts say so (contended, the
    other engine seen through the registry), and `sdbench compare` refuses them."""
    # A registry of the run's own: the engines it counts are its two workers', whatever else
    # runs on the host (this session's engine, another test's, another user's).
    registry = pytester.path / "registry"
    monkeypatch.setenv(host.REGISTRY_ENV, str(registry))
    done = pytester.mkdir("done")
    args = _downstream(pytester, "prefill")
    pytester.makeconftest(DOWNSTREAM_CONFTEST + ENGINES_OVERLAP.format(done=str(done)))
    result = pytester.runpytest_subprocess(*args, "-n", "2", "--dist", "each", timeout=600)
    assert result.ret == 0, "\n".join(result.outlines[-60:])
    result.assert_outcomes(passed=2)
    artifacts = sorted((pytester.path / "out").glob("sdbench-prefill-*.json"))
    assert len(artifacts) == 2
    workers = sorted(re.search(r"-(gw\d+)\.json$", p.name).group(1) for p in artifacts)
    assert workers == ["gw0", "gw1"]
    assert all(validate_path(p).ok for p in artifacts)
    for path in artifacts:
        result.stdout.fnmatch_lines([f"artifact: {path} (mode prefill*, contended: *"])
        env = validate_path(path).artifact.environment
        assert env.contended, env
        assert env.other_sdbench_engines == 1, env
        assert "1 other sdbench engine(s) alive on this host" in env.reason
    assert os.listdir(registry) == []    # each entry removed at its engine's shutdown
    assert main(["compare", *map(str, artifacts)]) == 1
    out = capsys.readouterr().out
    assert "baseline: ran contended (1 other sdbench engine(s)" in out
    assert "candidate: ran contended (1 other sdbench engine(s)" in out


class _Config:
    def __init__(self, verbose: int):
        self.verbose = verbose

    def getoption(self, name):
        assert name == "verbose"
        return self.verbose


def test_progress_lines_are_shown_under_dash_v_only():
    """At pytest's default verbosity a line per point would break its rows of dots."""
    from pytest_sdbench.plugin.session import progress
    assert progress(_Config(0)) is None
    assert progress(_Config(-1)) is None
    assert callable(progress(_Config(1)))
