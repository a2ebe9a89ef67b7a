"""One recorded iteration of the observer's window, and the window: what the hot path kept
as plain values (the frozen schedule, the frozen output, the dispatched graph mode, the
outputs that arrived while it was in flight), and the views derived from them off the hot
path, when the window is settled (rows, accepted counts, graph mode, rejection corrections,
the typed snapshot)."""

from __future__ import annotations

from dataclasses import replace

from ..engine import step_reading
from ..wire.contract import Booking
from ..wire.records import (
    QueueSnapshot,
    RejectionCorrection,
    RequestSnapshot,
    Snapshot,
    TimingSample,
)


class IterationRecord:
    """One recorded iteration, built when its window is settled from the plain values the
    hot path kept (the frozen schedule, the frozen output); the rows, the accepted counts,
    the graph mode, the rejection corrections and the typed snapshot are derived from them
    on first use."""
    __slots__ = ("_cache", "booking", "dispatched_mode", "native_iteration_id",
                 "outputs_in_flight", "raw_output", "raw_schedule", "timing")

    def __init__(self, native_iteration_id: int, booking: Booking, raw_schedule: tuple):
        self.native_iteration_id = native_iteration_id
        self.booking = booking
        self.raw_schedule = raw_schedule             # step_reading.freeze_schedule, at schedule()
        self.raw_output: tuple | None = None         # step_reading.freeze_output, when it arrived
        self.timing: TimingSample | None = None
        self.dispatched_mode: object = None          # the V2 runner's raw dispatch mode
        # earlier iterations whose output arrived while this one was in flight (async
        # scheduling): this snapshot assumed their drafts were all accepted (None: none)
        self.outputs_in_flight: list[IterationRecord] | None = None
        self._cache: dict | None = None

    def _derived(self, name: str, make):
        if self._cache is None:
            self._cache = {}
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]

    @property
    def frozen(self) -> step_reading.FrozenSchedule:
        return self._derived("frozen", lambda: step_reading.FrozenSchedule(*self.raw_schedule))

    @property
    def output(self) -> step_reading.FrozenOutput | None:
        """The step's output as update_from_output() received it (None: never seen)."""
        raw = self.raw_output
        return None if raw is None else self._derived("output",
                                                      lambda: step_reading.FrozenOutput(*raw))

    @property
    def rows(self) -> tuple[step_reading.ScheduledRow, ...]:
        return self._derived("rows", lambda: step_reading.scheduled_rows(self.frozen))

    @property
    def queue(self) -> tuple[int, int]:
        return self.frozen.waiting, self.frozen.running

    @property
    def total_scheduled_tokens(self) -> int:
        return self.frozen.total_scheduled_tokens

    @property
    def accepted(self) -> dict[str, int] | None:
        """Tokens gained per request, from the step's output (None: never seen)."""
        output = self.output
        return None if output is None else self._derived(
            "accepted", lambda: step_reading.gained_tokens(output))

    @property
    def graph_mode(self) -> str | None:
        """How the step ran: as its output reports it, else as the V2 runner dispatched
        it; None when neither says."""
        output = self.output
        reported = None if output is None else step_reading.graph_mode_of_stats(output.graph_stats)
        if reported is not None:
            return reported
        mode = self.dispatched_mode
        return None if mode is None else step_reading.graph_mode_name(mode)

    @property
    def corrections(self) -> list[tuple[str, int, int, int]]:
        """(request id, preemptions, from iteration id, rejected tokens): the drafts that
        earlier in-flight iterations had rejected, booked against the same request and
        preemption count."""
        return self._derived("corrections", self._corrections)

    def _corrections(self) -> list[tuple[str, int, int, int]]:
        found = []
        for done in self.outputs_in_flight or ():
            drafted = {(r.request_id, r.preemptions): r.draft_tokens
                       for r in done.rows if r.draft_tokens}
            if not drafted:
                continue
            accepted = done.accepted or {}
            for r in self.rows:
                drafts = drafted.get((r.request_id, r.preemptions))
                if not drafts:
                    continue
                rejected = drafts - max(accepted.get(r.request_id, 0) - 1, 0)
                if rejected > 0:
                    found.append((r.request_id, r.preemptions, done.native_iteration_id,
                                  rejected))
        return found

    @property
    def snapshot(self) -> Snapshot:
        """The frozen workload, as the scheduler emitted it."""
        return self._derived("snapshot", self._snapshot)

    def _snapshot(self) -> Snapshot:
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

    def accepted_drafts(self, snapshot: Snapshot,
                        full_depth: int | None = None) -> tuple[int, ...]:
        """Draft tokens each drafting request of the step had accepted, from its output. A
        step whose output the window never saw (under async scheduling, one scheduled for
        requests that then finished) gives none; with full_depth, only requests that
        verified that many drafts count (the last steps of a run may verify fewer)."""
        accepted = self.accepted
        if accepted is None:
            return ()
        return tuple(accepted[r.request_id] - 1 for r in snapshot.requests
                     if r.draft_tokens and r.request_id in accepted
                     and (full_depth is None or r.draft_tokens == full_depth))


class Window:
    """The iterations stamped while a window was open, joined once their timing arrived."""

    def __init__(self, booking: Booking):
        self.booking = booking
        self.ids: list[int] = []
        self.records: list[IterationRecord] = []
