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
from collections import deque
from contextlib import contextmanager

from ..engine import compat, step_reading
from ..wire.contract import Booking
from .iteration import IterationRecord, Window

STAMP_ATTR = "_sdbench_iteration_id"
_SCHEDULED = step_reading.FrozenSchedule._fields.index("scheduled")   # an idle step's is empty
_UNSTAMPED = 0      # what an output without a stamp reads as (native ids start at 1)
_ABSENT = object()  # the instance held no attribute of that name before attach()


class TimingMissing(RuntimeError):
    """An iteration's timing sample never arrived."""


class NativeObserver:
    """The wrappers run on the engine core's thread, one step after another (schedule and
    update_from_output are the scheduler's, called by the core's step; the worker's methods
    are called by that step too), so their shared state needs no lock.

    On the hot path the wrappers keep only plain values, in dicts keyed by native ID that
    live as long as the observer (bound into the wrappers once, at attach): the frozen
    schedule, the frozen output, the dispatched graph mode, and the IDs whose output arrived
    while an iteration was in flight. The IterationRecords are built from them when the
    window is settled."""

    def __init__(self, llm, timer):
        self._llm = llm
        self.timer = timer
        self._ids = itertools.count(1)
        # the open window's iterations, by native ID (emptied when it is settled)
        self._frozen: dict[int, tuple] = {}          # step_reading.freeze_schedule, at schedule()
        self._outputs: dict[int, tuple] = {}         # step_reading.freeze_output, when it arrived
        self._modes: dict[int, object] = {}          # the V2 runner's raw dispatch mode
        self._earlier: dict[int, list[int]] = {}     # outputs that arrived while in flight
        self._awaiting_sample: deque[int | None] = deque()  # None: an untimed iteration
        self._in_flight: deque[int] = deque()  # recorded, output not yet seen
        self._window: Window | None = None
        self._dispatched: list = [None]        # the last dispatch's raw mode (a cell)
        self._saved: list[tuple[object, str, object]] = []

    # ---- install / remove ---------------------------------------------------------------
    @property
    def attached(self) -> bool:
        return bool(self._saved)

    def attach(self) -> NativeObserver:
        if self.attached:
            raise RuntimeError("observer already attached")
        sched, worker = compat.scheduler(self._llm), compat.worker(self._llm)
        dispatcher = step_reading.graph_dispatcher(self._llm)
        self._wrap(sched, "schedule", lambda original: self._schedule(original, sched))
        self._wrap(sched, "update_from_output", self._update_from_output)
        self._wrap(worker, "execute_model",
                   self._execute_model if dispatcher is None else self._execute_model_dispatched)
        self._wrap(worker, "sample_tokens", self._sample_tokens)
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
    def window(self, booking: Booking):
        self._take_kept()   # what a window that raised, and so never settled, left behind
        window = Window(booking)
        self._window = window
        try:
            yield window
        finally:
            self._window = None
        self._settle(window)

    def steps_done(self) -> int:
        """The open window's steps that scheduled work and whose output has arrived: a
        run's progress, read between engine steps (a count over the window's few steps)."""
        frozen = self._frozen
        return sum(1 for iid in self._outputs if frozen[iid][_SCHEDULED])

    def steps_scheduled(self) -> int:
        """The open window's steps that scheduled work, their output come or not (under
        async scheduling one step more than steps_done: the step in flight)."""
        return sum(1 for raw in self._frozen.values() if raw[_SCHEDULED])

    def output_seen(self, request_ids) -> bool:
        """Whether the output of a step of the open window that scheduled one of these
        requests has arrived."""
        frozen = self._frozen
        return any(any(r in frozen[iid][_SCHEDULED] for r in request_ids)
                   for iid in self._outputs)

    def _take_kept(self) -> tuple[dict, dict, dict, dict]:
        """What the wrappers kept for the window (frozen schedules, outputs, graph modes,
        in-flight links), taken out: the wrappers' own state is left empty. Only at idle,
        where no step is between execute_model and sample_tokens (a step that died there
        would otherwise pair the next step's sample with its own ID)."""
        kept = (dict(self._frozen), dict(self._outputs), dict(self._modes),
                dict(self._earlier))
        for own in (self._frozen, self._outputs, self._modes, self._earlier):
            own.clear()
        self._in_flight.clear()
        self._awaiting_sample.clear()
        return kept

    def _settle(self, window: Window) -> None:
        """At idle: take what the wrappers kept, read every sample the timer holds (waiting
        for the device once, for the last), build the window's records, join the samples by
        native ID, and hand the window its records. A settled record takes no later output
        or correction (as if its output never came)."""
        frozen, outputs, modes, earlier = self._take_kept()
        samples = self.timer.drain()
        records = {iid: IterationRecord(iid, window.booking, raw) for iid, raw in frozen.items()}
        for iid, raw_output in outputs.items():
            records[iid].raw_output = raw_output
        for iid, mode in modes.items():
            records[iid].dispatched_mode = mode
        for iid, done in earlier.items():
            records[iid].outputs_in_flight = [records[d] for d in done]
        for sample in samples:
            record = records.get(sample.native_iteration_id)
            if record is not None:
                record.timing = sample
        window.ids.extend(records)
        window.records.extend(records.values())
        missing = [iid for iid, record in records.items() if record.timing is None]
        if missing:
            raise TimingMissing(f"no timing sample arrived for native iteration ids {missing}")

    # ---- wrappers (the hot path: no typed object, no per-request Python loop; every name
    # they use is bound once, when attach() builds them) -------------------------------
    def _schedule(self, original, sched):
        frozen, in_flight, ids = self._frozen, self._in_flight, self._ids
        freeze = step_reading.freeze_schedule

        def schedule(*args, **kwargs):
            output = original(*args, **kwargs)
            iid = next(ids)
            output._sdbench_iteration_id = iid   # STAMP_ATTR
            # Traffic outside windows (the engine serving ordinary requests while attached)
            # is stamped but neither frozen nor timed.
            if self._window is not None:
                frozen[iid] = freeze(output, sched)
                in_flight.append(iid)
            return output
        return schedule

    def _execute_model(self, original):
        frozen, awaiting = self._frozen, self._awaiting_sample
        start, stop = self.timer.start, self.timer.stop

        def execute_model(scheduler_output, *args, **kwargs):
            iid = getattr(scheduler_output, STAMP_ATTR, _UNSTAMPED)
            if iid not in frozen:   # unstamped, or outside a window: not timed
                output = original(scheduler_output, *args, **kwargs)
                if output is None:  # sampling and drafting follow in sample_tokens
                    awaiting.append(None)
                return output
            start(iid)
            output = original(scheduler_output, *args, **kwargs)
            if output is None:
                awaiting.append(iid)
            else:
                stop(iid)
            return output
        return execute_model

    def _execute_model_dispatched(self, original):
        """execute_model, and the graph mode the V2 runner dispatched during it."""
        frozen, awaiting, modes = self._frozen, self._awaiting_sample, self._modes
        start, stop, dispatched = self.timer.start, self.timer.stop, self._dispatched

        def execute_model(scheduler_output, *args, **kwargs):
            iid = getattr(scheduler_output, STAMP_ATTR, _UNSTAMPED)
            if iid not in frozen:   # unstamped, or outside a window: not timed
                output = original(scheduler_output, *args, **kwargs)
                if output is None:  # sampling and drafting follow in sample_tokens
                    awaiting.append(None)
                return output
            start(iid)
            dispatched[0] = None
            output = original(scheduler_output, *args, **kwargs)
            if output is None:
                awaiting.append(iid)
            else:
                stop(iid)
            if dispatched[0] is not None:
                modes[iid] = dispatched[0]
            return output
        return execute_model

    def _dispatch(self, original):
        dispatched = self._dispatched

        def dispatch(*args, **kwargs):
            descriptor = original(*args, **kwargs)
            # the raw mode: it is named after the window (IterationRecord.graph_mode)
            dispatched[0] = getattr(descriptor, "cg_mode", None)
            return descriptor
        return dispatch

    def _sample_tokens(self, original):
        awaiting, stop = self._awaiting_sample, self.timer.stop

        def sample_tokens(*args, **kwargs):
            output = original(*args, **kwargs)
            if awaiting:
                iid = awaiting.popleft()
                if iid is not None:
                    stop(iid)
            return output
        return sample_tokens

    def _update_from_output(self, original):
        frozen, outputs, earlier, in_flight = (self._frozen, self._outputs, self._earlier,
                                               self._in_flight)
        freeze = step_reading.freeze_output

        def update_from_output(scheduler_output, model_runner_output, *args, **kwargs):
            iid = getattr(scheduler_output, STAMP_ATTR, _UNSTAMPED)
            if iid in frozen:
                # Read before the scheduler consumes the output (it trims tokens in place).
                outputs[iid] = freeze(model_runner_output)
                if in_flight and in_flight[0] == iid:
                    in_flight.popleft()
                elif iid in in_flight:
                    in_flight.remove(iid)
                # Later iterations still in flight were scheduled assuming every draft of
                # this one accepted: note it; their corrections are derived after the window.
                for later in in_flight:
                    if later > iid:
                        if later in earlier:
                            earlier[later].append(iid)
                        else:
                            earlier[later] = [iid]
            return original(scheduler_output, model_runner_output, *args, **kwargs)
        return update_from_output
