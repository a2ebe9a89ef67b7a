"""The warm-up rule (collection.settled) and the passes it drives (Collector._warm), on a
fake run_once that returns steps of given times: pure logic, no engine. (How rounds follow
the warm-up runs on the real engine: tests/test_collection.py.)"""

from types import SimpleNamespace as NS

from pytest_sdbench.collection import settled
from pytest_sdbench.collector import Collector
from pytest_sdbench.wire.contract import (
    BOOKING_WARMUP,
    WARMUP_MAX_PASSES,
    WARMUP_MIN_PASSES,
    WARMUP_TOLERANCE,
)


class FakeRuns:
    """run_once(booking) -> (record, outputs): the next warm-up time in turn, and a fixed
    time for measured runs; every booking asked for is kept, in order."""

    MEASURED_SECONDS = 1.0

    def __init__(self, warmup_seconds: list[float]):
        self.warmup_seconds = list(warmup_seconds)
        self.bookings: list[str] = []

    def __call__(self, booking: str):
        self.bookings.append(booking)
        seconds = self.warmup_seconds.pop(0) if booking == BOOKING_WARMUP \
            else self.MEASURED_SECONDS
        return NS(timing=NS(seconds=seconds)), f"outputs of run {len(self.bookings)}"


def _warm(warmup_seconds: list[float]):
    runs = FakeRuns(warmup_seconds)
    warmup = Collector(engine=None)._warm(None, runs)
    return runs, warmup


def test_settled_needs_the_minimum_passes():
    assert not settled([])
    assert settled([5.0] * WARMUP_MIN_PASSES)
    assert not settled([5.0] * (WARMUP_MIN_PASSES - 1))


def test_settled_compares_the_last_pass_with_the_one_before_within_the_tolerance():
    inside, outside = WARMUP_TOLERANCE * 0.99, WARMUP_TOLERANCE * 1.01
    head = [100.0] * (WARMUP_MIN_PASSES - 1)
    for sign in (1, -1):   # slower or faster than the pass before
        assert settled([*head, 10.0, 10.0 * (1 + sign * inside)])
        assert not settled([*head, 10.0, 10.0 * (1 + sign * outside)])
    assert not settled([10.0, 10.0, 20.0])   # only the last two count


def test_a_series_that_settles_stops_warming_up_at_the_pass_that_settles():
    assert WARMUP_MIN_PASSES <= 3 <= WARMUP_MAX_PASSES   # the series below needs it
    runs, warmup = _warm([10.0, 5.0, 5.0 * (1 + WARMUP_TOLERANCE / 2), 7.0, 7.0])
    assert warmup == (3, True)
    assert runs.warmup_seconds == [7.0, 7.0]   # the passes after settling never ran
    assert runs.bookings == [BOOKING_WARMUP] * 3


def test_a_steady_series_settles_after_the_minimum_passes():
    _, warmup = _warm([5.0] * WARMUP_MAX_PASSES)
    assert warmup == (WARMUP_MIN_PASSES, True)


def test_a_series_that_never_settles_stops_at_the_cap_unsettled():
    alternating = [10.0 if i % 2 else 5.0 for i in range(WARMUP_MAX_PASSES + 4)]
    runs, warmup = _warm(alternating)
    assert warmup == (WARMUP_MAX_PASSES, False)
    assert runs.bookings == [BOOKING_WARMUP] * WARMUP_MAX_PASSES


def test_a_series_that_settles_at_the_last_pass_allowed_is_settled():
    wide = [10.0 if i % 2 else 5.0 for i in range(WARMUP_MAX_PASSES - 1)]
    _, warmup = _warm([*wide, wide[-1]])
    assert warmup == (WARMUP_MAX_PASSES, True)
