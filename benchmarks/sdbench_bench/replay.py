"""The observer's wrappers timed hot, on real steps without the engine around them: the
SchedulerOutputs and ModelRunnerOutputs of one decode run are captured from the engine
(copied as schedule() emitted them and as update_from_output() received them), then replayed
through stand-in scheduler and worker objects, bare and with the observer attached (a window
open, the engine's own timer: CUDA events on the current stream on a GPU), and with one part
of the observer's work left out at a time. The differences split the wrappers' cost by part,
free of the engine's noise; the engine's caches are not cold here as they are in a real step,
so the in-place figure (overhead) is larger. The V2 runner's graph dispatch is not replayed."""

from __future__ import annotations

import contextlib
import copy
import gc
import time
from types import SimpleNamespace
from unittest.mock import patch

from pytest_sdbench.engine import compat, step_reading
from pytest_sdbench.measure.observer import NativeObserver, TimingMissing
from pytest_sdbench.measure.runs import sampling_params
from pytest_sdbench.measure.timing import timer_for
from pytest_sdbench.wire.contract import BOOKING_MEASURED

from .probes import decode_prompts

CAPTURE_ATTR = "_sdbench_bench_capture"


class _Steps:
    """One captured run: per step the SchedulerOutput as emitted, the scheduler's requests
    and queues then, and the ModelRunnerOutput as update_from_output() received it."""

    def __init__(self):
        self.steps: list[list] = []


def capture(engine, batch: int, context: int, tokens: int) -> list[list]:
    sched = compat.scheduler(engine.llm)
    captured = _Steps()
    schedule, update = sched.schedule, sched.update_from_output

    def capturing_schedule(*args, **kwargs):
        output = schedule(*args, **kwargs)
        setattr(output, CAPTURE_ATTR, len(captured.steps))
        captured.steps.append([copy.deepcopy(output), dict(sched.requests),
                               list(sched.waiting), list(sched.running), None])
        return output

    def capturing_update(scheduler_output, model_runner_output, *args, **kwargs):
        index = getattr(scheduler_output, CAPTURE_ATTR, None)
        if index is not None:
            captured.steps[index][4] = copy.deepcopy(model_runner_output)
        return update(scheduler_output, model_runner_output, *args, **kwargs)

    with patch.object(sched, "schedule", capturing_schedule), \
            patch.object(sched, "update_from_output", capturing_update):
        engine.generate(decode_prompts(engine, batch, context), sampling_params(tokens))
    return [s for s in captured.steps if s[4] is not None]


class _Scheduler:
    def __init__(self, steps):
        self.steps, self.i = steps, 0
        self.requests: dict = {}
        self.waiting: list = []
        self.running: list = []

    def schedule(self, *args):
        output, self.requests, self.waiting, self.running, _ = self.steps[self.i]
        return output

    def update_from_output(self, scheduler_output, model_runner_output):
        self.i += 1


class _Worker:
    def __init__(self, sched):
        self.sched = sched
        self.model_runner = SimpleNamespace()   # no cudagraph_manager: no dispatch wrapper

    def execute_model(self, scheduler_output, *args):
        return None

    def sample_tokens(self, *args):
        return self.sched.steps[self.sched.i][4]


def _stand_in(steps):
    sched = _Scheduler(steps)
    worker = _Worker(sched)
    core = SimpleNamespace(scheduler=sched, model_executor=SimpleNamespace(driver_worker=worker))
    llm = SimpleNamespace(llm_engine=SimpleNamespace(engine_core=SimpleNamespace(
        engine_core=core)))
    return llm, sched, worker


def _pass(sched, worker) -> int:
    """Nanoseconds for one pass over the captured steps, as the engine core calls them."""
    schedule, execute, sample, update = (sched.schedule, worker.execute_model,
                                         worker.sample_tokens, sched.update_from_output)
    sched.i = 0
    clock = time.perf_counter_ns
    started = clock()
    for _ in range(len(sched.steps)):
        output = schedule(None)
        result = execute(output)
        if result is None:
            result = sample(None)
        update(output, result)
    return clock() - started


class _NullTimer:
    source = "none"

    def start(self, iid): pass

    def stop(self, iid): pass

    def drain(self): return []


def per_step(engine, steps, variant: str | None, passes: int) -> float:
    """Fastest pass's nanoseconds a step: bare (None), or with the observer as `variant`."""
    llm, sched, worker = _stand_in(steps)
    timer = _NullTimer() if variant == "no timer" else timer_for(engine.device)
    best = float("inf")
    for _ in range(passes):
        with contextlib.ExitStack() as stack:
            if variant is not None:
                if variant == "no freeze_schedule":
                    stack.enter_context(patch.object(step_reading, "freeze_schedule",
                                                     lambda output, sched: ()))
                if variant == "no freeze_output":
                    stack.enter_context(patch.object(step_reading, "freeze_output", lambda o: ()))
                observer = NativeObserver(llm, timer).attach()
                stack.callback(observer.detach)
                if variant != "stamp only (no window)":
                    if variant == "no timer":   # no samples: the window's join says so
                        stack.enter_context(contextlib.suppress(TimingMissing))
                    stack.enter_context(observer.window(BOOKING_MEASURED))
            gc.disable()   # the window is settled when the stack closes, after the pass
            try:
                best = min(best, _pass(sched, worker) / len(steps))
            finally:
                gc.enable()
    return best


VARIANTS = ("full", "no freeze_schedule", "no freeze_output", "no timer",
            "stamp only (no window)")


def run(bench, batch: int, passes: int = 200) -> None:
    engine, sizes = bench.engine, bench.sizes
    steps = capture(engine, batch, sizes.context, sizes.tokens)
    bare = per_step(engine, steps, None, passes)
    cost = {v: per_step(engine, steps, v, passes) - bare for v in VARIANTS}
    full = cost["full"]
    parts = {"freeze_schedule": full - cost["no freeze_schedule"],
             "freeze_output": full - cost["no freeze_output"],
             "timer start/stop": full - cost["no timer"],
             "stamping and the wrappers alone (no window open)": cost["stamp only (no window)"]}
    parts["the rest (bookkeeping by native ID)"] = full - sum(parts.values())
    bench.table.row(f"B={batch}: observer wrappers replayed hot ({len(steps)} captured steps, "
                    f"fastest of {passes} passes, bare {bare / 1e3:.2f} us)",
                    f"{full / 1e3:.2f} us a step; of it: " + ", ".join(
                        f"{k} {v / 1e3:.2f}" for k, v in parts.items()))
