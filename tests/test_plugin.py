"""The plugin as a downstream repository uses it: options, markers, fixtures, the hook,
xdist workers, and a clean shutdown. Engine runs go through subprocesses (one engine each)."""

import json
import os
import re
from importlib.metadata import entry_points

import pytest

from pytest_sdbench import host
from pytest_sdbench.artifact import validate_path
from pytest_sdbench.cli import main

GRID = {"prefill": [{"batch_size": 2, "new_tokens": 48, "cached_prefix_tokens": 0}],
        "decode": [{"batch_size": 2, "context_tokens": 64, "draft_depth": 3,
                    "acceptance_length": None}]}

DOWNSTREAM_TEST = """
from pytest_sdbench.contract import STATUS_COMPLETE

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


def test_options_are_registered(pytester):
    result = pytester.runpytest("--help")
    for option in ("--sdbench-mode={prefill,decode,agg}", "--sdbench-preset",
                   "--sdbench-model=DIR", "--sdbench-draft=DIR", "--sdbench-k=K",
                   "--sdbench-grid=JSON", "--sdbench-artifact-dir=DIR"):
        result.stdout.fnmatch_lines([f"*{option}*"])


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
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*needs a CUDA device; none is visible*"])


def test_model_without_draft_is_a_usage_error(pytester):
    pytester.makepyfile("def test_x(sdbench_engine_spec): pass")
    result = pytester.runpytest(f"--sdbench-model={pytester.path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --sdbench-model and --sdbench-draft go together*"])

# The two workers' collections overlap (each sees the other's engine at its start), or one
# worker could finish before the other's engine started, and see one engine fewer.
BOTH_ENGINES_UP = """
import time

import pytest

from pytest_sdbench import host


@pytest.fixture(scope="session", autouse=True)
def _both_engines_up(sdbench_engine):
    deadline = time.monotonic() + 300
    while host.other_engines() < {others} and time.monotonic() < deadline:
        time.sleep(0.2)
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
def test_xdist_workers_each_run_an_engine_and_the_controller_reports_all(pytester, capsys):
    """Two engines on one 2-core CPU time each other: both artifacts say so (contended, the
    other engine seen through the registry), and `sdbench compare` refuses them."""
    # Engines alive before the run count too: this session's own (when the whole suite
    # runs, an earlier test's session engine is still up) and any other process's.
    alive = host.other_engines() + (host.registry_dir() / f"{os.getpid()}.lock").exists()
    others = 1 + alive   # the other worker's engine, and those
    args = _downstream(pytester, "prefill")
    pytester.makeconftest(DOWNSTREAM_CONFTEST + BOTH_ENGINES_UP.format(others=others))
    result = pytester.runpytest_subprocess(*args, "-n", "2", "--dist", "each", timeout=600)
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
        assert env.other_sdbench_engines == others, env
        assert f"{others} other sdbench engine(s) alive on this host" in env.reason
    assert main(["compare", *map(str, artifacts)]) == 1
    out = capsys.readouterr().out
    assert f"baseline: ran contended ({others} other sdbench engine(s)" in out
    assert f"candidate: ran contended ({others} other sdbench engine(s)" in out


class _Config:
    def __init__(self, verbose: int):
        self.verbose = verbose

    def getoption(self, name):
        assert name == "verbose"
        return self.verbose


def test_progress_lines_are_shown_under_dash_v_only():
    """At pytest's default verbosity a line per point would break its rows of dots."""
    from pytest_sdbench.plugin import _progress
    assert _progress(_Config(0)) is None
    assert _progress(_Config(-1)) is None
    assert callable(_progress(_Config(1)))
