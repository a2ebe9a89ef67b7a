"""The held-out serving run: the engine driven step by step (LLMEngine.add_request / step),
each request added when its arrival time has come, under the native observer. Every real
step is recorded as a native observation (its frozen snapshot joined with its timing by the
native iteration ID), prefill, decode and mixed steps alike; every request's token
deliveries are stamped with the host clock when step() hands them back, which is when a
serving user sees them (TTFT, inter-token and end-to-end latency are host-timed on purpose).

A request that arrives while a step runs is added when that step returns, as a server adds
it at the next step boundary; its latency counts from its arrival, not from its addition.
Python's garbage collector is paused during the run (collected first), as it is while the
profile's points run, so that the two are measured alike."""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict

from ..engine import compat, serving
from ..engine.host import HostMonitor
from ..engine.launch import StepWatchdog
from ..measure.observer import NativeObserver, TimingMissing
from ..measure.timing import timer_for
from ..wire.contract import BOOKING_MEASURED, CUDAGRAPH_NONE, GRAPH_EAGER, PHASE_IDLE
from ..wire.model import utc_now
from .serving_records import UNKNOWN_GRAPH_MODE, RequestRecord, ServingRun, StepRecord
from .workload import ARRIVAL_POISSON, PlannedRequest, Workload, plan

IDLE_WAIT_SECONDS = 0.05    # longest sleep between polls while no request is in flight


def step_record(record, draft_depth: int, engine_graph_mode: str) -> StepRecord | None:
    """A window's IterationRecord as a StepRecord (None for an idle iteration)."""
    snapshot = record.corrected_snapshot()
    if snapshot.phase == PHASE_IDLE or record.timing is None:   # untimed only when idle
        return None
    prefill = [r for r in snapshot.requests if r.in_prefill]
    decode = [r for r in snapshot.requests if not r.in_prefill]
    full = [r for r in decode if r.draft_tokens == draft_depth]
    gained = record.accepted
    accepted = None if gained is None else sum(
        max(gained.get(r.request_id, 1) - 1, 0) for r in full)
    mode = record.graph_mode or (GRAPH_EAGER if engine_graph_mode == CUDAGRAPH_NONE
                                 else UNKNOWN_GRAPH_MODE)
    return StepRecord(
        native_iteration_id=record.native_iteration_id, kind=snapshot.phase, graph_mode=mode,
        seconds=record.timing.seconds, prefill_requests=len(prefill),
        prefill_tokens=sum(r.new_tokens for r in prefill),
        prefill_kv_tokens=sum(r.kv_tokens for r in prefill), decode_requests=len(decode),
        decode_kv_tokens=sum(r.kv_tokens for r in decode),
        draft_tokens=sum(r.draft_tokens for r in decode), full_depth_requests=len(full),
        accepted_drafts=accepted, total_scheduled_tokens=snapshot.total_scheduled_tokens,
        waiting=snapshot.queue.waiting, running=snapshot.queue.running)


@contextmanager
def acceptance(engine, acceptance_length: float | None):
    """Synthetic acceptance at the profile's AL for the run (the collector's mechanism),
    the engine's rates restored after."""
    if acceptance_length is None:
        yield
        return
    llm = engine.llm
    before = compat.synthetic_rates(llm)
    compat.set_synthetic_rates(llm, compat.conditional_rates_for(acceptance_length,
                                                                 engine.spec.draft_depth))
    try:
        yield
    finally:
        compat.set_synthetic_rates(llm, before)


@contextmanager
def gc_paused():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Driver:
    """Serves planned requests on the engine, step by step."""

    def __init__(self, engine, clock: Callable[[], float] = time.perf_counter):
        self.engine, self.clock = engine, clock
        self._serial = 0

    def serve(self, workload: Workload, planned: list[PlannedRequest]) -> list[RequestRecord]:
        engine, llm = self.engine, self.engine.llm
        prompts = [engine.fresh_tokens(r.input_tokens) for r in planned]  # before the clock
        params = [serving.streaming_params(r.output_tokens) for r in planned]
        pending = deque(zip(planned, prompts, params, strict=True))
        live: dict[str, RequestRecord] = {}
        done: list[RequestRecord] = []
        closed_loop = workload.arrival != ARRIVAL_POISSON
        slots = workload.concurrency or 0
        clock, t0 = self.clock, self.clock()
        def due(now: float) -> float | None:
            """The arrival time of the next request if it has come (closed loop: now)."""
            if not pending:
                return None
            if closed_loop:
                return now if len(live) < slots else None
            arrival = pending[0][0].arrival_seconds
            return arrival if arrival is not None and arrival <= now else None

        while pending or live:
            now = clock() - t0
            while (arrival := due(now)) is not None:
                request, prompt, param = pending.popleft()
                self._serial += 1
                rid = f"sdbench-fidelity-{self._serial}"
                serving.add_request(llm, rid, prompt, param)
                live[rid] = RequestRecord(request.index, rid, request.input_tokens,
                                          request.output_tokens, arrival, clock() - t0)
            if not live:   # nothing in flight: wait for the next arrival
                wait = (pending[0][0].arrival_seconds or 0.0) - (clock() - t0)
                time.sleep(min(max(wait, 0.0), IDLE_WAIT_SECONDS))
                continue
            outputs = serving.engine_step(llm)
            t = clock() - t0
            for output in outputs:
                rid, tokens, finished = serving.delivered(output)
                record = live.get(rid)
                if record is None:
                    continue
                if tokens:
                    record.deliveries.append((t, tokens))
                if finished:
                    record.finished = t
                    done.append(live.pop(rid))
        return sorted(done, key=lambda r: r.index)


def serve_workload(engine, workload: Workload, acceptance_length: float | None,
                   warmup_requests: int = 0) -> ServingRun:
    """Serve the workload (after `warmup_requests` unrecorded requests of the same lengths
    at its concurrency, or 4 in flight) under the observer; every real step and every
    request recorded. Anything raised out of the engine marks it unusable (engine.fail)."""
    engine.check_usable()
    driver = Driver(engine)
    planned = plan(workload)
    try:
        with acceptance(engine, acceptance_length), gc_paused():
            if warmup_requests:
                warm = Workload("concurrency", workload.input_tokens, workload.output_tokens,
                                seed=workload.seed + 1, concurrency=workload.concurrency or 4,
                                requests=warmup_requests)
                with StepWatchdog(engine.llm, engine.spec.stall_seconds):
                    driver.serve(warm, plan(warm))
            observer = NativeObserver(engine.llm, timer_for(engine.device)).attach()
            try:
                with HostMonitor(tuple(engine.gpu_indices)) as monitor:
                    started, t0 = utc_now(), time.perf_counter()
                    try:
                        with StepWatchdog(engine.llm, engine.spec.stall_seconds), \
                                observer.window(BOOKING_MEASURED) as window:
                            requests = driver.serve(workload, planned)
                    except TimingMissing:
                        _only_idle_untimed(window)
                    wall = time.perf_counter() - t0
                    environment = monitor.environment()
            finally:
                observer.detach()
    except BaseException as exc:
        engine.fail(exc)
        raise
    graph = str(engine.identity.cudagraph_mode.value)
    steps, idle = [], 0
    for record in window.records:
        step = step_record(record, engine.spec.draft_depth, graph)
        if step is None:
            idle += 1
        else:
            steps.append(step)
    return ServingRun(label=workload.label, workload=workload_json(workload),
                      started_at=started, wall_seconds=wall, requests=requests, steps=steps,
                      idle_steps=idle, timing_source=observer.timer.source,
                      environment=asdict(environment), acceptance_length=acceptance_length)


def _only_idle_untimed(window) -> None:
    """An iteration that scheduled no token may never reach the model (nothing to time);
    one that scheduled work and has no time fails the run (TimingMissing, re-raised)."""
    untimed = [r for r in window.records if r.timing is None]
    working = [r.native_iteration_id for r in untimed if r.total_scheduled_tokens]
    if working:
        raise TimingMissing(f"no timing sample arrived for native iteration ids {working}")


def workload_json(workload: Workload) -> dict:
    data = asdict(workload)
    data["input_tokens"] = workload.input_tokens.text
    data["output_tokens"] = workload.output_tokens.text
    data["description"] = workload.describe()
    return data

