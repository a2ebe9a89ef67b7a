"""Run the benchmark: ``python -m benchmarks.sdbench_bench SUBCOMMAND [options]`` from the
repository root. See the package docstring for what each subcommand measures."""

from __future__ import annotations

import argparse
import os
import sys

from pytest_sdbench.run.options import add_cli_options, positive_int

from . import __doc__ as DOC
from . import ablation, breakdown, cost, fidelity, overhead, repeatability, syncs
from .bench import Bench
from .goals import EXIT_ERROR, GOALS

# Each subcommand, in the order `all` runs them (repeatability before cost: cost reads the
# collection pair, and with --starts 2 the pair ends the shared engine).
SECTIONS = {
    "overhead": overhead.run,
    "breakdown": breakdown.run,
    "ablation": ablation.run,
    "syncs": syncs.run,
    "fidelity": fidelity.run,
    "repeatability": repeatability.run,
    "cost": cost.run,
}
HELP = {
    "overhead": "decode throughput attached / detached, the noise floor, the observer's "
                "host time a step (direct probe: median over rounds, the rounds, by wrapper), "
                "the start-up probe, and on CUDA the syncs added a step",
    "breakdown": "where the observer's host time goes (hot replay of captured steps by "
                 "part; cProfile; CUDA event calls bare)",
    "ablation": "variants of the observer, host time split by engine method and GC",
    "syncs": "host-device synchronisations the observer adds a step (CUDA)",
    "fidelity": "native step time vs a profiler trace's interval and scheduler wall time",
    "repeatability": "one grid collected twice (one engine, or --starts 2 independent "
                     "starts): per-point agreement, CV, the consumer's import policy",
    "cost": "collection wall time and duty cycle (the repeatability pair); --suite CMD",
    "all": "every measurement above, in that order",
}


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    engine = common.add_argument_group("engine (as `sdbench collect` takes them)")
    add_cli_options(engine, "collect", leave_out=("artifact-dir", "plots"))
    own = common.add_argument_group("benchmark")
    own.add_argument("--rounds", type=positive_int, default=5, metavar="N",
                     help="alternated runs of each variant (overhead, ablation) or profiled "
                          "runs (breakdown); default 5")
    own.add_argument("--starts", type=int, choices=(1, 2), default=1,
                     help="repeatability/cost: 1 collects the pair back to back on one "
                          "engine, 2 starts an engine for each collection (default 1)")
    own.add_argument("--out", metavar="DIR", help="where the repeatability pair's artifacts "
                     "are written (default: a new temporary folder)")
    own.add_argument("--gate", action="store_true",
                     help="exit 1 when a goal is missed (2 when a measurement fails)")
    p = argparse.ArgumentParser(prog="python -m benchmarks.sdbench_bench",
                                description=DOC.split("\n\n")[0],
                                epilog="goals: " + "; ".join(f"{g.name} {g}" for g in GOALS))
    sub = p.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    for name, text in HELP.items():
        s = sub.add_parser(name, parents=[common], help=text, description=text)
        if name in ("cost", "all"):
            s.add_argument("--suite", nargs=argparse.REMAINDER, metavar="CMD",
                           help="a test-suite command to time, last: --suite pytest -q")
    return p


def bench_from(args, p: argparse.ArgumentParser) -> Bench:
    from pytest_sdbench.run.inputs import read_inputs
    if len(args.k) != 1:
        p.error(f"--k: the benchmark runs one draft depth, got {list(args.k)}")
    try:
        inputs = read_inputs(vars(args), cli=True)
        spec = inputs.engine.spec(inputs.depths[0])
    except ValueError as exc:
        p.error(str(exc))
    return Bench(spec=spec, rounds=args.rounds, mode=inputs.mode, grid=inputs.grid,
                 repeats=inputs.repeats, starts=args.starts, out=args.out)


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    bench = bench_from(args, p)
    names = list(SECTIONS) if args.command == "all" else [args.command]
    try:
        if not (bench.starts == 2 and set(names) <= {"repeatability", "cost"}):
            try:
                bench.start()   # here, so that a failure is said once
            except Exception as exc:  # noqa: BLE001 (whatever stopped it, said in one line)
                print(f"sdbench_bench: the engine did not start: {type(exc).__name__}: {exc}",
                      file=sys.stderr)
                return EXIT_ERROR
        for name in names:
            try:
                SECTIONS[name](bench)
            except Exception as exc:  # noqa: BLE001 (one broken measure must not hide the rest)
                bench.table.error(name, exc)
    finally:
        bench.close()
    if getattr(args, "suite", None):
        cost.suite_cost(bench, args.suite)
    print()
    print(bench.table.render())
    code = bench.table.exit_code(args.gate)
    missed = bench.table.missed()
    if args.gate and missed:
        print(f"gate: {len(missed)} goal(s) missed: " +
              "; ".join(f"{r.measure} ({r.goal})" for r in missed))
    return code


if __name__ == "__main__":
    sys.exit(main())
