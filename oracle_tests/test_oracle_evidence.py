"""Evidence from outside the observer. During a measured run the test reads the engine's own
clocks and state beside the observer, and what the observer recorded must agree with them:

- the timed steps of a generate call fit in the wall time of that call;
- each frozen snapshot's KV tokens are the scheduler's own request state at that iteration,
  and at admission they are the prefix-cache hit that vLLM reports on the request's output;
- native step times agree with the same intervals read from a torch.profiler trace: on CUDA
  the span each step holds the stream (CUPTI's clock), on CPU the host range of the step.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from unittest.mock import patch

import pytest

from pytest_sdbench.engine import compat
from pytest_sdbench.measure.observer import STAMP_ATTR, NativeObserver
from pytest_sdbench.measure.runs import sampling_params
from pytest_sdbench.measure.timing import timer_for
from pytest_sdbench.plugin.testing import (
    annotated_steps,
    restoration_violations,
    traced_step_seconds,
)
from pytest_sdbench.wire.contract import BOOKING_MEASURED

# |native / trace - 1| over the steps of one run. On the H200 the benchmark measured at
# most 3.2% with CUDA graphs and 0.05% eager. On CPU the profiler's range holds the timer
# (native <= trace is asserted exactly); the gap is the host work between range and timer,
# widened by whatever preempts a step inside it (the host's load): -1.8% over a run as a
# rule, -5.6% once in CI. Load preempts a step now and then, not most of them: so on CPU
# the timer covers all but HOST_TRACE_TOLERANCE of its range in at least
# HOST_AGREEING_FRACTION of the steps.
TRACE_TOLERANCE = 0.05
HOST_TRACE_TOLERANCE = 0.10
HOST_AGREEING_FRACTION = 0.75


@contextmanager
def _observer(engine) -> Iterator[NativeObserver]:
    observer = NativeObserver(engine.llm, timer_for(engine.device)).attach()
    try:
        yield observer
    finally:
        observer.detach()



@pytest.fixture(autouse=True)
def _engine_in_this_process(sdbench_engine):
    """These checks read the engine's scheduler, requests and stream in this process; a
    tensor-parallel engine lives in its rank processes (there, every collection's rank
    agreement and each rank's restoration check stand in)."""
    if sdbench_engine.spec.tensor_parallel_size > 1:
        pytest.skip("reads the engine in this process; a tensor-parallel engine lives in its "
                    "rank processes")

def test_timed_steps_fit_in_the_wall_time_of_their_generate_call(sdbench_engine, sdbench_note):
    """Steps run one after another inside generate(), so their times (worker timer or CUDA
    events) can never add up to more than the call's wall time, read here by the test."""
    engine = sdbench_engine
    runs = {"prefill-heavy": ([engine.fresh_tokens(192) for _ in range(4)], 2),
            "decode-heavy": ([engine.fresh_tokens(32) for _ in range(3)], 32)}
    with _observer(engine) as observer:
        for name, (prompts, max_tokens) in runs.items():
            with observer.window(BOOKING_MEASURED) as window:
                started = time.perf_counter_ns()
                engine.generate(prompts, sampling_params(max_tokens))
                wall = (time.perf_counter_ns() - started) / 1e9
            timed = sum(r.timing.seconds for r in window.records)
            sdbench_note(f"{name} generate: {len(window.records)} steps timed "
                         f"{timed * 1e3:.1f} ms within a wall time of {wall * 1e3:.1f} ms")
            assert window.records
            assert 0 < timed <= wall, f"{name}: steps timed {timed} s > the call's {wall} s"
    assert restoration_violations(engine) == []


def test_snapshot_kv_is_the_schedulers_own_request_state(sdbench_engine, sdbench_note):
    """Beside the observer, schedule() is wrapped once more (outside it, so the output is
    already stamped) to read each scheduled request's num_computed_tokens straight from
    vLLM's Request objects: before the call for requests already running (the KV the step
    reads), after it (vLLM has advanced it by the step's scheduled tokens). The snapshot
    the observer froze for that native ID must agree with both. The second call's prompts
    extend the first's, so they are admitted with a prefix-cache hit, which vLLM reports on
    each output as num_cached_tokens."""
    engine = sdbench_engine
    sched = compat.scheduler(engine.llm)
    # native id -> request id -> (computed before, if running; computed after)
    state: dict[int, dict[str, tuple[int | None, int]]] = {}
    block = engine.block_size
    seeds = [engine.fresh_tokens(4 * block) for _ in range(2)]
    calls = [seeds, [seed + engine.fresh_tokens(block) for seed in seeds]]
    checked = 0
    with _observer(engine) as observer:
        stamped = sched.schedule

        def schedule(*args, **kwargs):
            before = {r.request_id: r.num_computed_tokens for r in sched.running}
            output = stamped(*args, **kwargs)
            state[getattr(output, STAMP_ATTR)] = {
                rid: (before.get(rid), sched.requests[rid].num_computed_tokens)
                for rid in output.num_scheduled_tokens}
            return output

        with patch.object(sched, "schedule", schedule):
            for call, prompts in enumerate(calls):
                with observer.window(BOOKING_MEASURED) as window:
                    outputs = engine.generate(prompts, sampling_params(8))
                admitted: dict[str, int] = {}
                for record in window.records:
                    snapshot = record.snapshot   # as frozen, before any async correction
                    engine_state = state[record.native_iteration_id]
                    where = f"call {call}, iteration {record.native_iteration_id}"
                    assert {r.request_id for r in snapshot.requests} == set(engine_state), where
                    for r in snapshot.requests:
                        before, after = engine_state[r.request_id]
                        if before is not None:
                            assert r.kv_tokens == before, f"{where}: {r.request_id}"
                        assert r.kv_tokens + r.new_tokens + r.draft_tokens == after, \
                            f"{where}: {r.request_id} snapshot {r}, engine computed {after}"
                        admitted.setdefault(r.request_id, r.kv_tokens)
                        checked += 1
                hits = sorted(int(o.num_cached_tokens or 0) for o in outputs)
                assert sorted(admitted.values()) == hits, f"call {call}: admitted with KV " \
                    f"{sorted(admitted.values())}, vLLM reports cache hits {hits}"
                assert (min(hits) > 0) == (call == 1), f"call {call}: cache hits {hits}"
    sdbench_note(f"snapshot KV: {checked} request-iterations agree with the scheduler's "
                 f"requests; admissions from the prefix cache at {hits} tokens")
    assert checked >= 2 * 2 * 3  # two calls, two requests, a prefill and two decode steps
    assert restoration_violations(engine) == []


def _native_and_traced(engine) -> list[tuple[float, float]]:
    """One decode run, observed and profiled: (native seconds, trace seconds) per step."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    cuda = engine.device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    engine.generate([engine.fresh_tokens(128) for _ in range(4)], sampling_params(16))  # warm
    with _observer(engine) as observer:
        with annotated_steps(engine.llm), profile(activities=activities) as prof:
            with observer.window(BOOKING_MEASURED) as window:
                engine.generate([engine.fresh_tokens(128) for _ in range(4)],
                                sampling_params(16))
            if cuda:
                torch.cuda.synchronize()
    traced = traced_step_seconds(prof.events(), engine.device)
    steps = [r for r in window.records if r.snapshot.requests]
    missing = [r.native_iteration_id for r in steps if r.native_iteration_id not in traced]
    assert steps
    assert not missing, f"steps without a trace interval: {missing} (traced: {sorted(traced)})"
    assert restoration_violations(engine) == []
    return [(r.timing.seconds, traced[r.native_iteration_id]) for r in steps]


@pytest.mark.sdbench_cuda
def test_cuda_step_times_agree_with_a_profiler_trace(sdbench_engine, sdbench_note):
    """CUDA events against CUPTI: the native time of each step and the time the trace says
    it held the stream, summed over a decode run, agree within TRACE_TOLERANCE."""
    pairs = _native_and_traced(sdbench_engine)
    native, trace = sum(n for n, _ in pairs), sum(t for _, t in pairs)
    sdbench_note(f"profiler (CUDA): {len(pairs)} steps native {native * 1e3:.3f} ms, trace "
                 f"interval {trace * 1e3:.3f} ms ({100 * (native / trace - 1):+.2f}%)")
    assert abs(native / trace - 1) <= TRACE_TOLERANCE


@pytest.mark.exclusive   # load preempts steps inside the range: nothing of the run beside it
def test_host_step_times_agree_with_a_profiler_trace(sdbench_engine, sdbench_note):
    """CPU: the worker's host timer against the profiler's host range of the same step (the
    range opens before the timer starts and closes after it stops)."""
    if sdbench_engine.device != "cpu":
        pytest.skip("the host timer times CPU engines; CUDA: "
                    "test_cuda_step_times_agree_with_a_profiler_trace")
    pairs = _native_and_traced(sdbench_engine)
    native, trace = sum(n for n, _ in pairs), sum(t for _, t in pairs)
    ratios = sorted(n / t for n, t in pairs)
    agreeing = sum(r >= 1 - HOST_TRACE_TOLERANCE for r in ratios) / len(ratios)
    sdbench_note(f"profiler (CPU): {len(pairs)} steps native {native * 1e3:.3f} ms, trace "
                 f"{trace * 1e3:.3f} ms ({100 * (native / trace - 1):+.2f}%); steps "
                 f"{100 * (ratios[0] - 1):+.2f}% to {100 * (ratios[-1] - 1):+.2f}%, "
                 f"{100 * agreeing:.0f}% within {100 * HOST_TRACE_TOLERANCE:g}%")
    assert native <= trace * (1 + 1e-3)  # the timer lies inside the range (µs rounding)
    assert agreeing >= HOST_AGREEING_FRACTION, pairs
