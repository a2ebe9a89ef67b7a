"""The options, without an engine: one table rendered as pytest's --sdbench-* options and
`sdbench collect`'s (the same options, spelled less the prefix), --engine-config (YAML or
JSON) and --engine-arg KEY=VALUE (the argument wins over the file), their refusals naming
the option and the value, the engine argument names read from vLLM's source, and what
--vllm-defaults drops from a preset's spec."""

import argparse
import dataclasses
import importlib.util
import json
import subprocess
import sys

import pytest

from pytest_sdbench import cli, plugin
from pytest_sdbench.commands.terminal import EXIT_UNUSABLE
from pytest_sdbench.engine.engine_args import engine_argument_names
from pytest_sdbench.engine.presets import PRESETS
from pytest_sdbench.engine.spec import (
    DEFAULT_STALL_SECONDS,
    MODEL_ROOT_ENV,
    STALL_ENV,
    EngineSpec,
    engine_spec,
)
from pytest_sdbench.run.inputs import read_inputs
from pytest_sdbench.run.options import (
    CLI_PREFIX,
    OPTIONS,
    PYTEST_PREFIX,
    InputError,
    user_engine_args,
)


class _Recorder:
    """Stands in for pytest's parser and option group: keeps what the plugin registers."""

    def __init__(self):
        self.added: list[tuple[tuple[str, ...], dict]] = []

    def getgroup(self, *args, **kwargs):
        return self

    def addoption(self, *names, **kwargs):
        self.added.append((names, kwargs))


def _pytest_actions() -> dict[str, argparse.Action]:
    """The plugin's options as argparse reads them (pytest's addoption takes argparse's
    arguments), by spelling."""
    recorder = _Recorder()
    plugin.pytest_addoption(recorder)
    parser = argparse.ArgumentParser()
    return {names[0]: parser.add_argument(*names, **kwargs) for names, kwargs in recorder.added}


def _cli_actions() -> dict[str, argparse.Action]:
    collect = cli.subparsers(cli.build_parser())["collect"]
    return {a.option_strings[0]: a for a in collect._actions if a.option_strings != ["-h",
                                                                                      "--help"]}


COMPARED = ("default", "type", "choices", "nargs", "const", "metavar", "help", "required")


def test_the_cli_takes_exactly_the_pytest_options_less_the_prefix():
    """One option table, two renderings: every --sdbench-NAME is `sdbench collect --NAME`
    with the same default, type, choices, action and help, and the CLI has no other option
    (--out is an alias of --artifact-dir, not an option of its own)."""
    pytest_actions, cli_actions = _pytest_actions(), _cli_actions()
    assert all(name.startswith(PYTEST_PREFIX) for name in pytest_actions)
    # pytest's own: the test selection by the sdbench_engine marker (markers.py), and the
    # compare gate at session finish (compare_gate.py)
    selection = {PYTEST_PREFIX + o.name for o in OPTIONS if not o.commands}
    assert selection == {"--sdbench-skip", "--sdbench-only", "--sdbench-compare",
                         "--sdbench-compare-fail", "--sdbench-compare-fail-above"}
    spelled = {CLI_PREFIX + name.removeprefix(PYTEST_PREFIX): a
               for name, a in pytest_actions.items() if name not in selection}
    assert sorted(spelled) == sorted(cli_actions)
    for name, ours in spelled.items():
        theirs = cli_actions[name]
        assert ours.dest == f"sdbench_{theirs.dest}", name
        assert type(ours) is type(theirs), name
        assert {k: getattr(ours, k) for k in COMPARED} == \
            {k: getattr(theirs, k) for k in COMPARED}, name
    assert cli_actions["--artifact-dir"].option_strings == ["--artifact-dir", "--out"]
    assert [a.option_strings for a in cli_actions.values() if len(a.option_strings) > 1] == \
        [["--artifact-dir", "--out"]]


def test_pytest_registers_every_option_of_the_table(pytester):
    """The real pytest, not the recorder: `pytest --help` lists each spelling."""
    help_text = pytester.runpytest("--help").stdout.str()
    for name in _pytest_actions():
        assert f"  {name}" in help_text, name


def test_artifact_dir_and_plots_reach_sdbench_collect():
    args = vars(cli.build_parser().parse_args(["collect", "--artifact-dir", "a", "--plots"]))
    assert (args["artifact_dir"], args["plots"]) == ("a", True)
    assert vars(cli.build_parser().parse_args(["collect", "--out", "b"]))["artifact_dir"] == "b"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM's source")
def test_engine_argument_names_are_exactly_what_llm_takes():
    """Read from vLLM's source (no import), they equal what an import says: EngineArgs'
    dataclass fields and LLM.__init__'s own parameters."""
    code = ("import dataclasses, inspect, json; from vllm.engine.arg_utils import EngineArgs; "
            "from vllm import LLM; names = {f.name for f in dataclasses.fields(EngineArgs)}; "
            "params = inspect.signature(LLM.__init__).parameters.values(); "
            "names |= {p.name for p in params if p.kind not in (p.VAR_KEYWORD, "
            "p.VAR_POSITIONAL)} - {'self'}; print(json.dumps(sorted(names)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True)
    imported = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert engine_argument_names() == imported
    assert {"max_num_seqs", "kv_cache_memory_bytes", "speculative_config", "seed"} <= imported


def _collect_args(argv: list[str]) -> dict:
    """`sdbench collect ARGV` as parsed (nothing runs)."""
    return vars(cli.build_parser().parse_args(["collect", *argv]))


def _refused(capsys, argv: list[str]) -> str:
    """The one error line argparse prints when `sdbench collect ARGV` is refused (exit 2)."""
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["collect", *argv])
    assert excinfo.value.code == EXIT_UNUSABLE
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("name, text", [
    ("engine.yaml", "max-num-seqs: 4\nblock_size: 32\nenable_prefix_caching: true\n"),
    ("engine.json", '{"max-num-seqs": 4, "block_size": 32, "enable_prefix_caching": true}'),
])
def test_an_engine_config_file_is_read_as_yaml_or_json(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    args = _collect_args(["--engine-config", str(path)])
    assert user_engine_args(args) == {"max_num_seqs": 4, "block_size": 32,
                                      "enable_prefix_caching": True}


def test_an_engine_arg_wins_over_the_config_file(tmp_path):
    path = tmp_path / "engine.yaml"
    path.write_text("max_num_seqs: 4\nblock_size: 32\n")
    args = _collect_args(["--engine-arg", "max-num-seqs=8", "--engine-config", str(path),
                          "--engine-arg", "load_format=dummy",
                          "--engine-arg", 'compilation_config={"level": 0}'])
    assert user_engine_args(args) == {"max_num_seqs": 8, "block_size": 32,
                                      "load_format": "dummy",
                                      "compilation_config": {"level": 0}}


def test_no_engine_options_no_engine_args():
    assert user_engine_args(_collect_args([])) == {}


@pytest.mark.parametrize("text, why", [
    ("- max_num_seqs\n- 4\n", "expected a mapping of engine argument names to values"),
    ("4\n", "expected a mapping of engine argument names to values"),
    ("max_num_seqs: [4\n", "not valid YAML/JSON (while parsing a flow sequence in "),
])
def test_an_engine_config_that_is_not_a_mapping_is_refused(tmp_path, capsys, text, why):
    path = tmp_path / "engine.yaml"
    path.write_text(text)
    line = _refused(capsys, ["--engine-config", str(path)])
    assert line.startswith(f"sdbench collect: error: argument --engine-config: {path}: {why}")


def test_an_engine_config_that_cannot_be_read_is_refused(tmp_path, capsys):
    path = tmp_path / "absent.yaml"
    line = _refused(capsys, ["--engine-config", str(path)])
    assert line == (f"sdbench collect: error: argument --engine-config: {path}: cannot be "
                    "read (No such file or directory)")


@pytest.mark.parametrize("text", ["max_num_seqs", "=4", "max num seqs=4", "4x=1"])
def test_a_bad_engine_arg_is_refused(capsys, text):
    line = _refused(capsys, ["--engine-arg", text])
    assert line == ("sdbench collect: error: argument --engine-arg: expected KEY=VALUE with a "
                    f"vLLM engine argument name, got {text!r}")


def test_pytest_names_its_own_spelling_of_a_bad_engine_option(pytester, tmp_path):
    """Refused while pytest parses its options: a usage error (exit 4), no engine."""
    listed = tmp_path / "list.yaml"
    listed.write_text("- 4\n")
    cases = {f"--sdbench-engine-config={listed}":
             f"argument --sdbench-engine-config: {listed}: expected a mapping",
             "--sdbench-engine-arg=max_num_seqs":
             "argument --sdbench-engine-arg: expected KEY=VALUE with a vLLM engine argument "
             "name, got 'max_num_seqs'",
             "--sdbench-stall-seconds=soon":
             "argument --sdbench-stall-seconds: expected a number of seconds, got 'soon'",
             "--sdbench-compare-fail-above=lots":
             "argument --sdbench-compare-fail-above: expected a percentage like 50 or 50%, "
             "got 'lots'",
             "--sdbench-compare-fail-above=-5%":
             "argument --sdbench-compare-fail-above: must be a finite number >= 0, got '-5%'",
             "--sdbench-compare-fail-above=inf":
             "argument --sdbench-compare-fail-above: must be a finite number >= 0, got 'inf'"}
    for option, message in cases.items():
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", option)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, option
        assert any(message in line for line in result.errlines), (option, result.errlines)


# ---- --vllm-defaults --------------------------------------------------------------------

@pytest.fixture
def model_root(tmp_path, monkeypatch):
    """Presets written under the test's own folder."""
    monkeypatch.setenv(MODEL_ROOT_ENV, str(tmp_path / "models"))


def test_a_preset_runs_under_its_oracle_limits_and_eager(model_root):
    spec = engine_spec(preset="tiny")
    limits = dict(PRESETS["tiny"].engine_limits)
    assert {name: getattr(spec, name) for name in limits} == limits
    assert spec.enforce_eager is True
    assert spec.block_size is not None
    assert spec.oracle_limits


def test_vllm_defaults_drop_the_presets_caps_and_eager(model_root):
    """Each limit, the block size and eager are left to vLLM (the EngineSpec default: not
    passed); the dummy weights and the user's engine arguments stay."""
    spec = engine_spec(preset="tiny", vllm_defaults=True,
                       user_engine_args={"max_num_seqs": 2})
    unset = {f.name: f.default for f in dataclasses.fields(EngineSpec)}
    dropped = [*dict(PRESETS["tiny"].engine_limits), "block_size", "enforce_eager",
               "cudagraph_capture_sizes"]
    assert {name: getattr(spec, name) for name in dropped} == \
        {name: unset[name] for name in dropped}
    assert spec.enforce_eager is None
    assert not spec.oracle_limits
    assert spec.load_format == "dummy"
    assert spec.preset == "tiny"
    assert spec.user_engine_args == {"max_num_seqs": 2}


def test_the_engine_arguments_reach_the_spec_as_given(tmp_path, model_root):
    path = tmp_path / "engine.json"
    path.write_text(json.dumps({"max_num_seqs": 4}))
    args = _collect_args(["--engine-config", str(path), "--engine-arg", "block_size=32"])
    spec = engine_spec(preset="tiny", user_engine_args=user_engine_args(args))
    assert spec.user_engine_args == {"max_num_seqs": 4, "block_size": 32}


# ---- --stall-seconds ---------------------------------------------------------------------

def test_the_spec_carries_the_stall_bound(model_root, monkeypatch):
    """The option's value, else SDBENCH_STALL_SECONDS, else the default; the option wins."""
    monkeypatch.setenv(STALL_ENV, "7")
    def spec(args):
        return read_inputs(_collect_args(args), cli=True).engine.spec(3)
    assert spec(["--stall-seconds", "2.5"]).stall_seconds == 2.5
    assert spec([]).stall_seconds == 7.0
    monkeypatch.delenv(STALL_ENV)
    assert spec([]).stall_seconds == DEFAULT_STALL_SECONDS


@pytest.mark.parametrize("text, why", [("0", "must be > 0, got '0'"),
                                       ("-1", "must be > 0, got '-1'"),
                                       ("nan", "must be > 0, got 'nan'"),
                                       ("soon", "expected a number of seconds, got 'soon'")])
def test_a_bad_stall_bound_is_refused_naming_the_option(capsys, text, why):
    line = _refused(capsys, ["--stall-seconds", text])
    assert line == f"sdbench collect: error: argument --stall-seconds: {why}"


def test_a_bad_stall_variable_is_refused_before_an_engine_starts(monkeypatch):
    monkeypatch.setenv(STALL_ENV, "0")
    with pytest.raises(InputError, match=rf"^{STALL_ENV}: must be > 0, got '0'$"):
        read_inputs(_collect_args([]), cli=True)
    read_inputs(_collect_args(["--stall-seconds", "5"]), cli=True)   # the option stands


def test_every_help_string_formats_as_argparse_formats_it():
    """argparse expands a help string with %: a bare % (as in '2%') breaks --help."""
    from pytest_sdbench.run.options import OPTIONS
    for option in OPTIONS:
        option.help % {"default": option.default, "prog": "sdbench", "dest": option.dest}
