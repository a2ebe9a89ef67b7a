"""The native observer. It wraps four methods of the running engine, on the instances only:

- scheduler.schedule: stamps a native iteration ID on the SchedulerOutput it returns and
  freezes that iteration's workload snapshot (the producer side);
- worker.execute_model / worker.sample_tokens: time the model step of the stamped iteration
  (target forward, sampling, rejection, draft proposal);
- scheduler.update_from_output: reads the accepted counts the host-side output carries, and
  corrects snapshots of iterations already in flight (async scheduling) for rejected drafts;
- the V2 model runner's cudagraph_manager.dispatch: how the step runs (graph mode), which
  that runner does not report in its output.

Snapshot and timing are joined by the stamped ID only. detach() removes every wrapper.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property

from ..engine import compat
from ..wire.records import (
    QueueSnapshot,
    RejectionCorrection,
    RequestSnapshot,
    Snapshot,
    TimingSample,
)

STAMP_ATTR = "_sdbench_iteration_id"
_ABSENT = object()  # the instance held no attribute of that name before attach()


class TimingMissing(RuntimeError):
    """An iteration's timing sample never arrived."""


@dataclass
class IterationRecord:
    """One recorded iteration. The hot path keeps only the plain values the scheduler and the
    output carried; the typed snapshot is built from them on first use, after the window."""
    native_iteration_id: int
    booking: str
    rows: tuple[compat.ScheduledRow, ...]   # frozen at schedule() time
    queue: tuple[int, int]             # (waiting, running) right after schedule()
    total_scheduled_tokens: int
    timing: TimingSample | None = None
    accepted: dict[str, int] | None = None     # tokens gained per request, from the output
    graph_mode: str | None = None               # as the step's output reports it
    # (request id, preemptions, from iteration id, rejected tokens)
    corrections: list[tuple[str, int, int, int]] = field(default_factory=list)

    @cached_property
    def snapshot(self) -> Snapshot:
        """The frozen workload, as the scheduler emitted it."""
        requests = tuple(RequestSnapshot(
            request_id=r.request_id, prompt_tokens=int(r.prompt_tokens),
            new_tokens=int(r.scheduled_tokens - r.draft_tokens), kv_tokens=int(r.computed_tokens),
            draft_tokens=int(r.draft_tokens), preemptions=int(r.preemptions)) for r in self.rows)
        return Snapshot(native_iteration_id=self.native_iteration_id,
                        phase=Snapshot.phase_of(requests), booking=self.booking,
                        requests=requests, queue=QueueSnapshot(*self.queue),
                        total_scheduled_tokens=int(self.total_scheduled_tokens))

    def corrected_snapshot(self) -> Snapshot:
        """The snapshot with KV lengths corrected for drafts rejected by earlier in-flight
        iterations; the frozen original is left as it was taken."""
        if not self.corrections:
            return self.snapshot
        corrections = tuple(RejectionCorrection(*c) for c in self.corrections)
        rejected: dict[tuple[str, int], int] = {}
        for c in corrections:
            key = (c.request_id, c.preemptions)
            rejected[key] = rejected.get(key, 0) + c.rejected_tokens
        requests = tuple(replace(r, kv_tokens=r.kv_tokens - rejected.get(
            (r.request_id, r.preemptions), 0)) for r in self.snapshot.requests)
        return replace(self.snapshot, requests=requests, corrections=corrections,
                       phase=Snapshot.phase_of(requests))


class Window:
    """The iterations stamped while a window was open, joined once their timing arrived."""

    def __init__(self, booking: str):
        self.booking = booking
        self.ids: list[int] = []
        self.records: list[IterationRecord] = []


class NativeObserver:
    def __init__(self, llm, timer):
        self._llm = llm
        self.timer = timer
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._records: dict[int, IterationRecord] = {}
        self._awaiting_sample: deque[int | None] = deque()  # None: an untimed iteration
        self._in_flight: deque[int] = deque()  # recorded, output not yet processed
        self._window: Window | None = None
        self._dispatched_mode: str | None = None
        self._saved: list[tuple[object, str, object]] = []

    # ---- install / remove ---------------------------------------------------------------
    @property
    def attached(self) -> bool:
        return bool(self._saved)

    def attach(self) -> "NativeObserver":
        if self.attached:
            raise RuntimeError("observer already attached")
        sched, worker = compat.scheduler(self._llm), compat.worker(self._llm)
        self._sched = sched
        self._wrap(sched, "schedule", self._schedule)
        self._wrap(sched, "update_from_output", self._update_from_output)
        self._wrap(worker, "execute_model", self._execute_model)
        self._wrap(worker, "sample_tokens", self._sample_tokens)
        dispatcher = compat.graph_dispatcher(self._llm)
        if dispatcher is not None:
            self._wrap(dispatcher, "dispatch", self._dispatch)
        return self

    def _wrap(self, obj, name: str, make):
        previous = vars(obj).get(name, _ABSENT)
        self._saved.append((obj, name, previous))
        setattr(obj, name, make(getattr(obj, name)))

    def detach(self) -> None:
        """Remove every wrapper, restoring exactly what the instances held before."""
        while self._saved:
            obj, name, previous = self._saved.pop()
            if previous is _ABSENT:
                vars(obj).pop(name, None)
            else:
                setattr(obj, name, previous)
        self._window = None

    # ---- windows ----------------------------------------------------------------------
    @contextmanager
    def window(self, booking: str):
        window = Window(booking)
        self._window = window
        try:
            yield window
        finally:
            self._window = None
        self._settle(window)

    def _settle(self, window: Window) -> None:
        self._collect(self.timer.drain())
        missing = []
        for iid in window.ids:
            record = self._records.pop(iid)
            if record.timing is None:
                missing.append(iid)
            window.records.append(record)
        if missing:
            raise TimingMissing(f"no timing sample arrived for native iteration ids {missing}")

    def _collect(self, samples: list[TimingSample]) -> None:
        for sample in samples:
            record = self._records.get(sample.native_iteration_id)
            if record is not None:
                record.timing = sample

    # ---- wrappers ---------------------------------------------------------------------
    def _schedule(self, original):
        def schedule(*args, **kwargs):
            output = original(*args, **kwargs)
            iid = next(self._ids)
            setattr(output, STAMP_ATTR, iid)
            self._freeze(iid, output)
            return output
        return schedule

    def _freeze(self, iid: int, output) -> None:
        """Record the iteration if a window is open; traffic outside windows (the engine
        serving ordinary requests while attached) is stamped but neither frozen nor timed.
        Plain values only: the typed snapshot is built after the window."""
        window = self._window
        if window is None:
            return
        sched = self._sched
        record = IterationRecord(iid, window.booking, compat.scheduled_requests(output, sched),
                                 compat.queue_lengths(sched), output.total_num_scheduled_tokens)
        with self._lock:
            self._records[iid] = record
            self._in_flight.append(iid)
            window.ids.append(iid)

    def _execute_model(self, original):
        def execute_model(scheduler_output, *args, **kwargs):
            iid = getattr(scheduler_output, STAMP_ATTR, None)
            record = self._records.get(iid)
            if record is not None:
                self.timer.start(iid)
            self._dispatched_mode = None
            output = original(scheduler_output, *args, **kwargs)
            if record is not None and self._dispatched_mode is not None:
                record.graph_mode = self._dispatched_mode
            if output is None:  # sampling and drafting follow in sample_tokens
                self._awaiting_sample.append(iid if record is not None else None)
            elif record is not None:
                self.timer.stop(iid)
            return output
        return execute_model

    def _dispatch(self, original):
        def dispatch(*args, **kwargs):
            descriptor = original(*args, **kwargs)
            mode = getattr(descriptor, "cg_mode", None)
            self._dispatched_mode = None if mode is None else compat.graph_mode_name(mode)
            return descriptor
        return dispatch

    def _sample_tokens(self, original):
        def sample_tokens(*args, **kwargs):
            output = original(*args, **kwargs)
            iid = self._awaiting_sample.popleft() if self._awaiting_sample else None
            if iid is not None:
                self.timer.stop(iid)
            return output
        return sample_tokens

    def _update_from_output(self, original):
        def update_from_output(scheduler_output, model_runner_output, *args, **kwargs):
            iid = getattr(scheduler_output, STAMP_ATTR, None)
            if iid is not None:
                self._book_output(iid, model_runner_output)
            result = original(scheduler_output, model_runner_output, *args, **kwargs)
            self._collect(self.timer.poll())
            return result
        return update_from_output

    def _book_output(self, iid: int, model_runner_output) -> None:
        with self._lock:
            if iid in self._in_flight:
                self._in_flight.remove(iid)
            record = self._records.get(iid)
            if record is None:
                return
            record.accepted = compat.accepted_tokens(model_runner_output)
            record.graph_mode = (compat.cudagraph_mode_of_step(model_runner_output)
                                 or record.graph_mode)
            self._correct_in_flight(record)

    def _correct_in_flight(self, done: IterationRecord) -> None:
        """Iterations scheduled before `done`'s output arrived assumed all its drafts were
        accepted; book the rejected ones against the same request and preemption count."""
        drafted = {(r.request_id, r.preemptions): r.draft_tokens
                   for r in done.rows if r.draft_tokens}
        if not drafted:
            return
        accepted = done.accepted or {}
        for later_id in self._in_flight:
            later = self._records.get(later_id)
            if later is None or later_id < done.native_iteration_id:
                continue
            for r in later.rows:
                drafts = drafted.get((r.request_id, r.preemptions))
                if not drafts:
                    continue
                rejected = drafts - max(accepted.get(r.request_id, 0) - 1, 0)
                if rejected > 0:
                    later.corrections.append((r.request_id, r.preemptions,
                                              done.native_iteration_id, rejected))
