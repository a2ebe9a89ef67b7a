"""Contention: a GPU per pytest-xdist worker, other sdbench engines found through the lock-file
registry (and a dead engine's leftovers removed), other processes' CPU use measured over a
collection. The -n 2 run on real CPU engines is in test_plugin (the xdist test)."""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pytest_sdbench import host
from pytest_sdbench.wire.contract import CONTENTION_OTHER_CORES


@pytest.fixture
def registry(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return host.registry_dir()


def test_each_worker_gets_a_gpu_of_its_own():
    visible = ["0", "1", "2", "3"]
    assert [host.gpu_for_worker(i, 4, visible) for i in range(4)] == visible
    assert host.gpu_for_worker(1, 2, ["GPU-aaa", "GPU-bbb"]) == "GPU-bbb"
    with pytest.raises(ValueError, match=r"runs 3 workers, one sdbench engine each, but 2 CUDA "
                                         r"device\(s\) are visible \(0,1\); run with -n 2"):
        host.gpu_for_worker(0, 3, ["0", "1"])


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 5")
    assert host.visible_gpus() == ["2", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert host.visible_gpus() == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert host.visible_gpus() == []


def test_too_many_xdist_workers_for_the_gpus_start_no_engine(pytester, monkeypatch):
    """Each engine test fails at once, naming the counts; a test without sdbench runs (the
    plugin is installed in repositories that never ask for an engine)."""
    pytest.importorskip("xdist")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")   # as on a one-GPU host
    pytester.makepyfile("def test_plain(): pass\n"
                        "def test_engine(sdbench_engine): raise AssertionError('started')\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "-rE",
                                           "--dist", "each")
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(["sdbench: pytest-xdist runs 2 workers, one sdbench engine "
                                 "each, but 1 CUDA device(s) are visible (0); run with -n 1*"])
    assert "started" not in result.stdout.str()


def test_an_unwritable_default_artifact_folder_refuses_only_engine_tests(pytester):
    pytester.makepyfile("def test_plain(): pass\n"
                        "def test_engine(sdbench_engine): raise AssertionError('started')\n")
    (pytester.path / "sdbench-artifacts").write_text("a file where the folder would go")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rE")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["sdbench: artifacts cannot be written: */sdbench-artifacts "
                                 "is not a directory; pass --sdbench-artifact-dir"])


def _holder(registry: Path, dist_file: str | None = None) -> subprocess.Popen:
    """Another process holding an engine registration (as a live engine does)."""
    code = ("import sys, time; from pytest_sdbench.host import EngineRegistration; "
            "r = EngineRegistration(); r.record(dist_file=sys.argv[1] or None); "
            "print('ready', flush=True); time.sleep(600)")
    env = {**os.environ, "XDG_RUNTIME_DIR": str(registry.parent)}
    proc = subprocess.Popen([sys.executable, "-c", code, dist_file or ""], env=env,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_other_engines_are_counted_while_alive_and_cleaned_up_once_dead(registry):
    dist_file = Path(tempfile.gettempdir()) / f"vllm_dist_sdbench_test_{os.getpid()}"
    dist_file.write_text("")
    proc = _holder(registry, str(dist_file))
    try:
        assert host.other_engines() == 1
        (entry,) = registry.glob("*.lock")
        assert json.loads(entry.read_text()) == {"pid": proc.pid, "dist_file": str(dist_file)}
    finally:
        proc.kill()   # as a crash would: no shutdown, the FileStore file left behind
        proc.wait()
    assert dist_file.exists()
    assert host.other_engines() == 0
    assert list(registry.glob("*.lock")) == []
    assert not dist_file.exists()


def test_a_stale_entry_never_removes_files_outside_vllm_dist(registry, tmp_path):
    keep = tmp_path / "precious"
    keep.write_text("x")
    proc = _holder(registry, str(keep))
    proc.kill()
    proc.wait()
    assert host.other_engines() == 0
    assert keep.exists()


def test_own_registration_is_not_another_engine(registry):
    mine = host.EngineRegistration()
    try:
        assert host.other_engines() == 0
    finally:
        mine.close()
    assert not mine.path.exists()


def test_monitor_records_another_engine_seen_mid_collection(registry):
    with host.HostMonitor() as monitor:
        proc = _holder(registry)
        try:
            monitor.sample()          # the collector's checkpoint after a point
        finally:
            proc.kill()
            proc.wait()
    env = monitor.environment()       # gone by the end; seen before it
    assert env.other_sdbench_engines == 1
    assert env.contended
    assert "1 other sdbench engine(s) alive on this host" in env.reason


def test_monitor_measures_other_processes_cpu(registry):
    burn = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\n"
                             "while time.time() - t < 3: pass"])
    try:
        with host.HostMonitor() as monitor:
            time.sleep(2.0)
    finally:
        burn.wait()
    env = monitor.environment()
    assert env.other_cpu_cores > CONTENTION_OTHER_CORES
    assert env.contended
    assert "other processes used" in env.reason
