"""`sdbench crosscheck PROFILE`: vLLM alone (no observer, its own engine core) at the
profile's decode points, with the profile's engine settings; profile/vLLM per point
(fidelity.crosscheck). Exit 0 reported, 1 vLLM alone failed, 2 unusable input."""

from __future__ import annotations

import argparse

from ..run.options import positive_int
from ..wire.files import out_dir_problem
from .terminal import EXIT_INVALID, EXIT_OK, EXIT_UNUSABLE, err

HELP = ("measure vLLM alone (no observer, its own multiprocess engine core) at the profile's "
        "decode points, with the profile's engine settings; report profile/vLLM per point")


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profile", metavar="PROFILE", help="an artifact collected on this "
                        "device")
    parser.add_argument("--engine-core", choices=("multiprocess", "inprocess"),
                        default="multiprocess", help="vLLM's engine core in its own process, "
                        "as `vllm serve` runs it (default), or in this one")
    parser.add_argument("--repeats", type=positive_int, default=5, metavar="N",
                        help="slopes measured a point; its figure is their median (default 5)")
    parser.add_argument("--out", metavar="DIR", help="folder for crosscheck-<core>.json/.txt/"
                        ".png (default: beside the profile)")
    parser.add_argument("--no-plots", action="store_true", help="no PNG")


def main(args) -> int:
    from pathlib import Path

    from ..engine.vram import cuda_available
    from ..fidelity.crosscheck import CrosscheckUnusable, check_profile, crosscheck, table, write
    from ..run.inputs import check_vllm_installed
    from ..run.options import InputError
    from ..run.profile import ProfileUnusable, read_profile
    profile = Path(args.profile)
    out = Path(args.out) if args.out else profile.parent
    try:   # everything checkable before an engine starts
        check_vllm_installed()
        artifact = read_profile(profile)
        check_profile(artifact, cuda_available())
        problem = out_dir_problem(out)
        if problem:
            raise InputError(f"--out: {problem}")
    except (InputError, ProfileUnusable, CrosscheckUnusable) as exc:
        err(f"sdbench crosscheck: {exc}")
        return EXIT_UNUSABLE
    err(f"sdbench crosscheck: starting vLLM alone as the profile's engine "
        f"({args.engine_core} engine core) ...")
    try:
        report = crosscheck(artifact, args.engine_core, args.repeats,
                            say=lambda line: err(f"sdbench crosscheck: {line}"))
    except Exception as exc:  # noqa: BLE001 (vLLM fails in many ways; one line says why)
        from ..engine.surface import describe_failure
        err(f"sdbench crosscheck: vLLM alone failed: {describe_failure(exc)}")
        return EXIT_INVALID
    print(table(report))
    for path in write(report, out, plots=not args.no_plots):
        err(f"sdbench crosscheck: wrote {path}")
    return EXIT_OK
