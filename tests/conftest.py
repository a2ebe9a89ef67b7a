import json
import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
# tests/consumer imports AISimulate, whose wheel adds a top-level package `collector`: it runs
# in an environment of its own (scripts/consumer-test.sh sets this variable), never here.
collect_ignore = [] if os.environ.get("SDBENCH_CONSUMER_TEST") == "1" else ["consumer"]


@pytest.fixture(scope="session", autouse=True)
def _artifacts_in_a_tmp_dir(pytestconfig, tmp_path_factory):
    """The project's own tests write their artifacts under pytest's tmp folder, never into
    the user's <rootdir>/sdbench-artifacts (unless --sdbench-artifact-dir names a folder)."""
    if not pytestconfig.getoption("sdbench_artifact_dir"):
        pytestconfig.option.sdbench_artifact_dir = str(tmp_path_factory.mktemp("artifacts"))


@pytest.fixture(scope="session")
def sdbench_collect(sdbench_collect, tmp_path_factory):
    """The package's own tests collect as machinery, not as profiles a user asked for: the
    plugin's fixture, quietly (SdbenchCollect.quietly: no line in the sdbench summary, no
    progress on the terminal, no artifact hook). The summary of `pytest` in this checkout
    then names the oracle's profile (oracle_tests, the plugin's fixture as it is), not the
    dozen collections the tests make on purpose, failed ones included; what the plugin's
    fixture says is tested as a downstream repository uses it (pytester: test_plugin,
    test_faults)."""
    return sdbench_collect.quietly(tmp_path_factory.mktemp("collections"))


@pytest.fixture
def cpu_artifact_data():
    """A real artifact (schema v7, 3 rounds, 8 prefill, 4 decode and 3 mixed points),
    written by a CPU collection of the tiny preset (vLLM 0.32)."""
    return json.loads((FIXTURES / "cpu-agg-v7.json").read_text())


@pytest.fixture(scope="session")
def real_checkpoints(tmp_path_factory):
    """A tiny Qwen3 target and its EAGLE3 draft (draft vocabulary 1024 of the target's
    4096, with its d2t/t2d mapping), random weights in safetensors, each in a Hugging Face
    cache-style snapshot folder (tests/checkpoints.py): (target, draft) Snapshots, written
    once a session (about 15 s, mostly importing transformers)."""
    from .checkpoints import write_pair
    return write_pair(tmp_path_factory.mktemp("hf-cache"))
