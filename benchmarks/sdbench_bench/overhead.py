"""Observer overhead: decode throughput with the observer attached vs detached, the same
ratio between two identical detached sides (the noise floor it is read against), and the
host time the observer's wrappers add a step, measured directly by a probe beneath the
observer and one above it."""

from __future__ import annotations

import statistics

from .goals import HOST_TIME, THROUGHPUT
from .probes import alternated, observed, paired, rates


def run(bench) -> None:
    for batch in bench.sizes.overhead_batches:
        observer_overhead(bench, batch)


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
    added = statistics.median(run.added_per_step for run in attached) - probes
    step = statistics.median(run.wall / run.engine.steps for run in attached)
    table.row(f"B={batch}: observer host time a step (probe above it minus probe beneath "
              "it, less the probes' own)",
              f"{1e6 * added:.1f} us of a {1e3 * step:.2f} ms step = {100 * added / step:.3f}% "
              f"(probes alone {1e6 * probes:.1f} us a step)", (HOST_TIME, 1e6 * added))
