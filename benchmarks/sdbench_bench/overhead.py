"""Observer overhead: decode throughput with the observer attached vs detached, the same
ratio between two identical detached sides (the noise floor it is read against), and the
host time the observer's wrappers add a step, measured directly by a probe beneath the
observer and one above it: the median over rounds with every round's figure, split by
wrapped method; beside it the start-up probe (pytest_sdbench.measure.observer_cost.measure) on the
same engine, and on CUDA the host-device synchronisations added a step (syncs.py)."""

from __future__ import annotations

import statistics

from pytest_sdbench.measure import observer_cost as cost

from . import syncs
from .goals import HOST_TIME, THROUGHPUT
from .probes import alternated, observed, paired, rates

METHODS = tuple(name for _, name in cost.WRAPPED)


def run(bench) -> None:
    if bench.engine.device == "cuda":
        from pytest_sdbench.measure.timing import CudaEventTimer
        timer = CudaEventTimer()
        bench.table.note(f"CUDA event timer records with {timer.recorder} "
                         f"{timer.recorder_note}".rstrip())
    for batch in bench.sizes.overhead_batches:
        observer_overhead(bench, batch)
        startup_probe(bench, batch)
    if bench.engine.device == "cuda":
        syncs.run(bench)


def spread(values_us: list[float]) -> str:
    ordered = sorted(values_us)
    return (f"median {statistics.median(ordered):.1f} us, range {ordered[0]:.1f}.."
            f"{ordered[-1]:.1f} (rounds: {', '.join(f'{v:.1f}' for v in values_us)})")


def observer_overhead(bench, batch: int) -> None:
    sizes, table = bench.sizes, bench.table
    context, tokens = sizes.context, sizes.tokens
    results = alternated(bench.engine, {"attached": observed, "detached": None,
                                        "detached again": None}, bench.rounds, batch,
                         context, tokens)
    attached, detached, again = (results[k] for k in ("attached", "detached",
                                                      "detached again"))
    for name, runs in results.items():
        table.note(f"{name} tok/s: {rates(runs)}")
    med = {k: statistics.median(run.rate for run in runs) for k, runs in results.items()}
    ratio = med["attached"] / med["detached"]
    table.row(f"B={batch}: decode throughput, observer attached / detached",
              f"{med['attached']:.1f} / {med['detached']:.1f} tok/s = {100 * ratio:.2f}% "
              f"(medians of {bench.rounds} alternated runs each, ctx={context}, {tokens} "
              f"tokens; {paired(attached, detached)})", (THROUGHPUT, 100 * ratio))
    table.row(f"B={batch}: noise floor, detached / detached again (identical sides, "
              "alternated)", f"{100 * med['detached'] / med['detached again']:.2f}% "
              f"({paired(detached, again)})")
    probes = statistics.median(run.added_per_step for run in detached + again)
    per_round = [1e6 * (run.added_per_step - probes) for run in attached]
    added = statistics.median(per_round)
    step = statistics.median(run.wall / run.engine.steps for run in attached)
    # by wrapped method, each less the probes' own cost at that method
    own = {m: statistics.median(run.added_in(m) for run in detached + again) for m in METHODS}
    split = ", ".join(
        f"{m} {statistics.median(1e6 * (run.added_in(m) - own[m]) for run in attached):.1f}"
        for m in METHODS)
    table.row(f"B={batch}: observer host time a step (probe above it minus probe beneath "
              "it, less the probes' own)",
              f"{spread(per_round)} of a {1e3 * step:.2f} ms step = "
              f"{100 * 1e-6 * added / step:.3f}%; by wrapper (us, medians): {split}; probes "
              f"alone {1e6 * probes:.1f} us a step", (HOST_TIME, added))


def startup_probe(bench, batch: int) -> None:
    """The lighter probe an engine runs at start-up, on this engine, for comparison."""
    result = cost.measure(bench.engine, batch=batch)
    bench.table.row(f"B={batch}: start-up probe (observer.cost.measure, GC paused)",
                    f"{spread([1e6 * s for s in result.round_seconds_per_step])}, "
                    f"{result.steps} observed steps")
