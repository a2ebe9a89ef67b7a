"""The suite's own tiers, in one pytest run (the README's `./scripts/with-cpu-env pytest`).

On a CPU host, the whole suite (no paths named: tox.ini's testpaths) runs in two
pytest-xdist workers (tox.ini: `-n auto --dist loadgroup`, scheduled here; the number comes from
pytest_xdist_auto_num_workers below). Named paths, a GPU host (the GPU gate: one engine, one
process, as docs/gpu.md runs it) or `-n 0` run in one process, as before.

Three rules keep every claim of the suite true when two workers share the host:

- one session engine: every test whose fixtures start the session's engine (the plugin's
  `sdbench_engine`, and everything built on it: sdbench_collect, the oracle's collection)
  is in one group that one worker runs (pytest_xdist_make_scheduler), so that the engine
  starts once, as in a one-process run; likewise the tests marked `xdist_group(NAME)`
  (a module fixture that starts an engine of its own, as test_served's server), so that
  their fixture runs once, not once a worker;
- what times the host runs alone: a test marked `exclusive` (the compare gates, whose
  verdicts are about host time) holds a run-wide lock that no other test of the run holds
  beside it (each test's whole protocol, fixtures included, takes the lock shared); the
  lock prefers the exclusive side, so that a waiting exclusive test is not starved;
- the long tests first: the exclusive tests, then the `slow` ones (extra processes with
  engines of their own), then the rest, so that no long test is the last one a worker gets.

Two settings keep it short, made by the controller where the user has not (pytest_configure):
each worker computes on one OpenMP thread (OMP_NUM_THREADS=1), and pytester's runs, each in
a HOME of its own, share the user's vLLM cache (VLLM_CACHE_ROOT).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import uuid
from pathlib import Path

import pytest

# pytester drives the plugin the way a downstream repository uses it (tests/test_plugin.py).
pytest_plugins = ("pytester",)

WORKERS = 2
SESSION_ENGINE_GROUP = "session-engine"
ENGINE_FIXTURE = "sdbench_engine"


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (tox.ini): two workers for the whole suite on a CPU host; one process (0)
    when paths are named, or on a host with a visible GPU (one engine a GPU: the gate runs
    as it always has)."""
    if config.args_source != pytest.Config.ArgsSource.TESTPATHS:
        return 0
    from pytest_sdbench.engine.host import visible_gpus
    if visible_gpus() or (os.cpu_count() or 1) < WORKERS:
        return 0
    return WORKERS


def pytest_configure(config):
    config.addinivalue_line("markers", "exclusive: runs with no other test of this run beside "
                                       "it (its claim is about the host's time)")
    if not hasattr(config, "workerinput") and (config.getoption("numprocesses", 0) or 0) > 1:
        # Each worker's engines (its session engine, its tests' subprocesses) compute on one
        # thread: torch's default, a thread a core, puts two engines' four threads on 2
        # cores, spinning against each other at OpenMP's barriers (seen: the session engine's
        # collections 5-15x as long beside the other worker's engines). Set here, in the
        # controller, so that each worker starts with it: OpenMP reads it once, when torch
        # is first imported, and a worker's conftests may import torch before this file's
        # pytest_configure runs there (oracle_tests/gate.py's, tryfirst).
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not hasattr(config, "workerinput"):
        # One vLLM cache for the run, where vLLM keeps it for this user: pytester gives each
        # run a HOME of its own, where vLLM's cache (VLLM_CACHE_ROOT, under ~/.cache) starts
        # empty and the first engine inspects its model classes in a subprocess of their
        # own (seen: `sdbench collect` 39 s in a new HOME, 22 s in the same HOME again). A
        # user's runs share one HOME; the suite's pytester runs now share its cache too.
        # (vLLM's own default, without importing vLLM in the controller)
        from pytest_sdbench.engine.spec import user_cache_root
        os.environ.setdefault("VLLM_CACHE_ROOT", str(user_cache_root() / "vllm"))
    if (not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no"
            and config.getoption("testrunuid", None) is None):
        # the controller names the run, so that its scheduler and its workers share a folder
        config.option.testrunuid = uuid.uuid4().hex


def _run_folder(testrunuid: str) -> Path:
    return Path(tempfile.gettempdir()) / f"sdbench-suite-{testrunuid}"


def _rank(item) -> int:
    if item.get_closest_marker("exclusive"):
        return 0
    if item.get_closest_marker("slow"):
        return 1
    return 2


def _group(item) -> str | None:
    """The group a worker runs whole: the session engine's (it wins: its tests must be
    where that engine is), or the test's xdist_group mark's name; None: any worker."""
    if ENGINE_FIXTURE in getattr(item, "fixturenames", ()):
        return SESSION_ENGINE_GROUP
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return str(mark.args[0] if mark.args else mark.kwargs["name"])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The long tests first (a stable sort: the order within each rank is pytest's); on an
    xdist worker, the session engine's tests written down as one group for the scheduler."""
    items.sort(key=_rank)
    worker = getattr(config, "workerinput", None)
    if worker is None:
        return
    groups = {item.nodeid: group for item in items if (group := _group(item)) is not None}
    folder = _run_folder(worker["testrunuid"])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"groups-{worker['workerid']}.json"
    path.with_suffix(".tmp").write_text(json.dumps(groups))
    path.with_suffix(".tmp").replace(path)


def pytest_xdist_make_scheduler(config, log):
    """xdist's own loadgroup (xdist_group marks) no longer groups under pytest 9.2 (it
    renames item._nodeid, which pytest's nodeid no longer reads): the same scheduling, with
    the groups the workers wrote down at collection."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    folder = _run_folder(config.getoption("testrunuid"))

    class EngineGroupScheduling(LoadScopeScheduling):
        """LoadScopeScheduling whose scope is a test's group, or the test itself: the
        groups (largest first) and then the tests in the collection's order."""
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                self._groups = {}
                for path in sorted(folder.glob("groups-*.json")):
                    self._groups.update(json.loads(path.read_text()))
            return self._groups.get(nodeid, nodeid)

    return EngineGroupScheduling(config, log)


class SuiteLock:
    """A run-wide reader-writer lock over flock(2), preferring writers: a shared holder
    passes a turnstile that an exclusive one holds while it waits and runs. An exclusive
    holder whose next test is exclusive too keeps it (keep=True), so that a worker's
    exclusive tests run back to back, not each after another worker's long test."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self._turnstile = open(folder / "turnstile", "a+")   # noqa: SIM115 (held for the run)
        self._resource = open(folder / "resource", "a+")     # noqa: SIM115
        self._holding = False   # exclusive, kept from the previous test

    def acquire(self, exclusive: bool) -> None:
        if self._holding:
            return
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._resource, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        self._holding = exclusive

    def release(self, keep: bool = False) -> None:
        if keep and self._holding:
            return
        fcntl.flock(self._resource, fcntl.LOCK_UN)
        if self._holding:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        self._holding = False


_LOCK = pytest.StashKey[SuiteLock]()


def _exclusive(item) -> bool:
    return item is not None and item.get_closest_marker("exclusive") is not None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist workers, each test's setup, call and teardown hold the run's lock: shared,
    or alone for an `exclusive` test (kept into the next test when that is exclusive too)."""
    config = item.config
    worker = getattr(config, "workerinput", None)
    if worker is None:
        yield
        return
    if _LOCK not in config.stash:
        config.stash[_LOCK] = SuiteLock(_run_folder(worker["testrunuid"]))
    lock = config.stash[_LOCK]
    lock.acquire(_exclusive(item))
    try:
        yield
    finally:
        lock.release(keep=_exclusive(item) and _exclusive(nextitem))
