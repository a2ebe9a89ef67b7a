"""The oracle suite runs on whatever device the engine runs on: the real vLLM CPU engine in
CI, the H200 for the GPU gate (`pytest --sdbench-mode=agg oracle_tests/`, which turns on
what the whole oracle needs there: gate.py)."""
import pytest

from .gate import apply_gate_defaults


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Before the plugin checks the options and builds the engine spec from them."""
    apply_gate_defaults(config)
