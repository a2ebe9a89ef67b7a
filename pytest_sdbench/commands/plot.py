"""`sdbench plot [ARTIFACT ...] [--compare BASELINE CANDIDATE] [--out DIR]`: PNGs and one
self-contained HTML page (readers.plot; needs matplotlib)."""

from __future__ import annotations

import argparse

from ..wire.files import out_dir_problem
from .terminal import EXIT_OK, EXIT_UNUSABLE, err, load_valid

HELP = ("draw artifacts: PNGs and one self-contained HTML page (needs matplotlib: pip install "
        "'pytest-sdbench[plot]')")
DEFAULT_PLOT_DIR = "sdbench-plots"


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="ARTIFACT", help="artifacts to draw")
    parser.add_argument("--compare", nargs=2, metavar=("BASELINE", "CANDIDATE"),
                        help="also draw the per-point change of CANDIDATE against BASELINE, "
                        "coloured by `sdbench compare`'s verdict (default rule)")
    parser.add_argument("--out", default=DEFAULT_PLOT_DIR, metavar="DIR",
                        help=f"folder for the PNGs and sdbench-plots.html (default "
                        f"{DEFAULT_PLOT_DIR}; created if missing)")


def main(args) -> int:
    from ..readers.figures import PlotUnavailable, require_matplotlib
    from ..readers.plot import write_plots
    if not args.paths and not args.compare:
        err("sdbench plot: give an ARTIFACT to draw, or --compare BASELINE CANDIDATE")
        return EXIT_UNUSABLE
    problem = out_dir_problem(args.out)
    if problem:
        err(f"sdbench plot: --out: {problem}")
        return EXIT_UNUSABLE
    loaded = []
    for path in [*args.paths, *(args.compare or ())]:
        artifact, code = load_valid(path)
        if artifact is None:
            return code
        loaded.append((path, artifact))
    try:
        require_matplotlib()
    except PlotUnavailable as exc:
        err(f"sdbench plot: {exc}")
        return EXIT_UNUSABLE
    drawn = loaded[:len(args.paths)]
    try:
        pair = loaded[len(drawn):]
        compare = (pair[0], pair[1]) if len(pair) == 2 else None
        written = write_plots(drawn, args.out, pair=compare)
    except ValueError as exc:   # a comparison of two different grids
        err(f"sdbench plot: {exc}")
        return EXIT_UNUSABLE
    except OSError as exc:   # the folder was writable when checked; not any more (a full disk)
        err(f"sdbench plot: --out: cannot write {exc.filename or args.out} ({exc.strerror})")
        return EXIT_UNUSABLE
    for path in written:
        print(f"wrote {path}")
    return EXIT_OK
