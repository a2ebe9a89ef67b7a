"""Contention: a GPU per pytest-xdist worker, other sdbench engines found through the lock-file
registry (and a dead engine's leftovers removed), other processes' CPU use measured over a
collection. The -n 2 run on real CPU engines is in test_plugin (the xdist test)."""

import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_sdbench.cli import main
from pytest_sdbench.engine import host
from pytest_sdbench.engine.spec import MODEL_ROOT_ENV
from pytest_sdbench.wire.contract import CONTENTION_OTHER_CORES
from pytest_sdbench.wire.files import ForeignFolder


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """A registry folder of this test's own: it counts only the engines it starts."""
    monkeypatch.setenv(host.REGISTRY_ENV, str(tmp_path / "registry"))
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
    code = ("import sys, time; from pytest_sdbench.engine.host import EngineRegistration; "
            "r = EngineRegistration(); r.record(dist_file=sys.argv[1] or None); "
            "print('ready', flush=True); time.sleep(600)")
    env = {**os.environ, host.REGISTRY_ENV: str(registry)}
    proc = subprocess.Popen([sys.executable, "-c", code, dist_file or ""], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()   # '' once it exits: then its stderr says why
    if line.strip() != "ready":
        proc.kill()
        pytest.fail(f"the registration holder did not say 'ready' (it said {line!r}): "
                    f"{proc.communicate()[1][-2000:]}")
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


def _burner(cpu_seconds: float) -> subprocess.Popen:
    """A process that burns `cpu_seconds` of CPU time (its own clock, not the wall's: the
    same work however loaded the host is), says 'burned', then waits for its stdin to close."""
    code = (f"import sys, time\nwhile time.process_time() < {cpu_seconds}: pass\n"
            "print('burned', flush=True)\nsys.stdin.read()")
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def _burned(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline()
    assert line.strip() == "burned", f"the burner exited without burning its CPU ({line!r})"


def test_monitor_measures_other_processes_cpu(registry):
    # The monitor brackets the burner's whole CPU second and a half: whatever else loads
    # the host only adds to what it sees.
    with host.HostMonitor() as monitor:
        burn = _burner(1.5)
        try:
            _burned(burn)
        finally:
            burn.communicate("")
    env = monitor.environment()
    assert env.other_cpu_cores > CONTENTION_OTHER_CORES, env
    assert env.contended
    assert "other processes used" in env.reason


def test_own_seconds_hold_the_cpu_time_of_the_engines_own_processes():
    """A tensor-parallel engine's other ranks are its own (own_pids): their CPU time, read
    from /proc/<pid>/stat, is subtracted from the host's with this process's."""
    burn = _burner(1.0)
    try:
        _burned(burn)
        theirs = host._own_seconds((burn.pid,)) - host._own_seconds()
    finally:
        burn.communicate("")
    assert theirs >= 1.0 - 0.05, theirs   # /proc/<pid>/stat counts in clock ticks


def test_other_processes_cpu_is_the_hosts_less_the_engines_own(monkeypatch):
    """The monitor's arithmetic, on counters it is handed: host busy time less the own
    processes' (this one and own_pids), over the wall time."""
    clock = {"wall": 100.0, "busy": 5000.0, "own": 30.0}
    monkeypatch.setattr(host, "time", SimpleNamespace(monotonic=lambda: clock["wall"]))
    monkeypatch.setattr(host, "_busy_seconds", lambda: clock["busy"])
    seen: list[tuple[int, ...]] = []
    monkeypatch.setattr(host, "_own_seconds",
                        lambda pids=(): seen.append(pids) or clock["own"])
    monkeypatch.setattr(host, "other_engines", lambda: 0)
    with host.HostMonitor(own_pids=(4242,)) as monitor:
        clock.update(wall=104.0, busy=5007.0, own=36.0)   # 7 s busy, 6 of them the engine's
    env = monitor.environment()
    assert env.other_cpu_cores == 0.25            # (7 - 6) / 4
    assert not env.contended
    assert set(seen) == {(4242,)}
    clock.update(busy=5011.0)                     # 4 more seconds of someone else's
    assert monitor.environment().other_cpu_cores == 1.25


# ---- the registry folder is this user's own, and what is in it is not trusted (issue 26) --

def _outside(tmp_path) -> Path:
    keep = tmp_path / "outside" / "precious"
    keep.parent.mkdir()
    keep.write_text("precious")
    return keep


def _planted(folder: Path, keep: Path, temp: Path) -> dict[str, Path]:
    """What another user could leave in a registry folder open to them: this process's
    entry name and another's as links to a file outside, a dead entry whose dist_file is that
    file, and one whose dist_file is a vllm_dist_* link in the temp folder to it."""
    link = temp / "vllm_dist_planted"
    link.symlink_to(keep)
    (folder / f"{os.getpid()}.lock").symlink_to(keep)
    (folder / "999999998.lock").symlink_to(keep)
    (folder / "999999997.lock").write_text(json.dumps({"pid": 999999997,
                                                       "dist_file": str(keep)}))
    (folder / "999999996.lock").write_text(json.dumps({"pid": 999999996,
                                                       "dist_file": str(link)}))
    return {"link": link}


@pytest.fixture
def temp(tmp_path, monkeypatch):
    """A temp folder of the test's own, where the registry looks for vllm_dist_* files."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_a_registry_folder_of_another_user_is_refused_and_nothing_in_it_is_touched(
        tmp_path, monkeypatch, temp, capsys):
    """Another user made sdbench-engines-<uid> first, open to all, and planted entries: the
    run is refused before an engine starts, naming the folder and what to set; nothing in
    it, or outside it, is changed. (Another user: this process claims a uid it does not
    have, so that the folder it made is someone else's to the real check.)"""
    monkeypatch.delenv(host.REGISTRY_ENV, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv(MODEL_ROOT_ENV, str(tmp_path / "models"))
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "ERROR")   # as `sdbench collect` sets it
    real, claimed = os.getuid(), os.getuid() + 1
    folder = tmp_path / "run" / f"sdbench-engines-{claimed}"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    keep = _outside(tmp_path)
    _planted(folder, keep, temp)
    before = sorted(os.listdir(folder))
    monkeypatch.setattr(os, "getuid", lambda: claimed)
    refusal = (f"{folder}: belongs to another user (uid {real}); set SDBENCH_REGISTRY_DIR to "
               "a folder of your own")
    with pytest.raises(ForeignFolder) as raised:
        host.EngineRegistration()
    assert str(raised.value) == refusal
    with pytest.raises(ForeignFolder):
        host.other_engines()
    code = main(["collect", "--mode", "decode", "--out", str(tmp_path / "out")])
    assert code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"sdbench collect: {refusal}"
    monkeypatch.undo()
    assert sorted(os.listdir(folder)) == before
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777
    assert keep.read_text() == "precious"
    assert (temp / "vllm_dist_planted").is_symlink()
    assert not (tmp_path / "out").exists()


def test_an_engine_test_is_refused_in_one_line_when_the_registry_is_another_users(
        pytester, tmp_path, monkeypatch):
    """The plugin, in a pytest process of its own whose conftest claims another uid: the
    engine test fails before an engine starts, naming the folder; the plain test runs."""
    monkeypatch.setenv(host.REGISTRY_ENV, str(tmp_path / "theirs"))
    monkeypatch.setenv(MODEL_ROOT_ENV, str(tmp_path / "models"))
    (tmp_path / "theirs").mkdir()
    real, claimed = os.getuid(), os.getuid() + 1
    pytester.makeconftest(f"import os\nos.getuid = lambda: {claimed}\n")
    pytester.makepyfile("def test_plain(): pass\n"
                        "def test_engine(sdbench_engine): raise AssertionError('started')\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rE")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([f"*sdbench: {tmp_path / 'theirs'}: belongs to another user "
                                 f"(uid {real}); set SDBENCH_REGISTRY_DIR to a folder of "
                                 "your own"])
    assert "started" not in result.stdout.str()
    assert os.listdir(tmp_path / "theirs") == []


def test_a_registry_folder_of_this_user_open_to_others_is_made_private_and_its_plants_ignored(
        tmp_path, monkeypatch, temp):
    """This user's folder, but open to all (0777), with entries another user could have
    planted: it is made 0700; this process's entry replaces the link at its name (the file
    outside is not written), the other links are removed unfollowed, the dead entries are
    removed and count for nothing, and neither the file outside nor the vllm_dist_* link to
    it is removed."""
    folder = tmp_path / "registry"
    folder.mkdir()
    folder.chmod(0o777)
    monkeypatch.setenv(host.REGISTRY_ENV, str(folder))
    keep = _outside(tmp_path)
    planted = _planted(folder, keep, temp)
    mine = host.EngineRegistration()
    try:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_ISREG(mine.path.lstat().st_mode)
        assert json.loads(mine.path.read_text())["pid"] == os.getpid()
        assert host.other_engines() == 0
        assert sorted(os.listdir(folder)) == [mine.path.name]
    finally:
        mine.close()
    assert keep.read_text() == "precious"
    assert planted["link"].is_symlink()
    assert os.listdir(folder) == []


def test_a_dead_entrys_dist_file_is_removed_only_when_it_is_this_users_vllm_dist_file(
        registry, temp, tmp_path):
    own = temp / "vllm_dist_0123abcd"
    own.write_text("")
    elsewhere = tmp_path / "vllm_dist_elsewhere"
    elsewhere.write_text("")
    misnamed = temp / "precious"
    misnamed.write_text("")
    odd = temp / "vllm_dist_fifo"
    os.mkfifo(odd)
    entries = {111111111: own, 111111112: elsewhere, 111111113: misnamed, 111111114: odd}
    for pid, dist_file in entries.items():
        (registry / f"{pid}.lock").write_text(json.dumps({"pid": pid, "dist_file": str(dist_file)}))
    # an entry that names another pid than its file's: not this entry's to clean up
    other = temp / "vllm_dist_of_another_entry"
    other.write_text("")
    (registry / "111111115.lock").write_text(json.dumps({"pid": 1, "dist_file": str(other)}))
    (registry / "111111116.lock").write_bytes(b"\xff not json")
    (registry / "111111117.lock").write_text("[" * 4000)
    assert host.other_engines() == 0
    assert os.listdir(registry) == []
    assert not own.exists()
    assert [p.name for p in (elsewhere, misnamed, odd, other) if not os.path.lexists(p)] == []
