"""A failed tensor-parallel engine is shut down and never reused, as a single-rank one is
(launch.py's rule): the proxy follows what each rank's engine says after a command. The real
rank command loop (rank_server.serve) runs in threads over pipes, on stand-in engines; the
real TP=2 engine is in test_tp."""

import subprocess
import sys
import threading
from multiprocessing import Pipe
from types import SimpleNamespace

import pytest

from pytest_sdbench import session
from pytest_sdbench.engine import rank_server
from pytest_sdbench.engine.launch import EngineUnusable
from pytest_sdbench.engine.tp import TensorParallelEngine, _Pending

SPEC = SimpleNamespace(tensor_parallel_size=2)


class _RankEngine:
    """Stands in for a rank's SdbenchEngine: probe() serves, refuses (the engine stays
    usable) or fails (the engine marks itself failed, as SdbenchEngine.generate does)."""

    def __init__(self, plan: dict, rank: int):
        self.plan, self.rank = plan, rank
        self.failure: str | None = None
        self.closed = False

    def probe(self):
        what = self.plan.get(self.rank, "serve")
        if what == "fail":
            self.failure = "RuntimeError: injected on the rank"
            raise RuntimeError("injected on the rank")
        if what == "refuse":
            raise ValueError("refused before anything ran")
        return SimpleNamespace(tokens=(1, 2, 3))

    def shutdown(self):
        self.closed = True


class _ThreadRank:
    """A rank 'process': rank_server.serve in a thread. Its pid is a sleeping child of
    ours, so that tp._end finds no descendants of anything else to end."""

    def __init__(self, conn, rank: int, pid: int):
        self.pid, self.returncode = pid, None
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
        pass


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture
def start_ranks(tmp_path, monkeypatch, sleeper):
    """start(plan) -> a proxy over two thread ranks whose engines follow `plan`."""
    engines: list[_RankEngine] = []

    def fake_start(spec, plan):
        rank = len(engines) % 2
        engine = _RankEngine(plan, rank)
        engines.append(engine)
        return engine, SimpleNamespace(
            rank=rank, pid=sleeper, device="cpu", gpu_indices=(), identity=None,
            kv_capacity=None, start_seconds=0.1, baseline=SimpleNamespace(tokens=(1, 2, 3)),
            vocab_size=100)

    def start(plan: dict) -> TensorParallelEngine:
        monkeypatch.setattr(rank_server, "_start", lambda spec: fake_start(spec, plan))
        procs, conns, logs, started = [], [], [], []
        log_dir = tmp_path / f"start{len(engines)}"
        log_dir.mkdir()
        for rank in range(2):
            mine, theirs = Pipe()
            conns.append(mine)
            logs.append(log_dir / f"rank{rank}.log")
            procs.append(_ThreadRank(theirs, rank, sleeper))
            # one rank at a time, so that rank r gets the r-th engine of this start
            started += _Pending(procs[-1:], conns[-1:], logs[-1:]).call("start", spec=SPEC)
        return TensorParallelEngine(SPEC, procs, conns, logs, started)

    start.engines = engines  # type: ignore[attr-defined]
    return start


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
