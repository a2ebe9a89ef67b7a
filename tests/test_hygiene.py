"""Environment hygiene (issue 11): no usage report leaves the machine, the user's environment
is theirs again after the engine, presets live in a private per-user folder, and the CPU
wrapper runs commands where the user stands."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from pytest_sdbench.engine import compat
from pytest_sdbench.engine.spec import MODEL_ROOT_ENV, model_root

CHECKOUT = Path(__file__).resolve().parents[1]
WITH_CPU_ENV = CHECKOUT / "scripts" / "with-cpu-env"


def test_usage_stats_are_off_while_the_engine_runs_and_the_environment_comes_back(
        monkeypatch):
    monkeypatch.delenv("VLLM_NO_USAGE_STATS", raising=False)
    monkeypatch.delenv("DO_NOT_TRACK", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")   # runs stay offline; the others show the restore
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    before = dict(os.environ)
    saved = compat.prepare_environment()
    assert os.environ["VLLM_NO_USAGE_STATS"] == "1"
    assert os.environ["DO_NOT_TRACK"] == "1"
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    compat.restore_environment(saved)
    assert dict(os.environ) == before


def test_a_users_own_usage_choice_is_kept(monkeypatch):
    monkeypatch.setenv("VLLM_NO_USAGE_STATS", "0")
    monkeypatch.setenv("DO_NOT_TRACK", "0")
    saved = compat.prepare_environment()
    try:
        assert os.environ["VLLM_NO_USAGE_STATS"] == "0"
        assert os.environ["DO_NOT_TRACK"] == "0"
        assert "VLLM_NO_USAGE_STATS" not in saved
    finally:
        compat.restore_environment(saved)


def test_the_running_engine_reports_no_usage_and_records_what_it_changed(sdbench_engine):
    """The session's real engine: the variables are set while it runs, and what it changed
    is kept on it for its shutdown to restore. Every variable is checked: each default is
    set, to its value where the engine set it (saved_env), else to the user's own."""
    assert compat.DEFAULT_ENV
    assert compat.IN_PROCESS_ENV
    for key, value in compat.DEFAULT_ENV.items():
        assert key in os.environ, f"{key}: unset while the engine runs"
        if key in sdbench_engine.saved_env:      # it set this one; the user had not
            assert os.environ[key] == value, key
    for key, value in compat.IN_PROCESS_ENV.items():
        assert os.environ[key] == value, key
    assert set(sdbench_engine.saved_env) <= set(compat.DEFAULT_ENV) | set(compat.IN_PROCESS_ENV)


def test_presets_go_to_a_private_per_user_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(MODEL_ROOT_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = model_root()
    assert root == tmp_path / "cache" / "pytest-sdbench" / "models"
    assert stat.S_IMODE(root.parent.stat().st_mode) == 0o700
    root.parent.chmod(0o755)          # opened up by hand: made private again on the next use
    model_root()
    assert stat.S_IMODE(root.parent.stat().st_mode) == 0o700
    monkeypatch.setenv(MODEL_ROOT_ENV, str(tmp_path / "mine"))
    assert model_root() == tmp_path / "mine"


@pytest.mark.skipif(not WITH_CPU_ENV.exists(), reason="scripts/with-cpu-env is not in this "
                    "copy of the tests (the wheel step runs the tests without the checkout)")
@pytest.mark.skipif(not (CHECKOUT / ".venv" / ".sdbench-env").exists(),
                    reason="the checkout's CPU environment (.venv) is not built")
def test_the_cpu_wrapper_runs_where_the_user_stands(tmp_path):
    done = subprocess.run([str(WITH_CPU_ENV), "pwd"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=True)
    assert Path(done.stdout.strip()).resolve() == tmp_path.resolve()
