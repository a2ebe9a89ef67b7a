"""The ``sdbench`` command: the plugin's work outside pytest. One module a command, each with
``add_cli_args(parser)`` and ``main(args)`` (as vLLM's `vllm bench` commands are written);
this module only dispatches.

    sdbench collect  [--mode agg] [--preset tiny | --model DIR --draft DIR] [--k 3 | --k 1-5]
                     [--artifact-dir DIR] [--plots] ...   (the pytest options less --sdbench-)
    sdbench validate PATH [PATH ...] [--k-window 1-5]   exit 0 valid, 1 invalid, 2 unusable
    sdbench show     PATH                               an artifact or a K-sweep index
    sdbench compare  BASELINE CANDIDATE [--fail-above PCT] [--noise-floor PCT]
                     [--format text|markdown|csv|json]   exit 0 pass, 1 fail, 2 unusable
    sdbench plot     [ARTIFACT ...] [--compare BASELINE CANDIDATE] [--out DIR]  (matplotlib)
    sdbench export   ARTIFACT... --to aisimulate --out DIR   exit 0 written, 1 refused, 2 unusable
    sdbench fidelity PROFILE [--rate RPS ...] [--out DIR] | --report DIR   exit 0 reported
    sdbench fidelity PROFILE --served DIR [--consumer-python PY]   served vs AISimulate
    sdbench serve    PROFILE --rate R [--rate R2] --num-prompts N --input-len I --output-len O
                     --out DIR   (`vllm serve` + `vllm bench serve`)   exit 0 served
    sdbench crosscheck PROFILE   vLLM alone at the profile's decode points
    sdbench emulate  PROFILE [--port P] [--rate R | --case C:ISL:OSL ... --out DIR]
                     [-- vllm serve args]   `vllm serve` stepping at the profile's prices

Every command refuses what it cannot use in one line with exit 2 (an unwritable output
folder included), before it starts an engine or writes anything.
"""

from __future__ import annotations

import argparse
import signal
import sys

from .aisimulate import command as export
from .commands import collect, compare, crosscheck, plot, show, validate
from .commands.terminal import EXIT_INTERRUPTED, Parser, Version, closed_pipe, err
from .emulate import command as emulate
from .fidelity import command as fidelity
from .fidelity import serve_command as serve

# name -> the module that implements it (HELP, optional DESCRIPTION and EPILOG,
# add_cli_args, main), in the order --help lists them
COMMANDS = {"collect": collect, "validate": validate, "show": show, "compare": compare,
            "plot": plot, "export": export, "fidelity": fidelity, "serve": serve,
            "crosscheck": crosscheck, "emulate": emulate}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="sdbench", description="The ``sdbench`` command: the plugin's work "
                    "outside pytest.")
    parser.add_argument("--version", action=Version)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in COMMANDS.items():
        module.add_cli_args(sub.add_parser(
            name, help=module.HELP, description=getattr(module, "DESCRIPTION", None),
            epilog=getattr(module, "EPILOG", None)))
    return parser


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each command's parser, by name (for the help and the option-table tests)."""
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def split_passthrough(argv: list[str]) -> tuple[list[str], list[str]]:
    """A command that hands arguments on (PASSTHROUGH: `sdbench emulate ... -- ARGS`) gets
    everything after the first `--` as args.passthrough, unparsed."""
    command = next((a for a in argv if a in COMMANDS), None)
    if command is None or not getattr(COMMANDS[command], "PASSTHROUGH", False) \
            or "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def main(argv=None) -> int:
    head, rest = split_passthrough(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(head)
    args.passthrough = rest
    try:
        return COMMANDS[args.command].main(args)
    except KeyboardInterrupt:   # what was measured is saved (and said) where it was taken
        err("sdbench: interrupted")
        return EXIT_INTERRUPTED


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def console_main() -> int:
    """`sdbench` and `python -m pytest_sdbench.cli`: main, with Ctrl-C and `kill` as an
    interrupt wherever the command was started (what was measured is kept and said). A
    shell starts a background job with SIGINT ignored, and Python keeps it ignored; SIGTERM's
    default would end the process with no partial file and the engine not shut down. Not in
    main itself: tests call main inside pytest's own process."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        code = main()
        sys.stdout.flush()   # a closed pipe is found here when the output fit the buffer
        return code
    except BrokenPipeError:   # `sdbench show A | head -1`
        return closed_pipe()


if __name__ == "__main__":
    sys.exit(console_main())
