"""The GPU gate's defaults (oracle_tests/gate.py), without a GPU: on CUDA the oracle suite
turns on what its every test needs (synthetic acceptance, CUDA graphs) unless the user chose
otherwise, and a skip for a missing option is an error there; on CPU nothing changes."""

from types import SimpleNamespace

import pytest

from oracle_tests import gate
from pytest_sdbench.run.options import OPTIONS


def _config(**given) -> SimpleNamespace:
    option = {f"sdbench_{o.dest}": o.default for o in OPTIONS}
    return SimpleNamespace(option=SimpleNamespace(**{**option, **given}))


@pytest.fixture
def cuda(monkeypatch):
    monkeypatch.setattr(gate, "on_cuda", lambda: True)


@pytest.fixture
def cpu(monkeypatch):
    monkeypatch.setattr(gate, "on_cuda", lambda: False)


def test_on_cuda_the_gate_runs_synthetic_acceptance_and_graphs(cuda):
    config = _config()
    gate.apply_gate_defaults(config)
    assert (config.option.sdbench_acceptance_length, config.option.sdbench_cuda_graphs) == \
        (gate.GATE_ACCEPTANCE_LENGTH, True)


@pytest.mark.parametrize("given, expected", [
    ({"sdbench_acceptance_length": 3.5}, (3.5, True)),
    ({"sdbench_k": (1, 2)}, (2.0, True)),                       # within [1, K+1] for every K
    ({"sdbench_grid": "grid.json"}, (None, True)),              # the grid names its ALs
    ({"sdbench_engine_arg": [("enforce_eager", True)]}, (2.78, False)),   # the eager run
])
def test_the_users_choices_win_over_the_gates(cuda, given, expected):
    config = _config(**given)
    gate.apply_gate_defaults(config)
    assert (config.option.sdbench_acceptance_length, config.option.sdbench_cuda_graphs) == \
        expected


def test_a_cpu_build_of_torch_is_not_cuda_beside_a_gpu(monkeypatch):
    monkeypatch.setattr(gate, "visible_gpus", lambda: ["0"])
    assert gate.on_cuda() is False     # this environment's torch is the CPU build


def test_on_cpu_nothing_is_turned_on(cpu):
    config = _config()
    gate.apply_gate_defaults(config)
    assert (config.option.sdbench_acceptance_length, config.option.sdbench_cuda_graphs) == \
        (None, False)


def test_a_skip_for_a_missing_option_says_why_off_cuda_and_fails_on_cuda(cpu, monkeypatch):
    with pytest.raises(pytest.skip.Exception, match="needs it: --sdbench-acceptance-length"):
        gate.skip_for_option("acceptance-length", "needs it")
    monkeypatch.setattr(gate, "on_cuda", lambda: True)
    with pytest.raises(pytest.fail.Exception, match="a skip for a missing option is an error"):
        gate.skip_for_option("acceptance-length", "needs it")
