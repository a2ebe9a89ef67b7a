"""What a phase runner answers, as pytest-xdist's schedulers answer one protocol: the
collector warms up, measures, repeats and keeps every phase's points the same way, and asks
the phase's runner only what differs (how a point is seeded, run and retained). A new phase
is a new runner."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..wire.contract import Booking, Phase
from ..wire.model import Observation
from ..wire.records import GpuClock
from .result import PointState


@dataclass
class Outcome:
    """One run of a point: the record whose time the warm-up reads and whose compiled shape
    it keys (the retained step, or the first of them), the run's steps and its outputs."""
    record: Any                      # iteration.IterationRecord
    steps: Sequence[Any] = field(default_factory=tuple)
    outputs: Any = None


class PhaseRunner(Protocol):
    """One phase's points: seeded, run once, and their retained steps as observations."""

    phase: Phase
    # The point's seed warms it when an earlier point settled its compiled shape (decode):
    # it then takes no warm-up pass, and its first run must run a settled shape.
    warmed_by_seed: bool

    def conditions(self, point: Any) -> AbstractContextManager[None]:
        """What the point's runs need set on the engine (synthetic acceptance), restored
        after."""
        ...

    def prepare(self, point: Any) -> PointState:
        """The point's prompts, seeded (computed into the prefix cache) where it needs it."""
        ...

    def seed(self, state: PointState) -> None:
        """Compute the point's prompts into the prefix cache again, unbooked."""
        ...

    def once(self, state: PointState, booking: Booking) -> Outcome:
        """One run of the point; PointFailed (or CacheMiss) when its steps are not exact."""
        ...

    def observations(self, index: int, state: PointState, outcome: Outcome,
                     clock: GpuClock | None, repeat: int,
                     round_index: int) -> Sequence[Observation]:
        """The run's retained steps, each checked against the point's shape."""
        ...
