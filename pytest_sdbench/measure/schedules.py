"""How a collection repeats its points, as a schedule the collector runs: in rounds (the
default: after the warm-up pass over the grid, each round measures every point once, in a
fresh seeded order, so that a point's samples spread over the whole collection and their
spread is the host's true noise; until pinned, points whose median is not yet pinned take
more rounds, up to a cap), or back to back (the v4 policy: a point's repeats one after the
other, kept as an explicit choice). A host-speed canary is read before and after every
round."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from ..wire.model import Observation
from ..wire.points import point_label
from ..wire.rounds import CanarySample, PointRef, UntilPinned, needs_another_round, round_order
from .observer import TimingMissing
from .result import CollectionResult, PointFailed, PointState


class Collector(Protocol):
    """What a schedule drives (measure.collector.Collector)."""
    result: CollectionResult
    total: int

    def canary(self) -> CanarySample: ...
    def touching(self, order: Iterable[PointRef]) -> Iterator[PointRef]: ...
    def step(self, label: str) -> None: ...
    def prepare(self, ref: PointRef, point: Any) -> PointState: ...
    def measure(self, ref: PointRef, state: PointState, round_index: int,
                reseed: bool) -> list[Observation]: ...
    def keep(self, observations: list[Observation]) -> None: ...
    def fail(self, ref: PointRef, exc: Exception, round_index: int | None = None) -> None: ...
    def tick(self) -> None: ...
    def on_point(self, result: CollectionResult) -> None: ...
    def end_round(self, position: int) -> None: ...


class Schedule(Protocol):
    def run(self, collector: Collector, points: dict) -> None: ...


def _label(ref: PointRef, points: dict) -> str:
    return f"{ref.phase}[{ref.point_index}] {point_label(points[ref])}"


class BackToBack:
    """Each point warmed up, then its repeats one after the other: one round, in grid
    order, bracketed by the canary."""

    def __init__(self, repeats: int):
        self.repeats = repeats

    def run(self, collector: Collector, points: dict) -> None:
        collector.total = len(points) * (1 + self.repeats)
        order = tuple(sorted(points))
        current = collector.result.begin_round(0, order, collector.canary())
        for ref in collector.touching(order):
            label = _label(ref, points)
            collector.step(f"warm-up {label}")
            try:
                state = collector.prepare(ref, points[ref])
                for repeat in range(self.repeats):
                    collector.step(f"repeat {repeat + 1}/{self.repeats} {label}")
                    collector.keep(collector.measure(ref, state, 0, reseed=False))
            except (PointFailed, TimingMissing) as exc:
                collector.fail(ref, exc)
                collector.tick()
                collector.on_point(collector.result)
        collector.end_round(current)


class Rounds:
    """Every point warmed up (grid order), then rounds: each round measures its points once
    in its seeded order, bracketed by the canary; a point takes part while
    wire.rounds.needs_another_round says so (the fixed rounds, then until pinned)."""

    def __init__(self, repeats: int, seed: int, until_pinned: UntilPinned | None):
        self.repeats, self.seed, self.until_pinned = repeats, seed, until_pinned

    def run(self, collector: Collector, points: dict) -> None:
        fixed, until = self.repeats, self.until_pinned
        collector.total = len(points) * (1 + fixed)
        states: dict[PointRef, PointState] = {}
        for ref in collector.touching(sorted(points)):
            collector.step(f"warm-up {_label(ref, points)}")
            try:
                states[ref] = collector.prepare(ref, points[ref])
            except (PointFailed, TimingMissing) as exc:
                collector.fail(ref, exc)
        collector.tick()
        collector.on_point(collector.result)
        index = 0
        while True:
            members = [ref for ref, state in states.items()
                       if needs_another_round(state.seconds, fixed, until)]
            if not members:
                break
            order = round_order(members, self.seed, index)
            if index >= fixed:
                collector.total += len(order)
            current = collector.result.begin_round(index, order, collector.canary())
            for ref in collector.touching(order):
                collector.step(f"round {index + 1}{'' if until else f'/{fixed}'} "
                               f"{_label(ref, points)}")
                try:
                    collector.keep(collector.measure(ref, states[ref], index, reseed=True))
                except (PointFailed, TimingMissing) as exc:
                    collector.fail(ref, exc, index)
                    del states[ref]
                    collector.tick()
                    collector.on_point(collector.result)
            collector.end_round(current)
            index += 1
