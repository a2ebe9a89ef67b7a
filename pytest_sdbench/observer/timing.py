"""Timers for the worker's model step. The CPU timer reads a host clock around the step.
The CUDA timer records events on the engine's stream from a preallocated pool and reads
them back only once they have completed, so the hot path gains no synchronisation, no
device-to-host copy and no disk write.

On the hot path (start, stop) a timer keeps plain values only; the TimingSamples are built
when the samples are read (poll, or drain at idle when the window closes)."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from ..wire.contract import SCOPE_MODEL_STEP, SOURCE_CUDA_EVENT, SOURCE_HOST_TIMER
from ..wire.records import TimingSample


class HostTimer:
    source = SOURCE_HOST_TIMER

    def __init__(self):
        self._open: dict[int, int] = {}
        self._done: list[tuple[int, int]] = []   # (native id, nanoseconds)

    def start(self, iid: int) -> None:
        self._open[iid] = time.perf_counter_ns()

    def stop(self, iid: int) -> None:
        stopped = time.perf_counter_ns()
        started = self._open.pop(iid, None)
        if started is not None:
            self._done.append((iid, stopped - started))

    def poll(self) -> list[TimingSample]:
        done, self._done = self._done, []
        return [TimingSample(iid, ns / 1e9, SCOPE_MODEL_STEP, self.source) for iid, ns in done]

    def drain(self) -> list[TimingSample]:
        return self.poll()

    def pending(self) -> int:
        return len(self._open)


class CudaEventTimer:
    """Start/stop events on the engine's current stream, looked up once a step (at start;
    the stop is recorded on the same stream); the events come from a reusable pool. Their
    times are read when the samples are (poll, drain), or when the pool runs dry."""
    source = SOURCE_CUDA_EVENT

    def __init__(self, pool_size: int = 256):
        import torch
        self._torch = torch
        self._current_stream = torch.cuda.current_stream
        self._free: deque[Any] = deque(torch.cuda.Event(enable_timing=True)
                                       for _ in range(2 * pool_size))
        # torch.cuda.Event and Stream objects (torch is imported only on CUDA hosts)
        self._open: dict[int, tuple[Any, Any]] = {}     # iid -> (start event, its stream)
        self._recorded: deque[tuple[int, Any, Any]] = deque()
        self._done: list[tuple[int, float]] = []               # (iid, milliseconds)

    def _event(self):
        if not self._free:  # pool exhausted: reclaim finished pairs before growing
            self._reclaim()
        return self._free.popleft() if self._free else self._torch.cuda.Event(enable_timing=True)

    def start(self, iid: int) -> None:
        stream = self._current_stream()
        event = self._free.popleft() if self._free else self._event()
        event.record(stream)
        self._open[iid] = (event, stream)

    def stop(self, iid: int) -> None:
        opened = self._open.pop(iid, None)
        if opened is not None:
            start, stream = opened
            end = self._free.popleft() if self._free else self._event()
            end.record(stream)
            self._recorded.append((iid, start, end))

    def _reclaim(self) -> None:
        """Read the pairs whose end event has completed and free their events; never waits."""
        recorded, done = self._recorded, self._done
        while recorded and recorded[0][2].query():
            iid, start, end = recorded.popleft()
            done.append((iid, start.elapsed_time(end)))
            self._free.extend((start, end))

    def poll(self) -> list[TimingSample]:
        """Samples whose end event has completed; never waits."""
        self._reclaim()
        done, self._done = self._done, []
        return [TimingSample(iid, ms / 1e3, SCOPE_MODEL_STEP, self.source) for iid, ms in done]

    def drain(self) -> list[TimingSample]:
        """At idle or shutdown: wait for what was recorded, then read it all."""
        if self._recorded:
            self._recorded[-1][2].synchronize()
        return self.poll()

    def pending(self) -> int:
        return len(self._open) + len(self._recorded)


def timer_for(device: str):
    return CudaEventTimer() if device == "cuda" else HostTimer()
