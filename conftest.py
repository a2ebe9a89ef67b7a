"""The suite's own tiers, in one pytest run (the README's `./scripts/with-cpu-env pytest`).

On a CPU host, the whole suite (no paths named: tox.ini's testpaths) runs in two
pytest-xdist workers (tox.ini: `-n auto --dist loadgroup`; the number comes from
pytest_xdist_auto_num_workers below). Named paths, a GPU host (the GPU gate: one engine, one
process, as docs/gpu.md runs it) or `-n 0` run in one process, as before.

Three rules keep every claim of the suite true when two workers share the host:

- one session engine: every test whose fixtures start the session's engine (the plugin's
  `sdbench_engine`, and everything built on it: sdbench_collect, the oracle's collection)
  is in one xdist group, so that one worker starts it once, as a one-process run does;
- what times the host runs alone: a test marked `exclusive` (the compare gates, whose
  verdicts are about host time) holds a run-wide lock that no other test of the run holds
  beside it (each test's whole protocol, fixtures included, takes the lock shared); the
  lock prefers the exclusive side, so that a waiting exclusive test is not starved;
- the long tests first: the exclusive tests, then the `slow` ones (extra processes with
  engines of their own), then the rest, so that no long test is the last one a worker gets.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import contextmanager
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
    from pytest_sdbench.host import visible_gpus
    if visible_gpus() or (os.cpu_count() or 1) < WORKERS:
        return 0
    return WORKERS


def pytest_configure(config):
    config.addinivalue_line("markers", "exclusive: runs with no other test of this run beside "
                                       "it (its claim is about the host's time)")


def _rank(item) -> int:
    if item.get_closest_marker("exclusive"):
        return 0
    if item.get_closest_marker("slow"):
        return 1
    return 2


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The session engine's tests in one xdist group; the long tests first (a stable sort:
    the order within each rank is pytest's)."""
    items.sort(key=_rank)
    if not getattr(config.option, "loadgroup", False):   # set on an xdist worker of loadgroup
        return
    for item in items:
        if ENGINE_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(SESSION_ENGINE_GROUP))


class SuiteLock:
    """A run-wide reader-writer lock over flock(2), preferring writers: a shared holder
    passes a turnstile that an exclusive one holds while it waits and runs."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self._turnstile = open(folder / "turnstile", "a+")   # noqa: SIM115 (held for the run)
        self._resource = open(folder / "resource", "a+")     # noqa: SIM115

    @contextmanager
    def held(self, exclusive: bool):
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._resource, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self._resource, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(self._turnstile, fcntl.LOCK_UN)


_LOCK = pytest.StashKey[SuiteLock]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist workers, each test's setup, call and teardown hold the run's lock: shared,
    or alone for an `exclusive` test."""
    config = item.config
    worker = getattr(config, "workerinput", None)
    if worker is None:
        yield
        return
    if _LOCK not in config.stash:
        config.stash[_LOCK] = SuiteLock(Path(tempfile.gettempdir()) /
                                        f"sdbench-suite-{worker['testrunuid']}")
    with config.stash[_LOCK].held(item.get_closest_marker("exclusive") is not None):
        yield
