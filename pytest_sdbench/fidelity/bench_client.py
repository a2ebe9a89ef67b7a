"""vLLM's own `vllm bench serve`, every run of one `sdbench serve` in one process: the
client's side (main, run as a module) and the server's handle on it (BenchClient).

A `vllm bench serve` process spends most of its life starting and importing vLLM. On the
H100 host of docs/evidence/h100/one-host-06b, 14 runs took 397.6 s for 54.6 s of benchmark,
and a lease's device time is 1,800 s. So the client is started once: it imports the subcommand `vllm bench
serve` dispatches to (vllm.entrypoints.cli.benchmark.serve.BenchmarkServingSubcommand), then
for each request on stdin it parses the run's flags with vLLM's own parser, as `vllm bench
serve FLAGS` would, and runs the subcommand. The run's output goes into that run's log, and
the client answers one line with the run's exit status. served.py reads vLLM's metrics
between runs, as before; the arguments, the dataset, the client code and the results are
those of the command line.

    python -m pytest_sdbench.fidelity.bench_client
    stdin, a line a run:  {"argv": [FLAGS after `vllm bench serve`], "log": PATH}
    stdout, a line a run: {"returncode": N}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

MODULE = "pytest_sdbench.fidelity.bench_client"


def bench_serve() -> tuple[Callable[[list[str]], Any], Callable[[Any], None]]:
    """(parse, run) of vLLM's `vllm bench serve`: its parser and its subcommand, set up as
    vLLM's CLI main sets them up for `vllm bench` (a platform for the tokenizer's side)."""
    from vllm import platforms
    from vllm.entrypoints.cli.benchmark.serve import BenchmarkServingSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    if platforms.current_platform.is_unspecified():   # as vllm.entrypoints.cli.main does
        from vllm.platforms.cpu import CpuPlatform
        platforms.current_platform = CpuPlatform()
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    BenchmarkServingSubcommand.add_cli_args(parser)
    return parser.parse_args, BenchmarkServingSubcommand.cmd


def exit_status(code: object) -> int:
    """A SystemExit's code as a process's exit status."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def run_into(log_path: str, argv: list[str], parse: Callable[[list[str]], Any],
             run: Callable[[Any], None]) -> int:
    """One run, its stdout and stderr (file descriptors 1 and 2, so that vLLM's logger and
    any child write there too) into log_path; its exit status."""
    sys.stdout.flush()
    sys.stderr.flush()
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
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return status


def serve_requests(requests: TextIO, replies: TextIO) -> None:
    parse, run = bench_serve()
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        status = run_into(request["log"], list(request["argv"]), parse, run)
        replies.write(json.dumps({"returncode": status}) + "\n")
        replies.flush()


def main() -> None:
    # The replies go down a copy of stdout; descriptor 1 itself then goes to stderr (the
    # client's log), so that what vLLM prints outside a run never mixes into a reply.
    with os.fdopen(os.dup(1), "w") as replies:
        os.dup2(2, 1)
        serve_requests(sys.stdin, replies)


class BenchClient:
    """The server's handle on one client process: started before the server is healthy (its
    imports overlap the server's start), asked for one run at a time, closed at the end."""

    def __init__(self, log: Path, env: dict[str, str], python: str = sys.executable) -> None:
        self.log = log
        with log.open("wb") as sink:
            self.process = subprocess.Popen(
                [python, "-m", MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=sink, env=env, text=True)

    def run(self, argv: list[str], log: Path) -> int:
        """One `vllm bench serve` run with these flags, its output in log: its exit status.
        A client that is gone answers its own exit status, said in the run's log."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps({"argv": argv, "log": str(log)}) + "\n")
            self.process.stdin.flush()
            reply = self.process.stdout.readline()
        except (BrokenPipeError, OSError):
            reply = ""
        if reply:
            return int(json.loads(reply)["returncode"])
        status = self.process.wait()
        with log.open("a") as sink:
            sink.write(f"the bench client exited ({status}) before this run's end; its log: "
                       f"{self.log}\n")
        return status if status else 1

    def close(self, timeout: float = 30.0) -> int | None:
        """End the client (its stdin closed, then killed if it lingers): its exit status."""
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
