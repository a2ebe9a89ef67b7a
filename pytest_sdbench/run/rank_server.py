"""One rank of a tensor-parallel engine: ``python -m pytest_sdbench.run.rank_server``, started
by engine/tp.py with torchrun's environment. It connects to the proxy, starts its engine
in-process (vLLM external_launcher), then runs the proxy's commands, each by its name in
COMMANDS, until told to shut down. Every rank runs every command, in the same order (vLLM's
engine is SPMD). It sits above the session (a rank runs the collection itself), so that
engine/ imports nothing above it."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import traceback
from collections.abc import Callable
from multiprocessing.connection import Client
from typing import Any

from ..engine import compat, ranks
from ..engine.launch import start_local_engine
from ..engine.restoration import restoration_violations
from ..engine.tp import AUTHKEY_ENV, RANK_SERVER_ENV, RankStarted
from ..measure.runs import sampling_params
from . import collect as session

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Linux: SIGTERM this rank when the process that started it dies, so that a killed
    pytest leaves no rank waiting in a collective."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _start(spec) -> tuple[Any, RankStarted]:
    engine = start_local_engine(spec)
    return engine, RankStarted(
        rank=ranks.rank(), pid=os.getpid(), device=engine.device,
        gpu_indices=engine.gpu_indices, identity=engine.identity,
        kv_capacity=engine.kv_capacity, start_seconds=engine.start_seconds,
        baseline=engine.probe() if engine.baseline is None else engine.baseline,
        vocab_size=int(compat.vllm_config(engine.llm).model_config.get_vocab_size()))


class Rank:
    """This rank: its connection to the proxy, its number and its engine (once started)."""

    def __init__(self, conn, rank: int):
        self.conn, self.rank = conn, rank
        self.engine: Any = None

    def engine_failed(self) -> bool:
        """The command failed this rank's engine (launch.SdbenchEngine's rule): the proxy
        then fails too."""
        return self.engine is not None and self.engine.failure is not None


# ---- the commands, by name -------------------------------------------------------------------

def _cmd_start(me: Rank, spec) -> RankStarted:
    me.engine, started = _start(spec)
    return started


def _cmd_probe(me: Rank):
    return me.engine.probe()


def _cmd_generate(me: Rank, prompts, max_tokens):
    return [tuple(o.outputs[0].token_ids)
            for o in me.engine.generate(prompts, sampling_params(max_tokens))]


def _cmd_restoration(me: Rank) -> list[str]:
    return restoration_violations(me.engine)


def _cmd_collect(me: Rank, **kwargs):
    lead = me.rank == 0

    def report(done, total, label):
        me.conn.send(("progress", (done, total, label)))

    def notify(text):
        me.conn.send(("notify", text))
    return session.collect_to_artifact(me.engine, progress=report if lead else None,
                                       notify=notify if lead else None, **kwargs)


def _cmd_shutdown(me: Rank) -> None:
    if me.engine is not None:
        me.engine.shutdown()


COMMANDS: dict[str, Callable[..., Any]] = {
    "start": _cmd_start, "probe": _cmd_probe, "generate": _cmd_generate,
    "restoration": _cmd_restoration, "collect": _cmd_collect, "shutdown": _cmd_shutdown}


def serve(conn, rank: int) -> int:
    me = Rank(conn, rank)
    reply: tuple[str, Any]
    while True:
        try:
            command, kwargs = conn.recv()
        except (EOFError, OSError):  # the proxy is gone
            command, kwargs = "shutdown", {}
        try:
            run = COMMANDS.get(command)
            if run is None:
                raise ValueError(f"rank {rank}: unknown command {command!r}")
            reply = ("ok", run(me, **kwargs))
        except BaseException as exc:  # noqa: BLE001 (reported to the proxy, which raises it)
            reply = ("error", (exc, traceback.format_exc(), me.engine_failed()))
        try:
            conn.send(reply)
        except (EOFError, OSError):
            pass
        except Exception as exc:  # noqa: BLE001 (an unpicklable value or exception)
            conn.send(("error", (f"{type(exc).__name__}: {exc}", repr(reply)[:2000],
                                 me.engine_failed())))
        if command == "shutdown":
            return 0


def main() -> int:
    _die_with_parent()
    rank = int(os.environ["RANK"])
    host, port = os.environ[RANK_SERVER_ENV].rsplit(":", 1)
    conn = Client((host, int(port)), authkey=bytes.fromhex(os.environ[AUTHKEY_ENV]))
    conn.send(("hello", rank, os.getpid()))
    try:
        return serve(conn, rank)
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
