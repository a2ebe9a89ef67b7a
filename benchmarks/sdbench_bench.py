"""Performance and fidelity of pytest-sdbench's native observation, measured side by side in
one process, printed as one table. A benchmark, not a test: it asserts nothing.

    python benchmarks/sdbench_bench.py                     # CPU: the tiny preset
    python benchmarks/sdbench_bench.py --preset qwen3-0.6b --cuda-graphs --acceptance-length 2.78

Rows:
 1. observer overhead: decode tokens/s with the observer attached vs detached, alternated
 2. hot-path synchronisations per step added by the observer (torch's sync debug mode)
 3. timing fidelity per decode point: native step time vs the same interval read from a
    torch.profiler trace, vs the kernel span alone, and vs scheduler wall time
 4. repeatability: two back-to-back collections of the same grid
 5. collection cost: wall time and duty cycle of the default agg grid after engine start
 6. suite cost (with --suite): wall time of the test suite in a subprocess
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_sdbench.collector import Collector, sampling_params  # noqa: E402
from pytest_sdbench.contract import BOOKING_MEASURED  # noqa: E402
from pytest_sdbench.engine import compat, start_engine  # noqa: E402
from pytest_sdbench.observer import STAMP_ATTR, NativeObserver, timer_for  # noqa: E402
from pytest_sdbench.session import GRAPH_BATCHES, engine_spec, grid_for  # noqa: E402

ROWS: list[tuple[str, str, str, str]] = []  # (measure, figure, goal, verdict)


def row(measure: str, figure: str, goal: str = "", met: bool | None = None) -> None:
    verdict = "" if met is None else ("met" if met else "MISSED")
    ROWS.append((measure, figure, goal, verdict))
    print(f"  {measure}: {figure} {('(goal ' + goal + ') ' + verdict) if goal else ''}",
          flush=True)


def decode_prompts(engine, batch: int, context: int) -> list[list[int]]:
    """Fresh prompts from the engine's own stream: none repeats, so none is a cache hit."""
    return [engine.fresh_tokens(context) for _ in range(batch)]


@contextlib.contextmanager
def observed(engine, timer=None, window: bool = True, dispatch: bool = True):
    """The native observer attached for one run, a measured window open. The switches exist
    for the ablation only (none of those variants is a valid profile)."""
    saved = compat.graph_dispatcher
    if not dispatch:
        compat.graph_dispatcher = lambda llm: None
    try:
        observer = NativeObserver(engine.llm, timer or timer_for(engine.device)).attach()
    finally:
        compat.graph_dispatcher = saved
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


def _rates(runs: list[Run]) -> str:
    return " ".join(f"{run.rate:.0f}" for run in runs)


def _paired(a: list[Run], b: list[Run]) -> str:
    """Per-round ratios a/b (neighbouring runs), as median and range."""
    ratios = sorted(x.rate / y.rate for x, y in zip(a, b))
    return (f"per-round ratio median {100 * statistics.median(ratios):.1f}%, range "
            f"{100 * ratios[0]:.1f}%..{100 * ratios[-1]:.1f}%")


def observer_overhead(engine, rounds: int, batch: int, context: int, tokens: int) -> None:
    """The throughput ratio (the goal), the same ratio between two identical detached sides
    (the run-to-run noise floor it is read against), and the host time the observer's
    wrappers add a step, measured directly."""
    results = alternated(engine, {"attached": observed, "detached": None,
                                  "detached again": None}, rounds, batch, context, tokens)
    attached, detached, again = (results[k] for k in ("attached", "detached",
                                                      "detached again"))
    for name, runs in results.items():
        print(f"    {name} tok/s: {_rates(runs)}", flush=True)
    med = {k: statistics.median(run.rate for run in runs) for k, runs in results.items()}
    ratio = med["attached"] / med["detached"]
    row(f"B={batch}: decode throughput, observer attached / detached",
        f"{med['attached']:.1f} / {med['detached']:.1f} tok/s = {100 * ratio:.2f}% (medians "
        f"of {rounds} alternated runs each, ctx={context}, {tokens} tokens; "
        f"{_paired(attached, detached)})", ">= 99.5%", ratio >= 0.995)
    row(f"B={batch}: noise floor, detached / detached again (identical sides, alternated)",
        f"{100 * med['detached'] / med['detached again']:.2f}% "
        f"({_paired(detached, again)})")
    probes = statistics.median(run.added_per_step for run in detached + again)
    added = statistics.median(run.added_per_step for run in attached) - probes
    step = statistics.median(run.wall / run.engine.steps for run in attached)
    row(f"B={batch}: observer host time a step (probe above it minus probe beneath it, less "
        "the probes' own)",
        f"{1e6 * added:.1f} us of a {1e3 * step:.2f} ms step = {100 * added / step:.3f}% "
        f"(probes alone {1e6 * probes:.1f} us a step)")


def overhead_ablation(engine, rounds: int, batch: int, context: int, tokens: int) -> None:
    """Where observer overhead comes from: variants of the observer, each run with its host
    time split by engine method and garbage-collection pauses (isolation only)."""
    from pytest_sdbench.observer import HostTimer
    variants = {
        "detached": None,
        "full": observed,
        "stamp only (no window)": lambda e: observed(e, window=False),
        "host timer": lambda e: observed(e, timer=HostTimer()),
        "no dispatch wrapper": lambda e: observed(e, dispatch=False),
        "detached, gc off": lambda e: gc_disabled(contextlib.nullcontext()),
        "full, gc off": lambda e: gc_disabled(observed(e)),
    }
    results = alternated(engine, variants, rounds, batch, context, tokens)
    base = statistics.median(run.rate for run in results["detached"])
    parts = ["schedule", "execute_model", "sample_tokens", "update_from_output", "gc"]
    for name, runs in results.items():
        rate = statistics.median(run.rate for run in runs)
        per_step = {part: statistics.median(1e3 * run.engine.seconds.get(part, 0.0) /
                                            run.engine.steps for run in runs) for part in parts}
        wall = statistics.median(1e3 * run.wall / run.engine.steps for run in runs)
        added = statistics.median(1e3 * run.added_per_step for run in runs)
        steps = statistics.median(run.engine.steps for run in runs)
        full_gcs = statistics.median(run.engine.collections[2] for run in runs)
        split = ", ".join(f"{part} {ms:.2f}" for part, ms in per_step.items())
        row(f"ablation: {name}", f"{rate:.1f} tok/s = {100 * rate / base:.2f}% of detached "
            f"({_rates(runs)}); per step ms: wall {wall:.2f}, engine methods: {split}; "
            f"wrappers above them {added:.3f}; {steps:.0f} steps, {full_gcs:.0f} full "
            "collections a run")


def observer_breakdown(engine, runs: int, batch: int, context: int, tokens: int) -> None:
    """Where the observer's host time goes, per step: cProfile's own-time of the observer's
    functions and of the CUDA event calls over attached decode runs (cProfile inflates each
    call by its own cost), then the event calls timed bare in a loop."""
    import cProfile
    import pstats
    profiler = cProfile.Profile()
    for _ in range(runs):
        prompts = decode_prompts(engine, batch, context)
        with observed(engine):
            profiler.enable()
            engine.generate(prompts, sampling_params(tokens))
            profiler.disable()
    stats = pstats.Stats(profiler).stats
    # the engine methods the observer wraps (some under torch's decorator): not its own time
    wrapped = {"schedule", "update_from_output", "execute_model", "sample_tokens", "dispatch",
               "decorate_context"}

    def ours(key) -> bool:
        return "pytest_sdbench/observer" in key[0] or key[0].endswith("engine/compat.py")
    spent: dict[str, float] = {}  # the observer's own time, and what it calls (engine excluded)
    for key, (_, _, own, _, callers) in stats.items():
        if ours(key):
            where = f"{Path(key[0]).name}:{key[1]}({key[2]})"
            spent[where] = spent.get(where, 0.0) + own
        elif key[2] not in wrapped:
            called = sum(ct for caller, (_, _, _, ct) in callers.items() if ours(caller))
            if called:
                spent[key[2]] = spent.get(key[2], 0.0) + called
    steps = max((n for key, (n, *_r) in stats.items() if key[2] == "schedule"), default=1)
    row(f"observer breakdown B={batch} (cProfile, {steps} steps)",
        f"{1e6 * sum(spent.values()) / steps:.1f} us a step under the profiler; largest: " +
        ", ".join(f"{where} {1e6 * t / steps:.1f} us" for where, t in
                  sorted(spent.items(), key=lambda kv: -kv[1])[:10]))
    if engine.device != "cuda":
        return
    import torch
    loops = 2000

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
    costs = {
        "torch.cuda.current_stream()": each(torch.cuda.current_stream),
        "Event.record() (reads the current stream)": each(ready.record),
        "Event.record(stream)": each(lambda: ready.record(stream)),
        "Event() + first record (creates the CUDA event)": each(
            lambda: torch.cuda.Event(enable_timing=True).record(stream)),
        "Event.query() (completed)": each(ready.query),
        "Event.elapsed_time()": each(lambda: ready.elapsed_time(later)),
        "time.perf_counter()": each(time.perf_counter),
    }
    torch.cuda.synchronize()
    row("CUDA event calls, bare (us a call)", ", ".join(f"{k} {v:.2f}" for k, v in
                                                        costs.items()))


def sync_count(engine, batch: int, context: int, tokens: int) -> None:
    if engine.device != "cuda":
        row("host-device syncs added per step", "n/a: no device on CPU")
        return
    import torch

    def count(with_observer: bool) -> tuple[int, int, int]:
        """Syncs and steps of one decode run; with the observer, a measured window is open,
        so every step is frozen and timed (the window's drain, at idle, is outside the
        counted run on purpose). Also returns the timing samples the window got."""
        prompts = decode_prompts(engine, batch, context)
        with HostProfile(engine).installed() as host, \
                (observed(engine) if with_observer else contextlib.nullcontext()) as window:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    engine.generate(prompts, sampling_params(tokens))
                finally:
                    torch.cuda.set_sync_debug_mode("default")
        syncs = sum("synchroniz" in str(w.message) for w in caught)
        timed = sum(r.timing is not None for r in window.records) if window else 0
        return syncs, host.steps, timed

    with warnings.catch_warnings(record=True) as caught:  # the method must see a real sync
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            torch.ones(1, device="cuda").item()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    control = sum("synchroniz" in str(w.message) for w in caught)
    count(False)
    base, base_steps, _ = count(False)
    obs, obs_steps, timed = count(True)
    per_step = obs / max(obs_steps, 1) - base / max(base_steps, 1)
    row("host-device syncs added per step (torch sync debug mode)",
        f"{per_step:+.3f} (engine alone {base} in {base_steps} steps; with the observer "
        f"recording {obs} in {obs_steps} steps, {timed} of them timed; positive control: "
        f"one .item() counted {control})", "0",
        abs(per_step) < 1e-9 and control >= 1 and timed > 0)


@contextlib.contextmanager
def _annotated_steps(worker):
    """Benchmark-only wrappers: a profiler range per step, opened in execute_model and closed
    in sample_tokens, so that the trace holds each step's GPU span (gpu_user_annotation)."""
    from torch.profiler import record_function
    execute, sample = worker.execute_model, worker.sample_tokens
    open_ranges = []

    def execute_model(scheduler_output, *a, **k):
        iid = getattr(scheduler_output, STAMP_ATTR, None)
        scope = record_function(f"sdbench_step_{iid}")
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


def _trace_steps(prof) -> dict[int, tuple[float, float, float]]:
    """Per annotated step, from the trace (microseconds, one clock): when the host entered
    the step (CPU range start), and the first and last instant of its kernels (the step's GPU
    annotation may come in several pieces: take their outer bounds)."""
    from torch.autograd import DeviceType
    host: dict[int, float] = {}
    device: dict[int, tuple[float, float]] = {}
    for event in prof.events():
        if not event.name.startswith("sdbench_step_"):
            continue
        iid = event.name.rsplit("_", 1)[-1]
        if not iid.isdigit():
            continue
        start, end = event.time_range.start, event.time_range.end
        if event.device_type == DeviceType.CUDA:
            lo, hi = device.get(int(iid), (start, end))
            device[int(iid)] = (min(lo, start), max(hi, end))
        elif event.device_type == DeviceType.CPU:
            host[int(iid)] = min(host.get(int(iid), start), start)
    return {iid: (host[iid], *device[iid]) for iid in device if iid in host}


def _trace_intervals(steps: dict[int, tuple[float, float, float]]) -> dict[int, float]:
    """Seconds each step holds the stream by the trace's own clock, by the definition the
    native events follow: the step starts when the host enters it or, when the stream is
    still busy with the previous step, when that step's last kernel ends; it ends with its
    own last kernel."""
    intervals, previous_end = {}, None
    for iid in sorted(steps):
        entered, _, last = steps[iid]
        start = entered if previous_end is None else max(entered, previous_end)
        intervals[iid] = (last - start) / 1e6
        previous_end = last
    return intervals


def fidelity(engine, points, tokens: int) -> None:
    """Per point, over the steps of one decode run: the native step time vs the same interval
    read from a torch.profiler trace (CUPTI's clock), vs the steps' kernel span alone (what
    the native interval adds is the head where the idle stream waits for the host to prepare
    the step), and vs scheduler wall time (schedule -> update_from_output)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    cuda = engine.device == "cuda"
    interval_errors, wall_bias = [], []
    for b, c in points:
        prompts = decode_prompts(engine, b, c)
        engine.generate(decode_prompts(engine, b, c), sampling_params(tokens))
        sched = compat.scheduler(engine.llm)
        emitted: dict[int, float] = {}
        walls: dict[int, float] = {}

        def timed_schedule(schedule):  # above the observer: it reads the stamped ID
            def timed(*a, **k):
                out = schedule(*a, **k)
                emitted[getattr(out, STAMP_ATTR)] = time.perf_counter()
                return out
            return timed

        def timed_update(update):
            def timed(so, mro, *a, **k):
                iid = getattr(so, STAMP_ATTR, None)
                if iid in emitted:
                    walls[iid] = time.perf_counter() - emitted[iid]
                return update(so, mro, *a, **k)
            return timed
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with observed(engine) as window:
            with patch.object(sched, "schedule", timed_schedule(sched.schedule)), \
                    patch.object(sched, "update_from_output",
                                 timed_update(sched.update_from_output)), \
                    _annotated_steps(compat.worker(engine.llm)), \
                    profile(activities=activities) as prof:
                engine.generate(prompts, sampling_params(tokens))
                if cuda:
                    torch.cuda.synchronize()
        steps = [r for r in window.records if r.snapshot.requests]
        native = sum(r.timing.seconds for r in steps)
        wall = sum(walls.get(r.native_iteration_id, 0.0) for r in steps)
        wall_bias.append(wall / native - 1)
        figures = [f"native {native * 1e3:.2f} ms"]
        if cuda:
            traced = _trace_steps(prof)
            intervals = _trace_intervals(traced)
            both = [r for r in steps if r.native_iteration_id in intervals]
            if both:
                n = sum(r.timing.seconds for r in both)
                t = sum(intervals[r.native_iteration_id] for r in both)
                k = sum(traced[r.native_iteration_id][2] - traced[r.native_iteration_id][1]
                        for r in both) / 1e6
                interval_errors.append(abs(n / t - 1))
                figures.append(f"trace interval of the same {len(both)} steps {t * 1e3:.2f} ms "
                               f"(native {100 * (n / t - 1):+.2f}%)")
                figures.append(f"their kernel span alone {k * 1e3:.2f} ms (head waiting on "
                               f"the host {1e3 * (n - k) / len(both):.3f} ms a step)")
            else:
                figures.append("trace intervals unavailable (no gpu_user_annotation)")
        figures.append(f"scheduler wall {wall * 1e3:.2f} ms ({100 * (wall / native - 1):+.1f}%)")
        row(f"fidelity B={b} ctx={c} ({len(steps)} steps, profiled)", "; ".join(figures))
    if interval_errors:
        med = statistics.median(interval_errors)
        row("fidelity: median |native / trace interval - 1| over points", f"{100 * med:.2f}%",
            "<= 2%", med <= 0.02)
    row("fidelity: median scheduler wall-time bias vs native",
        f"{100 * statistics.median(wall_bias):+.1f}%")


def repeatability_and_cost(engine) -> None:
    grid = grid_for(engine)
    first = Collector(engine).collect("agg", grid)
    second = Collector(engine).collect("agg", grid)

    def by_point(run):
        return {(phase, o.point_index): o for phase, observations in
                (("prefill", run.prefill), ("decode", run.decode)) for o in observations}
    a, b = by_point(first), by_point(second)
    diffs = {k: abs(b[k].timing.seconds / a[k].timing.seconds - 1) for k in a if k in b}
    med = statistics.median(diffs.values())
    for k in sorted(diffs, key=diffs.get, reverse=True)[:4]:
        print(f"    widest: {k[0]}[{k[1]}] {a[k].timing.seconds * 1e3:.3f} ms "
              f"({a[k].graph_mode}) then {b[k].timing.seconds * 1e3:.3f} ms "
              f"({b[k].graph_mode})", flush=True)
    row("repeatability: median |per-point difference|, two back-to-back agg collections",
        f"{100 * med:.2f}% over {len(diffs)} points (max {100 * max(diffs.values()):.1f}%)",
        "<= 2%",
        med <= 0.02)
    for name, run in (("first", first), ("second", second)):
        row(f"collection cost, default agg grid ({name})",
            f"{run.elapsed_seconds:.1f} s wall for {len(grid)} points; duty cycle "
            f"{run.timed_seconds / run.elapsed_seconds:.2f} (all timed steps) / "
            f"{run.measured_seconds / run.elapsed_seconds:.3f} (retained steps only)",
            "<= 180 s, duty >= 0.5",
            run.elapsed_seconds <= 180 and run.timed_seconds / run.elapsed_seconds >= 0.5)


def suite_cost(command: list[str]) -> None:
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    tail = (result.stdout.strip().splitlines() or ["?"])[-1]
    row(f"suite cost: {' '.join(command)}", f"{wall:.1f} s wall, exit {result.returncode}: "
        f"{tail}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="auto")
    parser.add_argument("--cuda-graphs", action="store_true")
    parser.add_argument("--acceptance-length", type=float)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--syncs", action="store_true",
                        help="only the hot-path synchronisation count")
    parser.add_argument("--breakdown", action="store_true",
                        help="only where the observer's host time goes")
    parser.add_argument("--ablation", action="store_true",
                        help="only the observer-overhead ablation")
    parser.add_argument("--suite", nargs=argparse.REMAINDER,
                        help="a test-suite command to time, e.g. --suite pytest -q")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    spec = engine_spec(preset=args.preset, cuda_graphs=args.cuda_graphs,
                       acceptance_length=args.acceptance_length)
    engine = start_engine(spec)
    print(f"engine: preset {spec.preset} on {engine.device} "
          f"({engine.identity.device_name.value}), vLLM {engine.identity.engine_version.value}, "
          f"K={spec.draft_depth}, graphs {not spec.enforce_eager}, acceptance "
          f"{engine.acceptance_control} {spec.synthetic_acceptance_length or ''}, started in "
          f"{engine.start_seconds:.1f} s", flush=True)
    print(f"process: threads {[t.name for t in threading.enumerate()]}; gc thresholds "
          f"{gc.get_threshold()}, frozen objects {gc.get_freeze_count()}, tracked "
          f"{len(gc.get_objects())}", flush=True)
    large = spec.preset != "tiny"
    batch, context, tokens = (8, 256, 128) if large else (4, 128, 48)
    # on the qwen3 preset: the largest batch the graph engine captures, and one beyond it
    overhead_batches = (max(GRAPH_BATCHES), batch) if large else (batch,)
    syncs = ("hot-path syncs", lambda: sync_count(engine, batch, context, 32))
    sections = [
        *((f"observer overhead B={b}", lambda b=b: observer_overhead(
            engine, args.rounds, b, context, tokens)) for b in overhead_batches),
        syncs,
        ("fidelity", lambda: fidelity(engine, [(1, 256), (4, 256), (8, 256)] if large
                                      else [(1, 128), (4, 128)], tokens=32)),
        ("repeatability and cost", lambda: repeatability_and_cost(engine)),
    ]
    if args.syncs:
        sections = [syncs]
    if args.breakdown:
        sections = [(f"observer breakdown B={b}", lambda b=b: observer_breakdown(
            engine, args.rounds, b, context, tokens)) for b in overhead_batches]
    if args.ablation:
        sections = [("overhead ablation", lambda: overhead_ablation(
            engine, args.rounds, batch, context, tokens))]
    try:
        for name, run in sections:
            try:
                run()
            except Exception as exc:  # one broken measure must not hide the others
                row(name, f"ERROR {type(exc).__name__}: {exc}")
    finally:
        engine.shutdown()
    if args.suite:
        suite_cost(args.suite)
    print()
    width = max(len(r[0]) for r in ROWS)
    print(f"{'measure':<{width}} | figure | goal | verdict")
    for measure, figure, goal, verdict in ROWS:
        print(f"{measure:<{width}} | {figure} | {goal} | {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
