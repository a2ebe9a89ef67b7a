"""`sdbench compare BASELINE CANDIDATE`: the gate (readers.compare). Exit 0 pass; 1 on a
regressed point, on noise it cannot judge (too few rounds, no --noise-floor) or an unfair
comparison (a missing point, a partial side, another mode, a contended side); 2 unusable
input."""

from __future__ import annotations

import argparse

from ..readers.compare_render import FORMATS
from ..run.options import percent
from ..wire.contract import MIN_ROUNDS_FOR_NOISE
from .terminal import EXIT_INVALID, EXIT_OK, EXIT_UNUSABLE, load_valid

HELP = ("gate a candidate against a baseline, point by point, each against its noise across "
        "rounds (exit 1 on a regression, noise it cannot judge or an unfair comparison)")


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", metavar="BASELINE", help="the artifact compared against")
    parser.add_argument("candidate", metavar="CANDIDATE", help="the artifact judged")
    parser.add_argument("--fail-above", type=percent, default=0.0, metavar="PCT",
                        help="a point regresses when slower by more than its noise and PCT "
                        "percent, as 5 or 5%% (default 0: its noise alone; pytest's "
                        "--sdbench-compare-fail-above takes the same)")
    parser.add_argument("--noise-floor", type=percent, default=None, metavar="PCT",
                        help="state the noise: the noise of every point when a side has fewer "
                        f"than {MIN_ROUNDS_FOR_NOISE} rounds (or back-to-back repeats, or is "
                        "legacy), which otherwise fails the gate as noise it cannot judge; "
                        "with enough rounds, the least noise assumed")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="output for people (text), CI summaries (markdown), or tools")


def main(args) -> int:
    from ..readers.compare import compare
    from ..readers.compare_render import render
    from ..run.recollect import collect_command
    base, _ = load_valid(args.baseline)
    if base is None:
        return EXIT_UNUSABLE
    cand, _code = load_valid(args.candidate)
    if cand is None:
        return EXIT_UNUSABLE
    result = compare(base, cand, fail_above_pct=args.fail_above,
                     noise_floor_pct=args.noise_floor, base_name=args.baseline,
                     cand_name=args.candidate, recollect=collect_command)
    print(render(result, args.format))
    return EXIT_INVALID if result.failed else EXIT_OK
