"""Timing fidelity, per decode point, over the steps of one decode run: the native step
time vs the same interval read from a torch.profiler trace (CUPTI's clock), vs the steps'
kernel span alone (what the native interval adds is the head where the idle stream waits
for the host to prepare the step), and vs scheduler wall time (schedule ->
update_from_output)."""

from __future__ import annotations

import contextlib
import statistics
import time
from unittest.mock import patch

from pytest_sdbench.engine import compat
from pytest_sdbench.measure.observer import STAMP_ATTR
from pytest_sdbench.measure.runs import sampling_params

from .goals import FIDELITY
from .probes import decode_prompts, observed
from .trace import kernel_seconds, profiler_events, step_intervals, step_range_name, step_spans


@contextlib.contextmanager
def annotated_steps(worker):
    """Benchmark-only wrappers: a profiler range per step, opened in execute_model and closed
    in sample_tokens, so that the trace holds each step's GPU span (gpu_user_annotation)."""
    from torch.profiler import record_function
    execute, sample = worker.execute_model, worker.sample_tokens
    open_ranges = []

    def execute_model(scheduler_output, *a, **k):
        scope = record_function(step_range_name(getattr(scheduler_output, STAMP_ATTR, None)))
        scope.__enter__()
        output = execute(scheduler_output, *a, **k)
        if output is None:
            open_ranges.append(scope)
        else:
            scope.__exit__(None, None, None)
        return output

    def sample_tokens(*a, **k):
        output = sample(*a, **k)
        if open_ranges:
            open_ranges.pop(0).__exit__(None, None, None)
        return output
    with patch.object(worker, "execute_model", execute_model), \
            patch.object(worker, "sample_tokens", sample_tokens):
        yield


@contextlib.contextmanager
def scheduler_walls(sched, walls: dict[int, float]):
    """Above the observer (they read the stamped ID): seconds from schedule() returning a
    step to update_from_output() receiving it, by native ID."""
    emitted: dict[int, float] = {}
    schedule, update = sched.schedule, sched.update_from_output

    def timed_schedule(*a, **k):
        out = schedule(*a, **k)
        emitted[getattr(out, STAMP_ATTR)] = time.perf_counter()
        return out

    def timed_update(so, mro, *a, **k):
        iid = getattr(so, STAMP_ATTR, None)
        if iid in emitted:
            walls[iid] = time.perf_counter() - emitted[iid]
        return update(so, mro, *a, **k)
    with patch.object(sched, "schedule", timed_schedule), \
            patch.object(sched, "update_from_output", timed_update):
        yield


def run(bench) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile
    engine, sizes, table = bench.engine, bench.sizes, bench.table
    cuda = engine.device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    interval_errors, wall_bias = [], []
    for b, c in sizes.fidelity_points:
        prompts = decode_prompts(engine, b, c)
        engine.generate(decode_prompts(engine, b, c), sampling_params(sizes.fidelity_tokens))
        walls: dict[int, float] = {}
        with observed(engine) as window:
            with scheduler_walls(compat.scheduler(engine.llm), walls), \
                    annotated_steps(compat.worker(engine.llm)), \
                    profile(activities=activities) as prof:
                engine.generate(prompts, sampling_params(sizes.fidelity_tokens))
                if cuda:
                    torch.cuda.synchronize()
        steps = [r for r in window.records if r.snapshot.requests]
        native = sum(r.timing.seconds for r in steps)
        wall = sum(walls.get(r.native_iteration_id, 0.0) for r in steps)
        wall_bias.append(wall / native - 1)
        figures = [f"native {native * 1e3:.2f} ms"]
        if cuda:
            spans = step_spans(profiler_events(prof))
            intervals = step_intervals(spans)
            both = [r for r in steps if r.native_iteration_id in intervals]
            if both:
                n = sum(r.timing.seconds for r in both)
                t = sum(intervals[r.native_iteration_id] for r in both)
                k = sum(kernel_seconds(spans[r.native_iteration_id]) for r in both)
                interval_errors.append(abs(n / t - 1))
                figures.append(f"trace interval of the same {len(both)} steps {t * 1e3:.2f} ms "
                               f"(native {100 * (n / t - 1):+.2f}%)")
                figures.append(f"their kernel span alone {k * 1e3:.2f} ms (head waiting on "
                               f"the host {1e3 * (n - k) / len(both):.3f} ms a step)")
            else:
                figures.append("trace intervals unavailable (no gpu_user_annotation)")
        figures.append(f"scheduler wall {wall * 1e3:.2f} ms ({100 * (wall / native - 1):+.1f}%)")
        table.row(f"fidelity B={b} ctx={c} ({len(steps)} steps, profiled)", "; ".join(figures))
    if interval_errors:
        med = statistics.median(interval_errors)
        table.row("fidelity: median |native / trace interval - 1| over points",
                  f"{100 * med:.2f}%", (FIDELITY, 100 * med))
    table.row("fidelity: median scheduler wall-time bias vs native",
              f"{100 * statistics.median(wall_bias):+.1f}%")
