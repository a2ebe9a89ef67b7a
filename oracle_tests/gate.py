"""The GPU gate's defaults: `pytest --sdbench-mode=agg oracle_tests/` on a CUDA runner runs
every oracle test with no other option. The decode matrix needs synthetic acceptance (each
cell sets its own AL) and the graph axis CUDA graphs, so on CUDA the suite turns both on
unless the user chose otherwise; a test skipped there for a missing option is an error."""

from __future__ import annotations

import pytest

from pytest_sdbench.engine.host import visible_gpus
from pytest_sdbench.run.options import spelled, user_engine_args

# The session engine's acceptance length (the matrix cells set theirs per point).
GATE_ACCEPTANCE_LENGTH = 2.78


def on_cuda() -> bool:
    """A CUDA build of torch and a device NVML sees, found without initialising CUDA (the
    plugin assigns xdist workers their GPU after this runs)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.backends.cuda.is_built() and bool(visible_gpus())


def apply_gate_defaults(config: pytest.Config) -> None:
    """On CUDA: synthetic acceptance, unless given or a grid names its own; CUDA graphs,
    unless the user's engine arguments name enforce_eager (the eager run of the gate)."""
    if not on_cuda():
        return
    option = config.option
    if option.sdbench_acceptance_length is None and option.sdbench_grid is None:
        option.sdbench_acceptance_length = min(GATE_ACCEPTANCE_LENGTH,
                                               min(option.sdbench_k) + 1.0)
    chosen = user_engine_args({"engine_config": option.sdbench_engine_config,
                               "engine_arg": option.sdbench_engine_arg})
    if "enforce_eager" not in chosen:
        option.sdbench_cuda_graphs = True


def skip_for_option(name: str, why: str) -> None:
    """A test that cannot run without option --sdbench-NAME: skipped, saying so, off CUDA;
    an error on CUDA, where the gate's defaults must run the whole oracle."""
    message = f"{why}: {spelled(name, cli=False)}"
    if on_cuda():
        pytest.fail(f"{message} (on CUDA the gate runs every oracle test: a skip for a "
                    "missing option is an error)", pytrace=False)
    pytest.skip(message)
