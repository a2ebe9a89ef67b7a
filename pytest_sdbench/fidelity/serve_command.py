"""`sdbench serve PROFILE --rate R [--rate R2] ...`: its options and its run (served.py does
the serving). Exit 0: served; 1: the server or a client run failed; 2: unusable input
(before any server starts)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..wire.files import out_dir_problem

EXIT_OK, EXIT_FAILED, EXIT_UNUSABLE = 0, 1, 2
HELP = ("serve as users run it: `vllm serve` with the profile's engine settings, driven by "
        "`vllm bench serve` (random dataset) at each Poisson rate and closed-loop case; "
        "vLLM's result files, its request metrics around each run, and a manifest")


def _err(text: str) -> None:
    print(text, file=sys.stderr)


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profile", metavar="PROFILE", help="an artifact collected on this device")
    add_traffic_args(parser)


def add_traffic_args(parser: argparse.ArgumentParser, out_required: bool = True) -> None:
    """The traffic `vllm bench serve` drives (`sdbench serve` and `sdbench emulate` take the
    same; emulate's --out is optional: without traffic it serves until interrupted)."""
    parser.add_argument("--rate", type=float, action="append", default=[], metavar="R",
                        help="Poisson arrivals at R requests a second; repeat for another run on "
                        "the same server")
    parser.add_argument("--num-prompts", type=int, default=0, metavar="N",
                        help="requests a rate's run")
    parser.add_argument("--input-len", type=int, default=0, metavar="I",
                        help="prompt tokens of every request of a rate's run")
    parser.add_argument("--output-len", type=int, default=0, metavar="O",
                        help="output tokens of every request of a rate's run (EOS ignored)")
    parser.add_argument("--case", type=_case, action="append", default=[],
                        metavar="C:ISL:OSL[:N]",
                        help="a closed loop: C requests in flight, ISL prompt and OSL output "
                        "tokens each, N requests (default max(4C, 8)); repeatable")
    parser.add_argument("--passes", type=int, default=1, metavar="P",
                        help="the whole traffic P times on the same server, each pass with "
                        "prompts of its own (its spread is the served runs' own noise; "
                        "default 1)")
    parser.add_argument("--seed", type=int, default=0, help="the client's seed of the first "
                        "rate, one more for each later rate, so that no rate's prompts are "
                        "in the prefix cache from an earlier one (default 0)")
    parser.add_argument("--out", required=out_required, metavar="DIR",
                        help="folder for served-rate-R.json, the logs and served-manifest.json")
    parser.add_argument("--port", type=int, metavar="P", help="the server's port on 127.0.0.1 "
                        "(default: a free one)")
    parser.add_argument("--health-timeout", type=float, default=900.0, metavar="S",
                        help="seconds the server may take to become healthy (default 900)")


def _case(text: str):
    from .served_settings import parse_case
    try:
        return parse_case(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def options_of(args):
    """The ServedOptions of the traffic arguments (a rate's run needs its three sizes)."""
    from .served_settings import ServedOptions
    return ServedOptions(rates=tuple(args.rate), num_prompts=args.num_prompts,
                         input_len=args.input_len, output_len=args.output_len, seed=args.seed,
                         port=args.port, cases=tuple(args.case), passes=args.passes)


def check_out_folder(out: Path) -> None:
    """InputError unless `out` can take a served run's files (`sdbench serve`'s and
    `sdbench emulate`'s): writable, and no served run in it already."""
    from ..run.options import InputError
    from .served import MANIFEST_FILE
    problem = out_dir_problem(out)
    if problem:
        raise InputError(f"--out: {problem}")
    if (out / MANIFEST_FILE).exists():
        raise InputError(f"--out: {out} already holds a served run ({MANIFEST_FILE}); "
                         "give another folder")


def main(args) -> int:
    from ..engine.vram import cuda_available
    from ..run.inputs import check_vllm_installed
    from ..run.options import InputError
    from ..run.profile import ProfileUnusable, check_device, read_profile
    from .served import MANIFEST_FILE, ServingFailed, serve
    from .served_settings import ServedUnusable, check_options, server_kwargs
    profile, out = Path(args.profile), Path(args.out)
    try:   # everything checkable before a server starts
        options = options_of(args)
        if not args.health_timeout > 0:
            raise ServedUnusable(f"--health-timeout: must be > 0 seconds, got "
                                 f"{args.health_timeout:g}")
        check_vllm_installed()
        artifact = read_profile(profile)
        check_device(artifact, cuda_available())
        check_options(options, artifact)
        resolved = server_kwargs(artifact)
        check_out_folder(out)
    except (InputError, ProfileUnusable, ServedUnusable, ValueError) as exc:
        _err(f"sdbench serve: {exc}")
        return EXIT_UNUSABLE
    try:
        manifest = serve(profile, artifact, options, out,
                         say=lambda line: _err(f"sdbench serve: {line}"),
                         health_timeout=args.health_timeout, resolved=resolved)
    except ServingFailed as exc:
        _err(f"sdbench serve: {exc}")
        return EXIT_FAILED
    for run in manifest["runs"]:
        which = run["label"] + (f" pass {run['pass']}" if run["pass"] else "")
        print(f"{which}: {out / run['result']}")
    print(f"wrote {out / MANIFEST_FILE}")
    return EXIT_OK
