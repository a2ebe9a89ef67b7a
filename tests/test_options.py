"""The engine configuration options, without an engine: --engine-config (YAML or JSON) and
--engine-arg KEY=VALUE (the argument wins over the file), their refusals naming the option
and the value, and what --vllm-defaults drops from a preset's spec."""

import dataclasses
import json

import pytest

from pytest_sdbench import cli
from pytest_sdbench.engine import PRESETS, EngineSpec
from pytest_sdbench.options import user_engine_args
from pytest_sdbench.session import MODEL_ROOT_ENV, engine_spec


def _collect_args(argv: list[str]) -> dict:
    """`sdbench collect ARGV` as parsed (nothing runs)."""
    return vars(cli._parser().parse_args(["collect", *argv]))


def _refused(capsys, argv: list[str]) -> str:
    """The one error line argparse prints when `sdbench collect ARGV` is refused (exit 2)."""
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["collect", *argv])
    assert excinfo.value.code == cli.EXIT_UNUSABLE
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
             "name, got 'max_num_seqs'"}
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
