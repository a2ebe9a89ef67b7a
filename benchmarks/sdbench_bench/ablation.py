"""Where observer overhead comes from: variants of the observer, each run with its host
time split by engine method and garbage-collection pauses (isolation only: none of the
variants is a valid profile)."""

from __future__ import annotations

import contextlib
import statistics

from .probes import alternated, gc_disabled, observed, rates

PARTS = ("schedule", "execute_model", "sample_tokens", "update_from_output", "gc")


def run(bench) -> None:
    from pytest_sdbench.measure.timing import CudaEventTimer, HostTimer
    sizes = bench.sizes
    variants: dict = {
        "detached": None,
        "full": observed,
        "stamp only (no window)": lambda e: observed(e, window=False),
        "host timer": lambda e: observed(e, timer=HostTimer()),
        "no dispatch wrapper": lambda e: observed(e, dispatch=False),
        "detached, gc off": lambda e: gc_disabled(contextlib.nullcontext()),
        "full, gc off": lambda e: gc_disabled(observed(e)),
    }
    if bench.engine.device == "cuda":   # the timer's record without the driver's (as before)
        variants["events by torch's record (releases the GIL)"] = \
            lambda e: observed(e, timer=CudaEventTimer(driver=None))
    results = alternated(bench.engine, variants, bench.rounds, sizes.batch, sizes.context,
                         sizes.tokens)
    base = statistics.median(run.rate for run in results["detached"])
    for name, runs in results.items():
        rate = statistics.median(run.rate for run in runs)
        per_step = {part: statistics.median(1e3 * run.engine.seconds.get(part, 0.0) /
                                            run.engine.steps for run in runs) for part in PARTS}
        wall = statistics.median(1e3 * run.wall / run.engine.steps for run in runs)
        added = statistics.median(1e3 * run.added_per_step for run in runs)
        steps = statistics.median(run.engine.steps for run in runs)
        full_gcs = statistics.median(run.engine.collections[2] for run in runs)
        split = ", ".join(f"{part} {ms:.2f}" for part, ms in per_step.items())
        bench.table.row(f"ablation: {name}", f"{rate:.1f} tok/s = {100 * rate / base:.2f}% of "
                        f"detached ({rates(runs)}); per step ms: wall {wall:.2f}, engine "
                        f"methods: {split}; wrappers above them {added:.3f}; {steps:.0f} "
                        f"steps, {full_gcs:.0f} full collections a run")
