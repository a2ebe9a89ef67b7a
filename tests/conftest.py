import json
import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
# tests/consumer imports AISimulate, whose wheel adds a top-level package `collector`: it runs
# in an environment of its own (scripts/consumer-test.sh sets this variable), never here.
collect_ignore = [] if os.environ.get("SDBENCH_CONSUMER_TEST") == "1" else ["consumer"]


@pytest.fixture
def cpu_artifact_data():
    """A real artifact, written by a CPU collection of the tiny preset (vLLM 0.32)."""
    return json.loads((FIXTURES / "cpu-agg-v4.json").read_text())
