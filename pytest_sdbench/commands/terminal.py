"""How the `sdbench` command meets a terminal: a usage error in one line (the usage block
is --help's), --version without starting anything, and a closed pipe ended quietly."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import NoReturn

EXIT_USAGE = 2   # argparse's, and the CLI's "unusable input"
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE   # as a shell reports a tool a closed pipe ended


class Parser(argparse.ArgumentParser):
    """A usage error in one line, exit 2; the usage block is --help's (subcommands' parsers
    are of this class too: add_subparsers makes them so)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {' '.join(message.split())}\n")


class Version(argparse.Action):
    """--version: the package's and vLLM's versions, read from the installed metadata
    (importing vLLM takes 10-18 s and starts nothing this needs)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print the versions of "
                         "pytest-sdbench and of the vLLM installed here, and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace, values,
                 option_string=None) -> NoReturn:
        import importlib.util

        from .. import __version__
        from ..run.model_pair import vllm_version
        vllm = vllm_version() if importlib.util.find_spec("vllm") else "not installed"
        print(f"pytest-sdbench {__version__}; vLLM {vllm}")
        parser.exit(0)


def closed_pipe() -> int:
    """The reader of stdout went away (`sdbench show A | head -1`): end quietly, as Unix
    tools do, with the status a shell gives a tool SIGPIPE ended. Not SIGPIPE's default
    action: a collection ended by it would lose what it measured. Python flushes stdout
    once more at exit; pointed at /dev/null, that flush has nowhere to fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE
