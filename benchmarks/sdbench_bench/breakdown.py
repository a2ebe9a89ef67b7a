"""Where the observer's host time goes, per step: its wrappers replayed hot on captured real
steps, split by part (replay.py); cProfile's own-time of the observer's functions and of what
they call over attached decode runs (cProfile inflates each call by its own cost); then, on
CUDA, the event calls timed bare in a loop."""

from __future__ import annotations

import cProfile
import pstats
import time
from pathlib import Path

from pytest_sdbench.measure.runs import sampling_params

from . import replay
from .probes import decode_prompts, observed

# the engine methods the observer wraps (some under torch's decorator): not its own time
WRAPPED = frozenset({"schedule", "update_from_output", "execute_model", "sample_tokens",
                     "dispatch", "decorate_context"})


def run(bench) -> None:
    for batch in bench.sizes.overhead_batches:
        try:
            replay.run(bench, batch)
        except Exception as exc:  # noqa: BLE001 (a failed replay must not hide the rest)
            bench.table.error(f"B={batch}: observer wrappers replayed hot", exc)
        observer_breakdown(bench, batch)
    if bench.engine.device == "cuda":
        event_calls(bench)


# what the observer's wrappers call in engine/step_reading.py (the rest of that module
# runs at attach() or after the window, off their path)
READING_ON_THE_PATH = frozenset({"freeze_schedule", "freeze_output"})


def _ours(key) -> bool:
    return key[0].endswith(("measure/observer.py", "measure/iteration.py", "measure/timing.py")) \
        or (key[0].endswith("engine/step_reading.py") and key[2] in READING_ON_THE_PATH)


def observer_breakdown(bench, batch: int) -> None:
    engine, sizes = bench.engine, bench.sizes
    profiler = cProfile.Profile()
    for _ in range(bench.rounds):
        prompts = decode_prompts(engine, batch, sizes.context)
        with observed(engine):
            profiler.enable()
            engine.generate(prompts, sampling_params(sizes.tokens))
            profiler.disable()
    stats = pstats.Stats(profiler).stats
    spent: dict[str, float] = {}  # the observer's own time, and what it calls (engine excluded)
    for key, (_, _, own, _, callers) in stats.items():
        if _ours(key):
            where = f"{Path(key[0]).name}:{key[1]}({key[2]})"
            spent[where] = spent.get(where, 0.0) + own
        elif key[2] not in WRAPPED:
            called = sum(ct for caller, (_, _, _, ct) in callers.items() if _ours(caller))
            if called:
                spent[key[2]] = spent.get(key[2], 0.0) + called
    steps = max((n for key, (n, *_r) in stats.items() if key[2] == "schedule"), default=1)
    bench.table.row(f"observer breakdown B={batch} (cProfile, {steps} steps)",
                    f"{1e6 * sum(spent.values()) / steps:.1f} us a step under the profiler; "
                    "largest: " + ", ".join(f"{where} {1e6 * t / steps:.1f} us" for where, t in
                                            sorted(spent.items(), key=lambda kv: -kv[1])[:10]))


def event_calls(bench, loops: int = 2000) -> None:
    import torch

    def each(fn) -> float:
        started = time.perf_counter()
        for _ in range(loops):
            fn()
        return 1e6 * (time.perf_counter() - started) / loops
    stream = torch.cuda.current_stream()
    ready = torch.cuda.Event(enable_timing=True)
    ready.record(stream)
    later = torch.cuda.Event(enable_timing=True)
    later.record(stream)
    torch.cuda.synchronize()
    import ctypes

    from pytest_sdbench.measure.timing import driver_record, event_record
    record, raw = event_record(torch.cuda.Event), driver_record()
    device, lookup = torch._C._cuda_getDevice, torch._C._cuda_getCurrentStream
    handles = ctypes.c_void_p(ready.cuda_event), ctypes.c_void_p(stream.cuda_stream)
    costs = {
        "torch.cuda.current_stream()": each(torch.cuda.current_stream),
        "C stream lookup (the timer's, a step)": each(lambda: lookup(device())),
        "C Event.record(stream) (releases the GIL)": each(lambda: record(ready, stream)),
        "cuEventRecord via ctypes.PyDLL (GIL held; the timer's)": each(
            lambda: raw(*handles)) if raw is not None else float("nan"),
        "Event.record() (reads the current stream)": each(ready.record),
        "Event.record(stream)": each(lambda: ready.record(stream)),
        "Event() + first record (creates the CUDA event)": each(
            lambda: torch.cuda.Event(enable_timing=True).record(stream)),
        "Event.query() (completed)": each(ready.query),
        "Event.elapsed_time()": each(lambda: ready.elapsed_time(later)),
        "time.perf_counter()": each(time.perf_counter),
    }
    torch.cuda.synchronize()
    bench.table.row("CUDA event calls, bare (us a call)",
                    ", ".join(f"{k} {v:.2f}" for k, v in costs.items()))
