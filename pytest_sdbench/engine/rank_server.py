"""One rank of a tensor-parallel engine: ``python -m pytest_sdbench.engine.rank_server``,
started by engine/tp.py with torchrun's environment. It connects to the proxy, starts its
engine in-process (vLLM external_launcher), then runs the proxy's commands until told to
shut down. Every rank runs every command, in the same order (vLLM's engine is SPMD)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import traceback
from multiprocessing.connection import Client
from typing import Any

from .tp import AUTHKEY_ENV, RANK_SERVER_ENV, RankStarted

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Linux: SIGTERM this rank when the process that started it dies, so that a killed
    pytest leaves no rank waiting in a collective."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _start(spec) -> tuple[Any, RankStarted]:
    from . import compat, ranks
    from .launch import start_local_engine
    engine = start_local_engine(spec)
    return engine, RankStarted(
        rank=ranks.rank(), pid=os.getpid(), device=engine.device,
        gpu_indices=engine.gpu_indices, identity=engine.identity,
        kv_capacity=engine.kv_capacity, start_seconds=engine.start_seconds,
        baseline=engine.probe() if engine.baseline is None else engine.baseline,
        vocab_size=int(compat.vllm_config(engine.llm).model_config.get_vocab_size()))


def _generate(engine, prompts, max_tokens):
    from ..collector.collect import sampling_params
    return [tuple(o.outputs[0].token_ids)
            for o in engine.generate(prompts, sampling_params(max_tokens))]


def _collect(engine, conn, rank, **kwargs):
    from ..session import collect_to_artifact

    def report(done, total, label):
        conn.send(("progress", (done, total, label)))

    def notify(text):
        conn.send(("notify", text))
    return collect_to_artifact(engine, progress=report if rank == 0 else None,
                               notify=notify if rank == 0 else None, **kwargs)


def _engine_failed(engine) -> bool:
    """The command failed this rank's engine (launch.SdbenchEngine's rule): the proxy then
    fails too."""
    return engine is not None and engine.failure is not None


def serve(conn, rank: int) -> int:
    engine: Any = None
    value: Any
    reply: tuple[str, Any]
    while True:
        try:
            command, kwargs = conn.recv()
        except (EOFError, OSError):  # the proxy is gone
            command, kwargs = "shutdown", {}
        try:
            if command == "start":
                engine, value = _start(kwargs["spec"])
            elif command == "probe":
                value = engine.probe()
            elif command == "generate":
                value = _generate(engine, **kwargs)
            elif command == "restoration":
                from .restoration import restoration_violations
                value = restoration_violations(engine)
            elif command == "collect":
                value = _collect(engine, conn, rank, **kwargs)
            elif command == "shutdown":
                value = None
                if engine is not None:
                    engine.shutdown()
            else:
                raise ValueError(f"rank {rank}: unknown command {command!r}")
            reply = ("ok", value)
        except BaseException as exc:  # noqa: BLE001 (reported to the proxy, which raises it)
            reply = ("error", (exc, traceback.format_exc(), _engine_failed(engine)))
        try:
            conn.send(reply)
        except (EOFError, OSError):
            pass
        except Exception as exc:  # noqa: BLE001 (an unpicklable value or exception)
            conn.send(("error", (f"{type(exc).__name__}: {exc}", repr(reply)[:2000],
                                 _engine_failed(engine))))
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
