"""Checks for tests, the package's and downstream repositories': each returns a list of
violations (empty: fine).

    from pytest_sdbench.plugin.testing import observation_violations, restoration_violations

- observation_violations(artifact): every retained observation is an exact native join of
  the point's shape;
- restoration_violations(engine): after a benchmark the engine holds the attributes it held
  right after start-up (scheduler, worker and the CUDA-graph dispatcher) and serves an
  ordinary request as it did then. Every collection runs it after the observer's detach
  (its home is engine/restoration.py; this is its public name).

And, to check native step times against a torch.profiler trace (another clock):

- annotated_steps(llm): a profiler range per engine step, named by its native iteration ID;
- traced_step_seconds(events, device): each annotated step's time by the trace's clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

from ..engine.restoration import restoration_violations
from ..wire.contract import (
    BOOKING_MEASURED,
    DEVICE_CPU,
    PHASE_DECODE,
    PHASE_MIXED,
    PHASES,
    SCOPE_MODEL_STEP,
    SOURCE_FOR_DEVICE,
)
from ..wire.points import MixedPoint
from ..wire.shape import decode_mismatch, mixed_mismatch, prefill_mismatch

STEP_RANGE_PREFIX = "sdbench_step_"

__all__ = ["STEP_RANGE_PREFIX", "annotated_steps", "observation_violations",
           "restoration_violations", "traced_step_seconds"]


def _shape(phase: str, o) -> str | None:
    if phase == PHASE_DECODE:
        return decode_mismatch(o.point, o.snapshot, o.step_index)
    if phase == PHASE_MIXED:
        return mixed_mismatch(o.point, o.snapshot, o.step_index)
    return prefill_mismatch(o.point, o.snapshot)


def _batch(o) -> int:
    point = o.point
    return (point.decode_batch_size + point.prefill_batch_size
            if isinstance(point, MixedPoint) else point.batch_size)


def observation_violations(artifact) -> list[str]:
    problems = []
    ids = [o.native_iteration_id for phase in PHASES for o in getattr(artifact, phase)]
    if len(ids) != len(set(ids)):
        problems.append(f"native ids repeat: {ids}")
    for phase in PHASES:
        for o in getattr(artifact, phase):
            where = f"{phase}[{o.point_index}]"
            if not o.native_iteration_id == o.snapshot.native_iteration_id == \
                    o.timing.native_iteration_id:
                problems.append(f"{where}: ids {o.native_iteration_id}/"
                                f"{o.snapshot.native_iteration_id}/{o.timing.native_iteration_id}")
            shape = _shape(phase, o)
            if shape:
                problems.append(f"{where}: {shape}")
            if o.snapshot.queue.running != _batch(o) or o.snapshot.queue.waiting:
                problems.append(f"{where}: queue {o.snapshot.queue} for batch {_batch(o)}")
            if o.snapshot.booking != BOOKING_MEASURED:
                problems.append(f"{where}: booking {o.snapshot.booking}")
            if o.timing.source != SOURCE_FOR_DEVICE[artifact.device] or \
                    o.timing.scope != SCOPE_MODEL_STEP or not o.timing.seconds > 0:
                problems.append(f"{where}: timing {o.timing}")
    return problems


@contextmanager
def annotated_steps(llm) -> Iterator[None]:
    """A torch.profiler range per engine step, named STEP_RANGE_PREFIX + its native
    iteration ID: opened when the worker's execute_model is entered, closed when the step
    ends (sample_tokens returns, or execute_model when it returns the output itself). Use it
    inside an attached NativeObserver (it reads the observer's stamp); removed on exit."""
    from torch.profiler import record_function

    from ..engine import compat
    from ..measure.observer import STAMP_ATTR
    worker = compat.worker(llm)
    execute, sample = worker.execute_model, worker.sample_tokens
    open_ranges: deque[Any] = deque()

    def execute_model(scheduler_output, *args, **kwargs):
        iid = getattr(scheduler_output, STAMP_ATTR, None)
        scope = record_function(f"{STEP_RANGE_PREFIX}{iid}")
        scope.__enter__()
        try:
            output = execute(scheduler_output, *args, **kwargs)
        except BaseException:
            scope.__exit__(None, None, None)
            raise
        if output is None:  # sampling and drafting follow in sample_tokens
            open_ranges.append(scope)
        else:
            scope.__exit__(None, None, None)
        return output

    def sample_tokens(*args, **kwargs):
        try:
            return sample(*args, **kwargs)
        finally:
            if open_ranges:
                open_ranges.popleft().__exit__(None, None, None)

    with patch.object(worker, "execute_model", execute_model), \
            patch.object(worker, "sample_tokens", sample_tokens):
        yield


def traced_step_seconds(events: Iterable[Any], device: str) -> dict[int, float]:
    """Seconds per annotated step (native iteration ID -> seconds) in a torch.profiler
    trace's events (prof.events()), by the trace's own clock.

    On CPU: the host range around the step. On CUDA: the time the step holds the stream, by
    the definition the native CUDA events follow: the step starts when the host enters it
    or, when the stream is still busy with the previous step, when that step's last kernel
    ends; it ends with its own last kernel. A step whose range holds no kernel is left out.
    """
    from torch.autograd import DeviceType
    host: dict[int, tuple[float, float]] = {}
    kernels: dict[int, tuple[float, float]] = {}
    for event in events:
        name = event.name
        if not name.startswith(STEP_RANGE_PREFIX) or not name[len(STEP_RANGE_PREFIX):].isdigit():
            continue
        iid = int(name[len(STEP_RANGE_PREFIX):])
        start, end = event.time_range.start, event.time_range.end
        spans = {DeviceType.CPU: host, DeviceType.CUDA: kernels}.get(event.device_type)
        if spans is not None:  # a range may come in pieces: take their outer bounds
            lo, hi = spans.get(iid, (start, end))
            spans[iid] = (min(lo, start), max(hi, end))
    if device == DEVICE_CPU:
        return {iid: (end - start) / 1e6 for iid, (start, end) in host.items()}
    seconds: dict[int, float] = {}
    previous_end = None
    for iid in sorted(set(host) & set(kernels)):
        entered, last = host[iid][0], kernels[iid][1]
        start = entered if previous_end is None else max(entered, previous_end)
        seconds[iid] = (last - start) / 1e6
        previous_end = last
    return seconds
