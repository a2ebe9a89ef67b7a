"""Timers for the worker's model step. The CPU timer reads a host clock around the step.
The CUDA timer records events on the engine's stream from a preallocated pool and reads
them back only once they have completed, so the hot path gains no synchronisation, no
device-to-host copy and no disk write.

On the hot path (start, stop) a timer keeps plain values only; the TimingSamples are built
when the samples are read (poll, or drain at idle when the window closes)."""

from __future__ import annotations

import ctypes
import time
from typing import Any

from ..wire.contract import SCOPE_MODEL_STEP, SOURCE_CUDA_EVENT, SOURCE_HOST_TIMER
from ..wire.records import TimingSample

_DRIVER_DEFAULT: Any = object()   # CudaEventTimer(driver=...) unset: driver_record()


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


def event_record(event_cls):
    """The C-level record(stream) of torch's event class (torch.cuda.Event.record is a Python
    wrapper around it that only adds a current-stream lookup when no stream is given)."""
    for cls in event_cls.__mro__[1:]:
        if "record" in vars(cls):
            return vars(cls)["record"]
    return event_cls.record


def driver_record():
    """The CUDA driver's cuEventRecord(event, stream), called through ctypes.PyDLL, which
    keeps the GIL for the call; None where the driver library cannot be loaded.

    Why not torch's record: it releases the GIL around cudaEventRecord, so any thread
    waiting for the GIL (vLLM's async-output thread, which turns a finished step's output
    into Python lists, under async scheduling) runs inside the observer's wrapper, and the
    step waits for it. cudaEvent_t and cudaStream_t are the driver's CUevent and CUstream."""
    try:
        record = ctypes.PyDLL("libcuda.so.1").cuEventRecord
    except (OSError, AttributeError):
        return None
    record.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
    record.restype = ctypes.c_int
    return record


# The driver record's self-test: a kernel spinning this many GPU cycles (0.4-1 ms at 1-2.5 GHz)
# between a torch-recorded marker and the driver-recorded event must read at least this long.
SELF_TEST_CYCLES, SELF_TEST_MIN_MS = 1_000_000, 0.1


class CudaEventRecordError(RuntimeError):
    """The driver refused to record a timing event."""


class CudaEventTimer:
    """Start/stop events on the engine's current stream; the events come from a pool
    created (and their CUDA events made) when the timer is, and are reused once read.
    Their times are read when the samples are (poll, drain), or when the pool runs dry.

    The current stream is read each step, as torch.cuda.current_stream() would read it,
    but through torch's C lookups: the Stream object is rebuilt only when the stream
    differs from the last step's (torch.cuda.current_stream() builds one every call, about
    3.4 us on the H200; the two C calls take a fraction of that).

    The events are recorded by the driver's cuEventRecord with the GIL held (driver_record),
    once a self-test at construction has shown that such an event times like torch's;
    otherwise by torch's C record (`recorder` says which). Each pool entry and the stream
    are kept as (torch object, what the recorder takes): the object itself for torch's
    record, its raw handle for the driver's."""
    source = SOURCE_CUDA_EVENT
    TORCH_RECORD = "torch Event.record (releases the GIL)"
    DRIVER_RECORD = "cuEventRecord (GIL held)"

    def __init__(self, pool_size: int = 256, driver: Any = _DRIVER_DEFAULT):
        import torch
        cuda = torch.cuda
        self._new_event = lambda: cuda.Event(enable_timing=True)
        self._torch_record = event_record(cuda.Event)
        self._device = torch._C._cuda_getDevice
        self._lookup = torch._C._cuda_getCurrentStream   # (stream id, device, device type)
        self._make_stream = cuda.Stream
        self._key: Any = None
        self._stream: tuple[Any, Any] = (None, None)
        self._record: Any = self._torch_record
        self.recorder = self.TORCH_RECORD
        self.recorder_note = ""
        # torch creates an event's CUDA event at its first record: do that now, off the hot
        # path, for the whole pool (a record waits for nothing; re-recording one is allowed)
        stream = self._current_stream()[0]
        events = []
        for _ in range(2 * pool_size):
            event = self._new_event()
            self._torch_record(event, stream)
            events.append(event)
        self._use_driver(driver_record() if driver is _DRIVER_DEFAULT else driver, events)
        # (torch event, record target) pairs; torch is imported only on CUDA hosts
        self._free: list[tuple[Any, Any]] = [self._entry(e) for e in events]
        self._open: dict[int, tuple[Any, Any]] = {}   # iid -> (start entry, stream entry)
        self._recorded: list[tuple[int, Any, Any]] = []  # (iid, start, end) in record order
        self._done: list[tuple[int, float]] = []        # (iid, milliseconds)

    def _entry(self, event) -> tuple[Any, Any]:
        if self._record is self._torch_record:
            return event, event
        return event, ctypes.c_void_p(event.cuda_event)

    def _use_driver(self, record, events) -> None:
        """Record with the driver's cuEventRecord if it records where torch would: torch
        records a marker on the current stream, a kernel spins there for SELF_TEST_CYCLES, the
        driver records a second event after it, which is waited for; torch must read at
        least SELF_TEST_MIN_MS between them (an event recorded on another stream or context,
        or not at all, reads less or fails). Once, when the timer is made: never on the hot
        path."""
        if record is None:
            self.recorder_note = "libcuda.so.1 not loadable"
            return
        import torch
        marker, probe = events[0], events[1]
        stream = self._current_stream()[0]
        try:
            self._torch_record(marker, stream)
            torch.cuda._sleep(SELF_TEST_CYCLES)
            code = record(ctypes.c_void_p(probe.cuda_event), ctypes.c_void_p(stream.cuda_stream))
            if code:
                raise CudaEventRecordError(f"cuEventRecord returned {code}")
            probe.synchronize()
            ms = marker.elapsed_time(probe)
            if not ms >= SELF_TEST_MIN_MS:
                raise CudaEventRecordError(f"{ms:.4f} ms read across a {SELF_TEST_CYCLES}-cycle "
                                           f"kernel, expected >= {SELF_TEST_MIN_MS} ms")
        except Exception as exc:  # noqa: BLE001 (any failure: torch's record instead)
            self.recorder_note = f"driver record refused ({type(exc).__name__}: {exc})"
            return
        self._record = record
        self.recorder = self.DRIVER_RECORD
        self._key = None   # the stream entry is rebuilt for the driver's record

    def _current_stream(self) -> tuple[Any, Any]:
        key = self._lookup(self._device())
        if key != self._key:
            stream = self._make_stream(stream_id=key[0], device_index=key[1],
                                       device_type=key[2])
            self._stream = (stream, stream if self._record is self._torch_record
                            else ctypes.c_void_p(stream.cuda_stream))
            self._key = key
        return self._stream

    def _event(self) -> tuple[Any, Any]:
        """The pool ran dry: reclaim finished pairs (never waits), else make one more."""
        self._reclaim()
        if self._free:
            return self._free.pop()
        event = self._new_event()
        self._torch_record(event, self._stream[0])   # torch makes its CUDA event
        return self._entry(event)

    def start(self, iid: int) -> None:
        stream = self._current_stream()
        event = self._free.pop() if self._free else self._event()
        if self._record(event[1], stream[1]):
            raise CudaEventRecordError(f"cuEventRecord failed for iteration {iid}")
        self._open[iid] = (event, stream)

    def stop(self, iid: int) -> None:
        opened = self._open.pop(iid, None)
        if opened is not None:
            end = self._free.pop() if self._free else self._event()
            if self._record(end[1], opened[1][1]):
                raise CudaEventRecordError(f"cuEventRecord failed for iteration {iid}")
            self._recorded.append((iid, opened[0], end))

    def _reclaim(self) -> None:
        """Read the pairs whose end event has completed and free their events; never waits.
        Pairs complete in record order (one stream), so the first incomplete one ends it."""
        recorded, done = self._recorded, self._done
        ready = 0
        for iid, start, end in recorded:
            if not end[0].query():
                break
            done.append((iid, start[0].elapsed_time(end[0])))
            self._free.extend((start, end))
            ready += 1
        del recorded[:ready]

    def poll(self) -> list[TimingSample]:
        """Samples whose end event has completed; never waits."""
        self._reclaim()
        done, self._done = self._done, []
        return [TimingSample(iid, ms / 1e3, SCOPE_MODEL_STEP, self.source) for iid, ms in done]

    def drain(self) -> list[TimingSample]:
        """At idle or shutdown: wait for what was recorded, then read it all."""
        if self._recorded:
            self._recorded[-1][2][0].synchronize()
        return self.poll()

    def pending(self) -> int:
        return len(self._open) + len(self._recorded)


def timer_for(device: str):
    return CudaEventTimer() if device == "cuda" else HostTimer()
