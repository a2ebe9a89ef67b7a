"""The warm-up policy (contract.WARMUP_RULE, by_shape_seeded): every point is warmed up
unbooked before it is measured. The first point of each compiled shape runs until its step
time is stable (settled); a later point of a settled shape takes one pass (its coordinate's
first run), or none where its seed warms it (a decode point: its first run, its first
sample, must then run a settled shape, else it warms up and runs again)."""

from __future__ import annotations

from ..wire.contract import (
    BOOKING_WARMUP,
    GRAPH_MODES,
    WARMUP_MAX_PASSES,
    WARMUP_SHAPE_PASSES,
)
from ..wire.points import compiled_shape
from .phase import PhaseRunner
from .result import PointState, settled
from .runs import EngineRuns


class ShapeWarmup:
    def __init__(self, runs: EngineRuns, capture_sizes: tuple[int, ...] | None):
        self.runs = runs
        self.capture_sizes = capture_sizes
        self.shapes: set[tuple[str, str, int]] = set()   # settled in this warm-up

    def shape_run(self, point, record) -> tuple[str, str, int]:
        """The compiled shape the point's record ran (wire.points.compiled_shape)."""
        return compiled_shape(point, self.runs.graph_mode(record), self.capture_sizes)

    def warm(self, state: PointState, runner: PhaseRunner) -> tuple[int, bool]:
        """Warm the point up, unbooked: (passes, settled). Its first run names its compiled
        shape; when an earlier point settled that shape, this one pass is its warm-up.
        Otherwise it runs until settled, and a settled shape is noted."""
        def once():
            return self.runs.seeded(state, runner.seed,
                                    lambda: runner.once(state, BOOKING_WARMUP)).record
        record = once()
        shape = self.shape_run(state.point, record)
        if shape in self.shapes:
            return WARMUP_SHAPE_PASSES, True
        times = [record.timing.seconds]
        while len(times) < WARMUP_MAX_PASSES and not settled(times):
            times.append(once().timing.seconds)
        if settled(times):
            self.shapes.add(shape)
        return len(times), settled(times)

    def seed_warms(self, point) -> bool:
        """Whether an earlier point settled a compiled shape this one could run (in any
        graph mode; its first run says which it ran: ran_settled)."""
        return any(compiled_shape(point, mode, self.capture_sizes) in self.shapes
                   for mode in GRAPH_MODES)

    def ran_settled(self, state: PointState, record) -> bool:
        """A point warmed by its seed alone: its first run's record ran a settled shape
        (else that run is discarded, and the point warms up and runs again)."""
        return self.shape_run(state.point, record) in self.shapes
