"""How the `sdbench` commands meet a terminal: the exit codes they share, a usage error in
one line (the usage block is --help's), --version without starting anything, a message on
stderr, one printed line per message, an artifact loaded valid or refused in one line, and
a closed pipe ended quietly."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import NoReturn

EXIT_OK, EXIT_INVALID, EXIT_UNUSABLE = 0, 1, 2   # EXIT_UNUSABLE: argparse's usage error too
EXIT_USAGE = EXIT_UNUSABLE
EXIT_INTERRUPTED = 130   # 128 + SIGINT, as a shell reports a Ctrl-C
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
        from ..engine.model_pair import vllm_version
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


def err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def one_line(text: str) -> str:
    """One printed line per message, whatever the artifact's strings hold."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def load_valid(path):
    """(the artifact, EXIT_OK), or (None, the exit code) with the refusal said in one
    line: an unusable file, or one the validator refuses."""
    from ..artifact import validate_path
    from ..artifact.store import UnusableArtifact
    try:
        report = validate_path(path)
    except UnusableArtifact as exc:
        err(f"sdbench: {exc}")
        return None, EXIT_UNUSABLE
    if not report.ok:
        err(f"sdbench: {path} is not a valid artifact; run `sdbench validate {path}`")
        return None, EXIT_INVALID
    return report.artifact, EXIT_OK
