"""Snapshots joined to the KV the engine really holds. Under async scheduling (vLLM's default
for EAGLE3 on CUDA) iteration N+1 is scheduled before N's rejections are known; its
corrected snapshot must still say exactly how many KV tokens each request had. Under
synchronous scheduling (CPU) no correction is needed and none may be made."""

import pytest

from pytest_sdbench.measure.observer import NativeObserver
from pytest_sdbench.measure.runs import sampling_params
from pytest_sdbench.measure.timing import timer_for
from pytest_sdbench.plugin.testing import restoration_violations
from pytest_sdbench.wire.contract import BOOKING_MEASURED


def test_corrected_snapshots_track_the_real_kv(sdbench_engine, sdbench_note):
    engine = sdbench_engine
    if engine.spec.tensor_parallel_size > 1:
        pytest.skip("reads the scheduler and the requests of the engine in this process; a "
                    "tensor-parallel engine lives in its rank processes (there every "
                    "collection's rank agreement compares the corrected snapshots of all ranks)")
    observer = NativeObserver(engine.llm, timer_for(engine.device)).attach()
    try:
        prompts = [[(11 * i + 5 * j) % 1000 + 3 for j in range(64)] for i in range(3)]
        with observer.window(BOOKING_MEASURED) as window:
            engine.generate(prompts, sampling_params(24))
    finally:
        observer.detach()
    steps = [r for r in window.records if r.snapshot.requests]
    kv: dict[str, int] = {}
    checked = corrections = 0
    for index, step in enumerate(steps):
        snapshot = step.corrected_snapshot()
        if step.accepted is None:
            # Under async scheduling the last step of a finishing request may be scheduled
            # before its finish is known; its output arrives after the run. Nothing may
            # follow it for those requests.
            ids = {r.request_id for r in snapshot.requests}
            later = {r.request_id for s in steps[index + 1:] for r in s.snapshot.requests}
            assert not ids & later, f"iteration {snapshot.native_iteration_id} has no output"
            continue
        corrections += len(snapshot.corrections)
        for r in snapshot.requests:
            if r.request_id in kv:
                assert r.kv_tokens == kv[r.request_id], (
                    f"iteration {snapshot.native_iteration_id}: {r.request_id} snapshot says "
                    f"{r.kv_tokens} KV tokens, the engine holds {kv[r.request_id]}")
                checked += 1
            gained = step.accepted[r.request_id]
            kv[r.request_id] = r.kv_tokens + r.new_tokens + gained - 1
    assert checked >= 3 * 4
    async_on = engine.identity.async_scheduling.value
    if not async_on:
        assert corrections == 0
    elif engine.spec.synthetic_acceptance_length not in (None, engine.spec.draft_depth + 1):
        assert corrections > 0, "async scheduling with rejections must correct snapshots"
    sdbench_note(f"async correction: {checked} in-flight snapshots checked against the real "
                 f"KV, {corrections} corrections (async scheduling {async_on})")
    assert restoration_violations(engine) == []
