"""What the measurements share: the observer attached for one run, host-time probes around
the engine's methods, and decode throughput runs alternated between variants."""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from dataclasses import dataclass
from unittest.mock import patch

from pytest_sdbench.collector import sampling_params
from pytest_sdbench.engine import compat
from pytest_sdbench.observer import NativeObserver, timer_for
from pytest_sdbench.wire.contract import BOOKING_MEASURED


def decode_prompts(engine, batch: int, context: int) -> list[list[int]]:
    """Fresh prompts from the engine's own stream: none repeats, so none is a cache hit."""
    return [engine.fresh_tokens(context) for _ in range(batch)]


@contextlib.contextmanager
def observed(engine, timer=None, window: bool = True, dispatch: bool = True):
    """The native observer attached for one run, a measured window open. The switches exist
    for the ablation only (none of those variants is a valid profile)."""
    with patch.object(compat, "graph_dispatcher", compat.graph_dispatcher if dispatch
                      else lambda llm: None):
        observer = NativeObserver(engine.llm, timer or timer_for(engine.device)).attach()
    try:
        with observer.window(BOOKING_MEASURED) if window else contextlib.nullcontext() as opened:
            yield opened  # the Window (its records are joined when it closes), or None
    finally:
        observer.detach()


@contextlib.contextmanager
def gc_disabled(variant):
    gc.disable()
    try:
        with variant:
            yield
    finally:
        gc.enable()


class HostProfile:
    """Host seconds spent inside four engine methods during one run, measured by a thin
    wrapper around whatever each method is when installed. Installed beneath the observer it
    times the engine's own methods; installed above it, the observer's wrappers too: the
    difference is the host time the observer adds. The beneath layer also sums the
    interpreter's garbage-collection pauses."""
    METHODS = (("scheduler", "schedule"), ("scheduler", "update_from_output"),
               ("worker", "execute_model"), ("worker", "sample_tokens"))

    def __init__(self, engine, gc_pauses: bool = False):
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


@dataclass
class Run:
    rate: float              # decode tokens/s
    wall: float              # seconds
    engine: HostProfile      # beneath the observer: the engine's own methods
    total: HostProfile       # above it: the engine's methods plus the observer's wrappers

    @property
    def added_per_step(self) -> float:
        """Host seconds a step spent in wrappers above the engine's own methods."""
        return (self.total.method_seconds - self.engine.method_seconds) / self.engine.steps


def throughput_with(engine, variant, batch, context, tokens) -> Run:
    """Decode throughput inside `variant(engine)` (a context manager; None: detached). Every
    variant carries the same two host-time probes, one beneath the observer, one above."""
    beneath, above = HostProfile(engine, gc_pauses=True), HostProfile(engine)
    with beneath.installed(), (variant(engine) if variant else contextlib.nullcontext()), \
            above.installed():
        prompts = decode_prompts(engine, batch, context)
        started = time.perf_counter()
        outputs = engine.generate(prompts, sampling_params(tokens))
        wall = time.perf_counter() - started
    produced = sum(len(o.outputs[0].token_ids) for o in outputs)
    return Run(produced / wall, wall, beneath, above)


def alternated(engine, variants: dict, rounds: int, batch, context, tokens) -> dict:
    """Each variant once per round, the order reversed every other round."""
    for variant in variants.values():  # warm-up: every way once, unbooked
        throughput_with(engine, variant, batch, context, tokens)
    results: dict[str, list[Run]] = {name: [] for name in variants}
    for r in range(rounds):
        for name in (list(variants) if r % 2 == 0 else list(reversed(variants))):
            results[name].append(throughput_with(engine, variants[name], batch, context, tokens))
    return results


def rates(runs: list[Run]) -> str:
    return " ".join(f"{run.rate:.0f}" for run in runs)


def paired(a: list[Run], b: list[Run]) -> str:
    """Per-round ratios a/b (neighbouring runs), as median and range."""
    ratios = sorted(x.rate / y.rate for x, y in zip(a, b, strict=True))
    return (f"per-round ratio median {100 * statistics.median(ratios):.1f}%, range "
            f"{100 * ratios[0]:.1f}%..{100 * ratios[-1]:.1f}%")
