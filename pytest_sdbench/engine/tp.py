"""A tensor-parallel engine: N rank processes, each running the engine in-process under
vLLM's external_launcher (its own engine core, scheduler, executor and driver worker), and
the proxy the pytest session and the CLI hold in their place.

The ranks are plain Python processes (``python -m pytest_sdbench.run.rank_server``) with
the environment torchrun would give them (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT,
OMP_NUM_THREADS=1): vLLM's external_launcher reads only these. The proxy sends every
command to every rank and waits for all of them: vLLM's engine is SPMD, so every
generate, probe and collection must run identically on all ranks (a command on one rank
only would wait forever in the first collective). Rank 0 reports progress and writes the
artifact. A command that fails a rank's engine (launch.py's rule, applied on each rank), a
rank that dies, ranks that give no answer within the stall bound after another rank failed,
or a wait interrupted here fails the proxy: it is shut down at once and not reused
(restart() starts fresh ranks in its place). A rank that dies ends the others; shutdown()
ends every rank process and what it started, and removes the CPU shared-memory segments
they leave behind.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection, Listener
from pathlib import Path

from ..wire.identity import ExecutionIdentity, KVCapacity
from ..wire.rounds import ONE_ROUND
from . import compat, rank_processes
from .rank_processes import RankCommand, RankFailed, end_ranks, log_tails, remove_stale_cpu_shm
from .spec import EngineSpec
from .surface import EngineSurface, ServingProbe

# Set in a rank process: where the proxy listens (host:port); its key in AUTHKEY_ENV.
RANK_SERVER_ENV, AUTHKEY_ENV = "SDBENCH_RANK_SERVER", "SDBENCH_RANK_AUTHKEY"
START_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class RankStarted:
    """What a rank reports once its engine has started."""
    rank: int
    pid: int
    device: str
    gpu_indices: tuple[int, ...]
    identity: ExecutionIdentity
    kv_capacity: KVCapacity
    start_seconds: float
    baseline: ServingProbe
    vocab_size: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


class TensorParallelEngine(EngineSurface):
    """The proxy of a started tensor-parallel engine: the facts rank 0 resolved, and
    commands that every rank runs. Same surface as SdbenchEngine, less `.llm` (the engine
    lives in the rank processes)."""

    def __init__(self, spec: EngineSpec, procs: list[subprocess.Popen],
                 conns: list[Connection], logs: list[Path], started: list[RankStarted]):
        self.spec = spec
        self._procs, self._conns, self._logs = procs, conns, logs
        self.ranks = started
        first = started[0]
        self.device: str = first.device
        self.identity: ExecutionIdentity = first.identity
        self.kv_capacity: KVCapacity = first.kv_capacity
        self.start_seconds = max(s.start_seconds for s in started)
        self.baseline = first.baseline
        self.vocab_size = first.vocab_size
        self.closed = False
        self.failure: str | None = None   # why the engine is unusable (it is then shut down)
        self.restarts = 0                 # fresh engines started in place of failed ones
        # Ends the ranks if this process exits without shutdown() (atexit runs it).
        self._finalizer = weakref.finalize(self, end_ranks, procs, logs, conns)

    # ---- start -------------------------------------------------------------------------
    @classmethod
    def start(cls, spec: EngineSpec) -> TensorParallelEngine:
        n = spec.tensor_parallel_size
        remove_stale_cpu_shm()
        authkey = secrets.token_bytes(16)
        listener = Listener(("127.0.0.1", 0), authkey=authkey)
        host, port = listener.address
        log_dir = Path(tempfile.mkdtemp(prefix="sdbench-tp-"))
        master_port = _free_port()
        procs, logs = [], []
        for rank in range(n):
            env = {**compat.TENSOR_PARALLEL_ENV, **os.environ,
                   "RANK": str(rank), "LOCAL_RANK": str(rank),
                   "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master_port),
                   RANK_SERVER_ENV: f"{host}:{port}", AUTHKEY_ENV: authkey.hex(),
                   "PYTHONPATH": os.pathsep.join(
                       [_package_root(), *filter(None, [os.environ.get("PYTHONPATH")])])}
            env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it for each rank
            log = log_dir / f"rank{rank}.log"
            logs.append(log)
            with open(log, "wb") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "pytest_sdbench.run.rank_server"], env=env,
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT))
        conns: list[Connection | None] = [None] * n
        try:
            cls._accept(listener, procs, conns, logs)
            started = RankCommand(procs, conns, logs, spec.stall_seconds).call(
                "start", timeout=START_TIMEOUT_S, spec=spec)
        except BaseException:
            end_ranks(procs, logs, conns)
            raise
        finally:
            listener.close()
        engine = cls(spec, procs, [c for c in conns if c is not None], logs, started)
        try:
            engine._check_same_tokens([s.baseline.tokens for s in started], "start-up probe")
        except BaseException:
            engine.shutdown()
            raise
        return engine

    @staticmethod
    def _accept(listener: Listener, procs, conns, logs) -> None:
        """Each rank connects first thing and says which rank it is; a rank that dies
        before it does fails the start, not a wait forever."""
        def accept_all():
            for _ in procs:
                try:
                    conn = listener.accept()
                except OSError:
                    return
                _kind, rank, _pid = conn.recv()
                conns[rank] = conn
        thread = threading.Thread(target=accept_all, daemon=True, name="sdbench-tp-accept")
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while thread.is_alive():
            thread.join(0.2)
            dead = [r for r, p in enumerate(procs) if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RankFailed(f"rank(s) {dead or 'all'} did not connect: "
                                 + log_tails(logs, dead or range(len(procs))))

    # ---- the engine's surface -----------------------------------------------------------
    @property
    def llm(self):
        raise AttributeError(f"a tensor-parallel engine (tensor_parallel_size="
                             f"{self.spec.tensor_parallel_size}) runs in its rank processes; "
                             "this process holds no vLLM LLM object")

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """The CUDA devices of every rank (none on CPU)."""
        return tuple(i for s in self.ranks for i in s.gpu_indices)

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(p.pid for p in self._procs)

    def restart(self) -> None:
        """Start fresh ranks of the same spec in this proxy's place (the fixtures that hold
        it see the new one); counts the restart."""
        self.shutdown()
        self.restarts += 1     # counted before the start: a start that fails counts too
        fresh = TensorParallelEngine.start(self.spec)
        fresh._finalizer.detach()   # the ranks are this object's now
        restarts = self.restarts
        vars(self).update(vars(fresh))
        self._finalizer = weakref.finalize(self, end_ranks, self._procs, self._logs, self._conns)
        self.restarts = restarts

    def _call(self, command: str, progress=None, notify=None, **kwargs):
        self.check_usable()
        pending = RankCommand(self._procs, self._conns, self._logs, self.spec.stall_seconds)
        try:
            return pending.call(command, progress=progress, notify=notify, **kwargs)
        except BaseException as exc:
            # every rank answered and every rank's engine is usable: a refusal, not a failure
            if not pending.answered or pending.engine_failed:
                self.fail(exc)
            raise

    def probe(self) -> ServingProbe:
        """Every rank serves the probe request; rank 0's probe, once all served the same."""
        probes = self._call("probe")
        self._check_same_tokens([p.tokens for p in probes], "probe")
        return probes[0]

    def rank_outputs(self, prompts: list[list[int]], max_tokens: int) -> list[list[tuple]]:
        """Every rank's greedy output tokens of the same prompts, by rank."""
        return self._call("generate", prompts=prompts, max_tokens=max_tokens)

    def rank_restoration_violations(self) -> list[str]:
        """testing.restoration_violations on every rank (each rank checks its own engine and
        the ranks compare their served tokens); rank 0 holds every rank's problems."""
        return self._call("restoration")[0]

    collects_on_ranks = True

    def collect_to_artifact(self, mode, grid, out_dir, worker=None, progress=None,
                            decode_tokens=None, repeats=ONE_ROUND, notify=None):
        """session.collect_to_artifact on every rank; rank 0 writes the artifact and returns
        the CollectionRun, and its notify lines (where a partial artifact is) come here."""
        return self._call("collect", progress=progress, notify=notify, mode=mode, grid=grid,
                          out_dir=str(out_dir), worker=worker, decode_tokens=decode_tokens,
                          repeats=repeats)[0]

    def _check_same_tokens(self, tokens: list, what: str) -> None:
        if any(t != tokens[0] for t in tokens[1:]):
            raise RankFailed(f"the ranks served different greedy outputs in the {what}: "
                             + "; ".join(f"rank {r}: {list(t)}" for r, t in enumerate(tokens)))

    def shutdown(self) -> None:
        """Every rank shuts its engine down and exits; whatever is left is killed. Idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            RankCommand(self._procs, self._conns, self._logs, self.spec.stall_seconds).call(
                "shutdown", timeout=rank_processes.STOP_TIMEOUT_S)
        except (RankFailed, OSError, EOFError):
            pass  # ended below either way
        finally:
            self._finalizer()
            if all(p.returncode == 0 for p in self._procs):
                shutil.rmtree(self._logs[0].parent, ignore_errors=True)

