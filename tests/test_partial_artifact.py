"""How often a running collection's partial artifact is written (PartialArtifact.on_point):
every PARTIAL_WRITE_SECONDS, later where a write takes longer than PARTIAL_WRITE_SHARE of the
time, and at every round's end. Pure logic: a fake clock, and a write that only takes time."""

import itertools
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_sdbench.run import partial
from pytest_sdbench.run.partial import PARTIAL_WRITE_SECONDS, PARTIAL_WRITE_SHARE, PartialArtifact


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = _Clock()
    monkeypatch.setattr(partial.time, "monotonic", fake)
    return fake


def _checkpoint(clock, write_seconds: float) -> tuple[PartialArtifact, list[float]]:
    checkpoint = PartialArtifact(None, Path("."), "name", "run", None, None, print)  # type: ignore[arg-type]
    written: list[float] = []

    def write(cause):   # a write that takes write_seconds
        written.append(clock.now)
        clock.now += write_seconds
    checkpoint.write = write  # type: ignore[method-assign]
    return checkpoint, written


def _result(rounds_ended: int):
    return SimpleNamespace(rounds=[SimpleNamespace(canary_after=object())] * rounds_ended)


def _points_every(checkpoint, clock, seconds: float, until: float, rounds_ended: int = 0):
    while clock.now < until:
        checkpoint.on_point(_result(rounds_ended))
        clock.now += seconds


def test_a_quick_write_comes_every_checkpoint_seconds(clock):
    checkpoint, written = _checkpoint(clock, write_seconds=0.01)
    _points_every(checkpoint, clock, 0.5, clock.now + 35)
    gaps = [b - a for a, b in itertools.pairwise(written)]
    assert len(written) == 4, written
    assert all(PARTIAL_WRITE_SECONDS <= g <= PARTIAL_WRITE_SECONDS + 0.6 for g in gaps), gaps


def test_a_slow_write_keeps_to_its_share_of_the_time(clock):
    cost = 3.0   # a large artifact: the next write waits cost / share = 60 s after it ends
    checkpoint, written = _checkpoint(clock, write_seconds=cost)
    _points_every(checkpoint, clock, 0.5, clock.now + 3 * (cost + cost / PARTIAL_WRITE_SHARE))
    gaps = [b - a for a, b in itertools.pairwise(written)]
    assert len(written) >= 3, written
    assert all(cost + cost / PARTIAL_WRITE_SHARE <= g <= cost + cost / PARTIAL_WRITE_SHARE + 0.6
               for g in gaps), gaps


def test_every_round_end_is_written_however_recent_the_last_write(clock):
    checkpoint, written = _checkpoint(clock, write_seconds=3.0)
    checkpoint.on_point(_result(0))
    clock.now += 0.5
    checkpoint.on_point(_result(0))   # too soon, same round
    clock.now += 0.5
    checkpoint.on_point(_result(1))   # a round ended
    clock.now += 0.5
    checkpoint.on_point(_result(1))   # too soon again
    assert len(written) == 2, written
