"""The observer's own host cost a step, measured on the engine it runs on.

A thin timing probe wraps the engine's four methods beneath the observer's wrappers and
another wraps them above; the difference is the host time the wrappers add. The same two
probes with nothing between them give the probes' own cost, which is taken off. This is the
probe the benchmark's `overhead` section uses (benchmarks/sdbench_bench); measure() is a
lighter run of it: a few real steps of a small probe run, rounds alternated, garbage
collection paused as during a collected point.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from unittest.mock import patch

from ..engine import compat
from ..engine.surface import InProcessEngine
from ..wire.contract import BOOKING_UNBOOKED, GENERATION_SAMPLING, OBSERVER_COST_METHOD
from ..wire.records import ObserverCost
from .observer import NativeObserver
from .timing import timer_for

WRAPPED = (("scheduler", "schedule"), ("scheduler", "update_from_output"),
           ("worker", "execute_model"), ("worker", "sample_tokens"))


class HostProfile:
    """Host seconds spent inside the engine's four wrapped methods during one run, measured
    by a thin wrapper around whatever each method is when installed. Installed beneath the
    observer it times the engine's own methods; installed above it, the observer's wrappers
    too: the difference is the host time the observer adds. With gc_pauses it also sums the
    interpreter's garbage-collection pauses."""
    METHODS = WRAPPED

    def __init__(self, engine: InProcessEngine, gc_pauses: bool = False):
        self._owners = {"scheduler": compat.scheduler(engine.llm),
                        "worker": compat.worker(engine.llm)}
        self._gc_pauses = gc_pauses
        self.seconds: dict[str, float] = {}
        self.steps = 0
        self.collections = [0, 0, 0]
        self._gc_started = 0.0

    @property
    def method_seconds(self) -> float:
        return sum(self.seconds.get(name, 0.0) for _, name in self.METHODS)

    def _timed(self, name, original):
        def timed(*a, **k):
            if name == "schedule":
                self.steps += 1
            started = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
        return timed

    def _on_gc(self, phase, info):
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.seconds["gc"] = self.seconds.get("gc", 0.0) + time.perf_counter() - \
                self._gc_started
            self.collections[info["generation"]] += 1

    @contextlib.contextmanager
    def installed(self):
        with contextlib.ExitStack() as stack:
            for owner, name in self.METHODS:
                obj = self._owners[owner]
                stack.enter_context(patch.object(obj, name, self._timed(name,
                                                                       getattr(obj, name))))
            if self._gc_pauses:
                gc.callbacks.append(self._on_gc)
                stack.callback(gc.callbacks.remove, self._on_gc)
            yield self


def added_seconds(beneath: HostProfile, above: HostProfile) -> float:
    """Host seconds a step spent between the two probes (the probes' own cost included)."""
    return (above.method_seconds - beneath.method_seconds) / max(beneath.steps, 1)


def _probe_run(engine: InProcessEngine, prompts, params, observed: bool) -> tuple[float, int]:
    """(host seconds a step between the probes, steps) of one run of the prompts."""
    beneath, above = HostProfile(engine), HostProfile(engine)
    with beneath.installed():
        observer = NativeObserver(engine.llm, timer_for(engine.device)).attach() \
            if observed else None
        try:
            with above.installed(), (observer.window(BOOKING_UNBOOKED) if observer
                                     else contextlib.nullcontext()):
                engine.generate(prompts, params)
        finally:
            if observer is not None:
                observer.detach()
    return added_seconds(beneath, above), beneath.steps


def measure(engine: InProcessEngine, batch: int = 4, prompt_tokens: int = 64, max_tokens: int = 24,
            rounds: int = 3) -> ObserverCost:
    """The observer's host cost a step on this engine (an in-process SdbenchEngine with no
    observer attached): `rounds` pairs of probe runs (`batch` fresh prompts of
    `prompt_tokens`, `max_tokens` generated), one observed (a window open: every step
    frozen and timed) and one not, in alternating order after one unbooked pair; each
    round's figure is the observed run's probe difference less the unobserved one's."""
    from vllm import SamplingParams
    for name, value in (("batch", batch), ("prompt_tokens", prompt_tokens),
                        ("max_tokens", max_tokens), ("rounds", rounds)):
        if value < 1:
            raise ValueError(f"{name}: must be >= 1, got {value}")
    sched = compat.scheduler(engine.llm)
    wrapped = [name for _, name in WRAPPED if name in vars(sched)]
    if wrapped:
        raise RuntimeError(f"observer cost: the scheduler's {wrapped} are wrapped already (an "
                           "observer attached?); measure on an engine with none")
    params = SamplingParams(max_tokens=max_tokens, **GENERATION_SAMPLING)
    figures: list[float] = []
    steps = 0
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds + 1):
            runs = {}
            for observed in ((True, False) if r % 2 == 0 else (False, True)):
                prompts = [engine.fresh_tokens(prompt_tokens) for _ in range(batch)]
                runs[observed] = _probe_run(engine, prompts, params, observed)
            if r:   # the first pair warms both ways up, unbooked
                figures.append(runs[True][0] - runs[False][0])
                steps += runs[True][1]
    finally:
        gc.enable()
    return ObserverCost(host_seconds_per_step=statistics.median(figures),
                        round_seconds_per_step=tuple(figures), steps=steps, batch_size=batch,
                        method=OBSERVER_COST_METHOD)
