"""What the measurements share: the observer attached for one run, host-time probes around
the engine's methods (pytest_sdbench.measure.observer_cost, the start-up probe's own), and decode
throughput runs alternated between variants."""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from dataclasses import dataclass
from unittest.mock import patch

from pytest_sdbench.engine import step_reading
from pytest_sdbench.measure.observer import NativeObserver
from pytest_sdbench.measure.observer_cost import HostProfile, added_seconds
from pytest_sdbench.measure.runs import sampling_params
from pytest_sdbench.measure.timing import timer_for
from pytest_sdbench.wire.contract import BOOKING_MEASURED


def decode_prompts(engine, batch: int, context: int) -> list[list[int]]:
    """Fresh prompts from the engine's own stream: none repeats, so none is a cache hit."""
    return [engine.fresh_tokens(context) for _ in range(batch)]


@contextlib.contextmanager
def observed(engine, timer=None, window: bool = True, dispatch: bool = True):
    """The native observer attached for one run, a measured window open. The switches exist
    for the ablation only (none of those variants is a valid profile)."""
    with patch.object(step_reading, "graph_dispatcher",
                      step_reading.graph_dispatcher if dispatch else lambda llm: None):
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


@dataclass
class Run:
    rate: float              # decode tokens/s
    wall: float              # seconds
    engine: HostProfile      # beneath the observer: the engine's own methods
    total: HostProfile       # above it: the engine's methods plus the observer's wrappers

    @property
    def added_per_step(self) -> float:
        """Host seconds a step spent in wrappers above the engine's own methods."""
        return added_seconds(self.engine, self.total)

    def added_in(self, method: str) -> float:
        """Host seconds a step spent in wrappers above one engine method."""
        return (self.total.seconds.get(method, 0.0) - self.engine.seconds.get(method, 0.0)) \
            / max(self.engine.steps, 1)


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
