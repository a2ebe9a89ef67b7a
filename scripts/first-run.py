#!/usr/bin/env python3
"""Does an exact coordinate whose compiled shape already settled need a warm-up pass of its
own? For every Nth point of a grid, in grid order under the by_shape warm-up (so
that each shape settles on its first point), the retained step time of the point's first
run (its warm-up's first pass) against its next runs (measured back to back right after),
by phase and by whether its shape had settled before. A first run that reads as its later
ones says that the one pass a settled shape's point takes (WARMUP_SHAPE_PASSES) warms
nothing the seed does not.

    python scripts/first-run.py [--every N] [--repeats R] [sdbench collect options]
    (e.g. --preset qwen3-0.6b --vllm-defaults --k 3 --acceptance-length 2.78 --grid aisimulate)
"""

import argparse
import statistics
import sys

from pytest_sdbench.commands import collect as collect_command
from pytest_sdbench.engine.launch import start_engine
from pytest_sdbench.measure import collector as collecting
from pytest_sdbench.measure.warmup import ShapeWarmup
from pytest_sdbench.run.collect import grid_for
from pytest_sdbench.run.inputs import read_inputs
from pytest_sdbench.wire.contract import REPEAT_BACK_TO_BACK, SETTLED_FIRST_STEP
from pytest_sdbench.wire.points import Grid, point_label
from pytest_sdbench.wire.rounds import RepeatPlan


def main() -> None:
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--every", type=int, default=3)
    own.add_argument("--repeats", type=int, default=3)
    mine, rest = own.parse_known_args()
    parser = argparse.ArgumentParser(prog="first-run.py")
    collect_command.add_cli_args(parser)   # `sdbench collect`'s options
    args = parser.parse_args(rest)
    inputs = read_inputs(vars(args), cli=True)
    engine = start_engine(inputs.engine.spec(inputs.depths[0]))
    print(f"engine started in {engine.start_seconds:.1f} s", flush=True)
    full = grid_for(engine, inputs.grid)
    grid = Grid(prefill=full.prefill[::mine.every], decode=full.decode[::mine.every])
    first: dict[tuple[str, int], tuple[int, float]] = {}   # -> (passes, first run's seconds)
    index = {("prefill", id(p)): i for i, p in enumerate(grid.prefill)} | \
        {("decode", id(p)): i for i, p in enumerate(grid.decode)}
    warm = ShapeWarmup.warm

    def recording_warm(self, state, runner):
        times = []
        once = runner.once

        def timed(state, booking):
            outcome = once(state, booking)
            times.append(outcome.record.timing.seconds)
            return outcome
        runner.once = timed
        try:
            passes, settled = warm(self, state, runner)
        finally:
            del runner.once
        first[(state.phase, index[(state.phase, id(state.point))])] = (passes, times[0])
        return passes, settled
    ShapeWarmup.warm = recording_warm
    # every decode point takes its warm-up's first pass (by_shape), so that its first run is
    # timed apart from its samples (by_shape_seeded measures a settled shape's first run)
    ShapeWarmup.seed_warms = lambda self, point: False
    plan = RepeatPlan(mine.repeats, REPEAT_BACK_TO_BACK, 0, None)
    result = collecting.Collector(engine, repeats=plan).collect(inputs.mode, grid)
    later: dict[tuple[str, int], list[float]] = {}
    for o in result.prefill:
        later.setdefault(("prefill", o.point_index), []).append(o.timing.seconds)
    for o in result.decode:   # the first retained step: the one the warm-up times
        if o.step_index == SETTLED_FIRST_STEP:
            later.setdefault(("decode", o.point_index), []).append(o.timing.seconds)
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for key, (passes, seconds) in sorted(first.items()):
        runs = later.get(key)
        if not runs:
            continue
        median = statistics.median(runs)
        kind = "seen before" if passes == 1 else "its own"
        rows.setdefault((key[0], kind), []).append((seconds / median, runs[0] / median))
        point = (grid.prefill if key[0] == "prefill" else grid.decode)[key[1]]
        print(f"{key[0]}[{key[1]}] {point_label(point)}: passes {passes}, first "
              f"{1000 * seconds:.3f} ms, then {', '.join(f'{1000 * s:.3f}' for s in runs)}")
    print("phase    shape         points  first run / median of the next  (share over 1.05)"
          "   next run 1 / median")
    for (phase, kind), pairs in sorted(rows.items()):
        firsts, nexts = [p[0] for p in pairs], [p[1] for p in pairs]
        print(f"{phase:8s} {kind:12s} {len(pairs):7d}  {statistics.median(firsts):.3f} "
              f"(mean {statistics.fmean(firsts):.3f}, {_over(firsts):.2f})"
              f"   {statistics.median(nexts):.3f} ({_over(nexts):.2f})")
    engine.shutdown()


def _over(ratios: list[float], bound: float = 1.05) -> float:
    """The share of ratios over the bound (the warm-up's 5% rule)."""
    return sum(r > bound for r in ratios) / len(ratios)


if __name__ == "__main__":
    sys.exit(main())
