"""vLLM's own `vllm bench serve`, every run of one `sdbench serve` in one process: the
client's side (main, run as a module) and the server's handle on it (BenchClient).

A `vllm bench serve` process spends most of its life starting and importing vLLM (what that
cost a lease: docs/evidence/h100/one-host-06b/README.md). So the client is started once: it
imports the subcommand `vllm bench serve` dispatches to
(vllm.entrypoints.cli.benchmark.serve.BenchmarkServingSubcommand), then for each request on
stdin it parses the run's flags with vLLM's own parser, as `vllm bench serve FLAGS` would,
and runs the subcommand. The run's output goes into that run's log, and the client answers
one line with the run's exit status. served.py reads vLLM's metrics between runs, as
before; the arguments, the dataset, the client code and the results are those of the
command line.

    python -m pytest_sdbench.fidelity.bench_client
    stdin, a line a run:  {"argv": [FLAGS after `vllm bench serve`], "log": PATH}
    stdout, a line a run: {"returncode": N}
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

MODULE = "pytest_sdbench.fidelity.bench_client"
# vLLM's CLI would hand `vllm bench serve` to a Rust binary under this variable; the client
# runs vLLM's Python bench, so the variable is left out of its environment (and recorded).
NOT_PASSED_ENV = ("VLLM_USE_RUST_BENCH",)


def bench_serve() -> tuple[Callable[[list[str]], Any], Callable[[Any], None]]:
    """(parse, run) of vLLM's `vllm bench serve`: its parser and its subcommand, set up as
    vLLM's CLI main sets them up for `vllm bench` (a platform for the tokenizer's side, and,
    where this vLLM has it, the logging its flags configure)."""
    from vllm import logger, platforms
    from vllm.entrypoints.cli.benchmark.serve import BenchmarkServingSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    if platforms.current_platform.is_unspecified():   # as vllm.entrypoints.cli.main does
        from vllm.platforms.cpu import CpuPlatform
        platforms.current_platform = CpuPlatform()
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    BenchmarkServingSubcommand.add_cli_args(parser)
    configure = getattr(logger, "configure_logging_from_args", None)   # vLLM 0.32, not 0.26

    def parse(argv: list[str]) -> Any:
        args = parser.parse_args(argv)
        if configure is not None:
            configure(args)
        return args
    return parse, BenchmarkServingSubcommand.cmd


def exit_status(code: object) -> int:
    """A SystemExit's code as a process's exit status (a message is printed, as Python
    prints it on exit)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _flush_all() -> None:
    """Python's and C's buffers of stdout and stderr, before a descriptor is moved."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


def run_into(log_path: str, argv: list[str], parse: Callable[[list[str]], Any],
             run: Callable[[Any], None]) -> int:
    """One run, its stdout and stderr (file descriptors 1 and 2, so that vLLM's logger and
    any child write there too) into log_path; its exit status."""
    _flush_all()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "wb") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            run(parse(argv))
            status = 0
        except SystemExit as exc:          # vLLM's parser and bench exit this way
            status = exit_status(exc.code)
        except Exception:  # noqa: BLE001 -- the run failed, said in its log; the next may run
            traceback.print_exc()
            status = 1
        finally:
            # vLLM's bench freezes the heap it set up (gc.freeze); a process of many runs
            # gives it back, so that one run's leftovers do not outlive it
            gc.unfreeze()
            gc.collect()
            _flush_all()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return status


def serve_requests(requests: TextIO, replies: TextIO) -> None:
    """Every request of requests (a JSON line a run) run in turn, each answered in replies."""
    parse, run = bench_serve()
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        status = run_into(request["log"], list(request["argv"]), parse, run)
        replies.write(json.dumps({"returncode": status}) + "\n")
        replies.flush()


def main() -> None:
    # The requests come up a copy of stdin and the replies go down a copy of stdout; the
    # descriptors themselves then read nothing (0, as the command line's runs had it) and
    # write to stderr, the client's log (1), so that nothing vLLM prints mixes into a reply.
    with os.fdopen(os.dup(0)) as requests, os.fdopen(os.dup(1), "w") as replies:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)
        serve_requests(requests, replies)


class BenchClient:
    """The server's handle on one client process: started with the server (its imports
    overlap the server's start), asked for one run at a time, closed at the end."""

    def __init__(self, log: Path, env: dict[str, str], python: str = sys.executable) -> None:
        self.log = log
        self.env_left_out = sorted(k for k in NOT_PASSED_ENV if k in env)
        with log.open("wb") as sink:
            self.process = subprocess.Popen(
                [python, "-m", MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=sink, env={k: v for k, v in env.items() if k not in NOT_PASSED_ENV},
                text=True)

    def gone(self) -> str | None:
        """Why the client is gone (its exit status and its log's last line), or None."""
        status = self.process.poll()
        if status is None:
            return None
        lines = [x for x in self.log.read_text(errors="replace").splitlines() if x.strip()]
        return f"the bench client exited ({status}): {lines[-1] if lines else ''} " \
               f"(log: {self.log})"

    def run(self, argv: list[str], log: Path) -> int:
        """One `vllm bench serve` run with these flags, its output in log: its exit status.
        A client that is gone, or answers no status, fails the run, said in the run's log."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps({"argv": argv, "log": str(log)}) + "\n")
            self.process.stdin.flush()
            reply = self.process.stdout.readline()
            return int(json.loads(reply)["returncode"])
        except (OSError, ValueError, KeyError, TypeError):
            try:
                status: int | None = self.process.wait(5)   # it closed its replies: ending
            except subprocess.TimeoutExpired:
                status = None
            with log.open("a") as sink:
                sink.write(f"the bench client exited ({status}) before this run's end; its "
                           f"log: {self.log}\n" if status is not None else
                           f"the bench client answered no exit status; its log: {self.log}\n")
            return status if status else 1

    def close(self, timeout: float = 30.0) -> int:
        """End the client, its stdin closed, killed if it lingers past timeout (0: at once):
        its exit status."""
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


if __name__ == "__main__":
    main()
