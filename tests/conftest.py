import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def cpu_artifact_data():
    """A real artifact, written by a CPU collection of the tiny preset (vLLM 0.32)."""
    return json.loads((FIXTURES / "cpu-agg-v4.json").read_text())
