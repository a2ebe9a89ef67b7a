"""Timers for the worker's model step. The CPU timer reads a host clock around the step.
The CUDA timer records events on the engine's stream from a preallocated pool and reads
them back only once they have completed (polled), so the hot path gains no synchronisation,
no device-to-host copy and no disk write."""

from __future__ import annotations

import time
from collections import deque

from ..wire.contract import SCOPE_MODEL_STEP, SOURCE_CUDA_EVENT, SOURCE_HOST_TIMER
from ..wire.records import TimingSample


class HostTimer:
    source = SOURCE_HOST_TIMER

    def __init__(self):
        self._open: dict[int, int] = {}
        self._done: list[TimingSample] = []

    def start(self, iid: int) -> None:
        self._open[iid] = time.perf_counter_ns()

    def stop(self, iid: int) -> None:
        started = self._open.pop(iid, None)
        if started is not None:
            seconds = (time.perf_counter_ns() - started) / 1e9
            self._done.append(TimingSample(iid, seconds, SCOPE_MODEL_STEP, self.source))

    def poll(self) -> list[TimingSample]:
        done, self._done = self._done, []
        return done

    def drain(self) -> list[TimingSample]:
        return self.poll()

    def pending(self) -> int:
        return len(self._open)


class CudaEventTimer:
    """Start/stop events on the current (engine) stream; pairs come from a reusable pool."""
    source = SOURCE_CUDA_EVENT

    def __init__(self, pool_size: int = 256):
        import torch
        self._torch = torch
        self._free = deque(torch.cuda.Event(enable_timing=True) for _ in range(2 * pool_size))
        self._open: dict[int, object] = {}
        self._recorded: deque[tuple[int, object, object]] = deque()

    def _event(self):
        if not self._free:  # pool exhausted: reclaim finished pairs before growing
            self.poll()
        return self._free.popleft() if self._free else self._torch.cuda.Event(enable_timing=True)

    def start(self, iid: int) -> None:
        event = self._event()
        event.record()
        self._open[iid] = event

    def stop(self, iid: int) -> None:
        start = self._open.pop(iid, None)
        if start is not None:
            end = self._event()
            end.record()
            self._recorded.append((iid, start, end))

    def poll(self) -> list[TimingSample]:
        """Samples whose end event has completed; never waits."""
        done = []
        while self._recorded and self._recorded[0][2].query():
            iid, start, end = self._recorded.popleft()
            done.append(TimingSample(iid, start.elapsed_time(end) / 1e3, SCOPE_MODEL_STEP,
                                     self.source))
            self._free.extend((start, end))
        return done

    def drain(self) -> list[TimingSample]:
        """At idle or shutdown: wait for what was recorded, then read it all."""
        if self._recorded:
            self._recorded[-1][2].synchronize()
        return self.poll()

    def pending(self) -> int:
        return len(self._open) + len(self._recorded)


def timer_for(device: str):
    return CudaEventTimer() if device == "cuda" else HostTimer()
