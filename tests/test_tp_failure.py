"""A failed tensor-parallel engine is shut down and never reused, as a single-rank one is
(launch.py's rule): the proxy follows what each rank's engine says after a command. The real
rank command loop (rank_server.serve) runs in threads over pipes, on stand-in engines; the
real TP=2 engine is in test_tp."""

import os
import subprocess
import sys
import threading
from multiprocessing import Pipe
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_sdbench.engine import launch, rank_processes
from pytest_sdbench.engine.launch import SdbenchEngine
from pytest_sdbench.engine.rank_processes import RankCommand
from pytest_sdbench.engine.spec import STALL_ENV, EngineSpec
from pytest_sdbench.engine.surface import EngineStalled, EngineUnusable
from pytest_sdbench.engine.tp import TensorParallelEngine
from pytest_sdbench.run import collect as session
from pytest_sdbench.run import rank_server

from .test_watchdog import _LLM, _Clock


class _RankEngine:
    """Stands in for a rank's SdbenchEngine: probe() and generate() serve, refuse (the
    engine stays usable), fail (the engine marks itself failed, as SdbenchEngine.generate
    does) or hang until `release` is set (a rank left waiting in a collective)."""

    def __init__(self, plan: dict, rank: int, release: threading.Event):
        self.plan, self.rank, self.release = plan, rank, release
        self.failure: str | None = None
        self.closed = False

    def probe(self):
        what = self.plan.get(self.rank, "serve")
        if what == "fail":
            self.failure = "RuntimeError: injected on the rank"
            raise RuntimeError("injected on the rank")
        if what == "refuse":
            raise ValueError("refused before anything ran")
        if what == "hang":
            self.release.wait()
        return SimpleNamespace(tokens=(1, 2, 3))

    def generate(self, prompts, sampling_params):
        return [self.probe()]

    def shutdown(self):
        self.closed = True


class _ThreadRank:
    """A rank 'process': rank_server.serve in a thread. Its pid is a sleeping child of
    ours, so that rank_processes.end_ranks finds no descendants of anything else to end;
    kill() releases a hanging rank engine, so that its thread ends."""

    def __init__(self, conn, rank: int, pid: int, release: threading.Event):
        self.pid, self.returncode, self.release = pid, None, release
        self.killed = False
        self.thread = threading.Thread(target=rank_server.serve, args=(conn, rank), daemon=True)
        self.thread.start()

    def poll(self):
        if self.thread.is_alive():
            return None
        self.returncode = 0
        return 0

    def wait(self, timeout=None):
        self.thread.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired("rank thread", timeout)
        return 0

    def kill(self):
        self.killed = True
        self.release.set()


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture
def start_ranks(tmp_path, monkeypatch, sleeper):
    """start(plan, **spec) -> a proxy over two thread ranks whose engines follow `plan` (a
    rank's entry may also be a function making its engine from the spec the rank got)."""
    engines: list = []
    release = threading.Event()

    def fake_start(spec, plan):
        rank = len(engines) % 2
        make = plan.get(rank)
        engine = make(spec) if callable(make) else _RankEngine(plan, rank, release)
        engines.append(engine)
        return engine, SimpleNamespace(
            rank=rank, pid=sleeper, device="cpu", gpu_indices=(), identity=None,
            kv_capacity=None, start_seconds=0.1, baseline=SimpleNamespace(tokens=(1, 2, 3)),
            vocab_size=100)

    def start(plan: dict, **fields) -> TensorParallelEngine:
        # built now: its default stall bound is SDBENCH_STALL_SECONDS as the test set it
        spec = EngineSpec(target="target", draft="draft", tensor_parallel_size=2, **fields)
        monkeypatch.setattr(rank_server, "_start", lambda spec: fake_start(spec, plan))
        procs, conns, logs, started = [], [], [], []
        log_dir = tmp_path / f"start{len(engines)}"
        log_dir.mkdir()
        for rank in range(2):
            mine, theirs = Pipe()
            conns.append(mine)
            logs.append(log_dir / f"rank{rank}.log")
            procs.append(_ThreadRank(theirs, rank, sleeper, release))
            # one rank at a time, so that rank r gets the r-th engine of this start
            started += RankCommand(procs[-1:], conns[-1:], logs[-1:], spec.stall_seconds).call(
                "start", spec=spec)
        return TensorParallelEngine(spec, procs, conns, logs, started)

    start.engines = engines  # type: ignore[attr-defined]
    yield start
    release.set()   # lets a hanging rank's thread end, if no kill() did


def test_a_rank_whose_engine_failed_fails_the_proxy_which_is_not_reused(start_ranks):
    proxy = start_ranks({1: "fail"})
    with pytest.raises(RuntimeError, match="injected on the rank"):
        proxy.probe()
    assert proxy.failure == "RuntimeError: injected on the rank"
    assert not proxy.usable
    assert proxy.closed
    assert all(not p.thread.is_alive() for p in proxy._procs)   # every rank was shut down
    assert [e.closed for e in start_ranks.engines] == [True, True]
    with pytest.raises(EngineUnusable, match=r"failed earlier \(RuntimeError: injected on "
                                             r"the rank\) and was shut down"):
        proxy.probe()


def test_a_refusal_on_every_rank_leaves_the_proxy_usable(start_ranks):
    proxy = start_ranks({0: "refuse", 1: "refuse"})
    with pytest.raises(ValueError, match="refused before anything ran"):
        proxy.probe()
    assert proxy.failure is None
    assert proxy.usable
    proxy.shutdown()
    assert not proxy.usable


def test_restart_puts_fresh_ranks_in_the_failed_proxys_place(start_ranks, monkeypatch):
    proxy = start_ranks({0: "fail"})
    with pytest.raises(RuntimeError):
        proxy.probe()
    old = proxy._procs
    fresh: list[TensorParallelEngine] = []

    def start(spec):
        fresh.append(start_ranks({}))
        return fresh[-1]
    monkeypatch.setattr(TensorParallelEngine, "start", staticmethod(start))
    proxy.restart()
    assert proxy.restarts == 1
    assert proxy.usable
    assert proxy.failure is None
    assert proxy._procs is not old
    assert proxy.probe().tokens == (1, 2, 3)
    # the ranks belong to the proxy the fixtures hold, not to the object start() made
    assert not fresh[0]._finalizer.alive
    assert proxy._finalizer.alive
    proxy.shutdown()
    assert all(not p.thread.is_alive() for p in proxy._procs)


def test_a_collection_that_fails_the_ranks_tells_notify_and_fails_the_proxy(start_ranks,
                                                                          monkeypatch):
    proxy = start_ranks({})

    def collect(engine, notify=None, progress=None, **kwargs):
        if notify is not None:   # rank 0 only
            notify("sdbench: injected: 1/2 points kept in the partial artifact x.partial.json")
        engine.failure = "RuntimeError: injected mid-collection"
        raise RuntimeError("injected mid-collection")
    monkeypatch.setattr(session, "collect_to_artifact", collect)
    lines: list[str] = []
    with pytest.raises(RuntimeError, match="injected mid-collection"):
        proxy.collect_to_artifact("decode", None, "out", notify=lines.append)
    assert lines == ["sdbench: injected: 1/2 points kept in the partial artifact "
                     "x.partial.json"]
    assert proxy.failure == "RuntimeError: injected mid-collection"
    assert proxy.closed


@pytest.fixture
def stalling(monkeypatch):
    """A short stall bound (the spec's default, read from SDBENCH_STALL_SECONDS; the ranks
    get it with the spec), on the ranks' watchdogs and the proxy's wait alike; a
    collection that serves one request; a short wait for rank threads that cannot be
    killed. Returns a function making a rank's real SdbenchEngine over an LLM whose steps
    never make progress (a second of a fake clock each): its StepWatchdog fails it with
    EngineStalled at the first step."""
    monkeypatch.setenv(STALL_ENV, "0.5")
    monkeypatch.setattr(rank_processes, "STOP_TIMEOUT_S", 0.5)
    # a stand-in's shutdown leaves this process's torch.distributed state alone: it is the
    # session's real engine's when the whole suite runs
    monkeypatch.setattr(launch.compat, "release_distributed", lambda: None)
    monkeypatch.setattr(session, "collect_to_artifact",
                        lambda engine, **kwargs: engine.generate([[5, 6]], None))
    clock = _Clock()
    monkeypatch.setattr(launch, "time", SimpleNamespace(monotonic=clock.monotonic))

    def make(spec) -> SdbenchEngine:   # the spec as the rank got it from the proxy
        return SdbenchEngine(spec=spec, llm=_LLM([([], 0, 1.0)] * 100, clock),  # type: ignore[arg-type]
                             device="cpu", identity=None, kv_capacity=None,  # type: ignore[arg-type]
                             start_seconds=0.0)
    return make


def test_the_ranks_get_the_stall_bound_with_the_spec(start_ranks, monkeypatch):
    """Not through the environment: each rank's engine holds a copy of the proxy's spec."""
    monkeypatch.delenv(STALL_ENV, raising=False)

    def make(spec):
        engine = _RankEngine({}, 0, threading.Event())
        engine.spec = spec  # type: ignore[attr-defined]
        return engine
    proxy = start_ranks({0: make, 1: make}, stall_seconds=0.75)
    ranks = [e.spec for e in start_ranks.engines]
    assert [s.stall_seconds for s in ranks] == [0.75, 0.75]
    assert all(s == proxy.spec and s is not proxy.spec for s in ranks)   # sent, not shared
    proxy.shutdown()


def test_a_rank_that_stalls_fails_the_proxy_with_engine_stalled(start_ranks, stalling,
                                                                 monkeypatch):
    proxy = start_ranks({0: stalling, 1: stalling})
    # Both ranks answer: the proxy's clock stands still, so the second answer is waited for
    # however late the host lets its thread run (the bound on late peers is the next test's).
    monkeypatch.setattr(rank_processes, "time", SimpleNamespace(monotonic=lambda: 0.0))
    with pytest.raises(EngineStalled, match=r"no progress for 1 s \(bound 0.5 s") as raised:
        proxy.collect_to_artifact("decode", None, "out")
    assert "raised on rank(s) [0, 1]; rank 0:" in raised.value.__notes__[0]
    assert (proxy.failure or "").startswith("EngineStalled: the engine's step loop made no ")
    assert proxy.closed
    assert [e.failure is not None and e.closed for e in start_ranks.engines] == [True, True]


def test_a_rank_that_stalls_while_its_peer_hangs_fails_the_proxy_within_the_bound(
        start_ranks, stalling):
    # rank 1's watchdog fires; rank 0 is left waiting where no watchdog runs (for rank 1 in
    # a collective): the proxy gives it the stall bound, ends it and raises rank 1's cause
    proxy = start_ranks({0: "hang", 1: stalling})
    with pytest.raises(EngineStalled, match=r"bound 0.5 s, SDBENCH_STALL_SECONDS") as raised:
        proxy.collect_to_artifact("decode", None, "out")
    assert proxy._procs[0].killed   # ended by the proxy, not released by the fixture
    assert ("raised on rank(s) [1]; rank(s) [0] gave no answer within the stall bound after it "
            "and were ended; rank 1:") in raised.value.__notes__[0]
    assert (proxy.failure or "").startswith("EngineStalled: ")
    assert not proxy.usable
    assert proxy.closed


def test_a_refusal_on_one_rank_while_its_peer_hangs_ends_the_ranks_and_fails_the_proxy(
        start_ranks, stalling):
    # rank 1 refused and its engine is usable, but rank 0 never answered: the ranks were
    # ended, so the proxy is not usable either
    proxy = start_ranks({0: "hang", 1: "refuse"})
    with pytest.raises(ValueError, match="refused before anything ran") as raised:
        proxy.probe()
    assert "rank(s) [0] gave no answer within the stall bound" in raised.value.__notes__[0]
    assert proxy.failure == "ValueError: refused before anything ran"
    assert proxy.closed


def test_stale_shared_memory_is_judged_by_the_entry_not_what_a_link_names(tmp_path):
    """/dev/shm is shared: a link planted there named like vLLM's segments, to a file of
    ours, is no segment of ours; it is neither listed nor followed."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm here")
    keep = tmp_path / "precious"
    keep.write_text("x")
    link = shm / f"sdbench-test-cpushm-{os.getpid()}"
    link.symlink_to(keep)
    try:
        assert link not in rank_processes.stale_cpu_shm()
        rank_processes.remove_stale_cpu_shm()
        assert link.is_symlink()
    finally:
        link.unlink()
    assert keep.read_text() == "x"
