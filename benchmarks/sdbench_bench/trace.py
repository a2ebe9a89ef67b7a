"""Reading a profiler trace of annotated steps (pure logic, tested on constructed traces).

The fidelity measurement opens a profiler range named ``sdbench_step_<native id>`` around
each step on the host; the trace then holds that range on the CPU and, as
gpu_user_annotation pieces, the step's kernels on the device. From them: when the host
entered each step, and the outer bounds of its kernels; then the interval each step holds
the stream, by the definition the native CUDA events follow."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, NamedTuple

STEP_PREFIX = "sdbench_step_"
Side = Literal["cpu", "cuda"]


def step_range_name(iid) -> str:
    return f"{STEP_PREFIX}{iid}"


@dataclass(frozen=True)
class TraceEvent:
    """One event of the trace: a name, the side it ran on, its span in microseconds."""
    name: str
    side: Side
    start_us: float
    end_us: float


class StepSpan(NamedTuple):
    """One step in the trace's clock (microseconds)."""
    entered_us: float        # the host entered the step (its CPU range began)
    first_kernel_us: float   # the earliest start of its device pieces
    last_kernel_us: float    # the latest end of its device pieces


def step_id(name: str) -> int | None:
    """The native id in an annotated step's range name; None for any other event."""
    if not name.startswith(STEP_PREFIX):
        return None
    tail = name[len(STEP_PREFIX):]
    return int(tail) if tail.isdigit() else None


def step_spans(events: Iterable[TraceEvent]) -> dict[int, StepSpan]:
    """Per annotated step seen on both sides: when the host entered it, and the outer bounds
    of its device pieces (an annotation may come in several). Steps seen on one side only
    are left out."""
    host: dict[int, float] = {}
    device: dict[int, tuple[float, float]] = {}
    for event in events:
        iid = step_id(event.name)
        if iid is None:
            continue
        if event.side == "cuda":
            lo, hi = device.get(iid, (event.start_us, event.end_us))
            device[iid] = (min(lo, event.start_us), max(hi, event.end_us))
        elif event.side == "cpu":
            host[iid] = min(host.get(iid, event.start_us), event.start_us)
    return {iid: StepSpan(host[iid], *device[iid]) for iid in sorted(device) if iid in host}


def step_intervals(spans: dict[int, StepSpan]) -> dict[int, float]:
    """Seconds each step holds the stream: it starts when the host enters it or, when the
    stream is still busy with the previous step, when that step's last kernel ends; it ends
    with its own last kernel. Steps are taken in native id order."""
    intervals: dict[int, float] = {}
    previous_end: float | None = None
    for iid in sorted(spans):
        span = spans[iid]
        start = span.entered_us if previous_end is None else max(span.entered_us,
                                                                 previous_end)
        intervals[iid] = (span.last_kernel_us - start) / 1e6
        previous_end = span.last_kernel_us
    return intervals


def kernel_seconds(span: StepSpan) -> float:
    return (span.last_kernel_us - span.first_kernel_us) / 1e6


def profiler_events(prof) -> list[TraceEvent]:
    """The annotated-step events of a finished torch.profiler run."""
    from torch.autograd import DeviceType
    sides = {DeviceType.CPU: "cpu", DeviceType.CUDA: "cuda"}
    return [TraceEvent(e.name, sides[e.device_type], e.time_range.start, e.time_range.end)
            for e in prof.events()
            if e.name.startswith(STEP_PREFIX) and e.device_type in sides]
