"""The warm-up rule (measure.result.settled) and the passes it drives (ShapeWarmup.warm, the
by_shape rule), on a fake phase runner whose runs return steps of given times: pure logic, no
engine.
(How rounds follow the warm-up runs on the real engine, and the by_shape warm-up there:
tests/test_collection.py.)"""

from types import SimpleNamespace as NS

from pytest_sdbench.measure.phase import Outcome
from pytest_sdbench.measure.result import settled
from pytest_sdbench.measure.warmup import ShapeWarmup
from pytest_sdbench.wire.contract import (
    BOOKING_WARMUP,
    GRAPH_EAGER,
    GRAPH_FULL,
    GRAPH_PIECEWISE,
    WARMUP_MAX_PASSES,
    WARMUP_MIN_PASSES,
    WARMUP_SHAPE_PASSES,
    WARMUP_TOLERANCE,
)
from pytest_sdbench.wire.points import DecodePoint, PrefillPoint, compiled_shape

POINT = NS(point=DecodePoint(batch_size=4, context_tokens=512, draft_depth=3))


class FakeRuns:
    """What the warm-up asks of the engine's runs: a record's graph mode, a run (no cache
    miss here)."""

    def graph_mode(self, record):
        return record.graph_mode

    def seeded(self, state, seed, run):
        return run()


class FakeRunner:
    """once(state, booking) -> Outcome: the next warm-up time in turn, and a fixed time for
    measured runs; every booking asked for is kept, in order."""

    MEASURED_SECONDS = 1.0

    def __init__(self, warmup_seconds: list[float], graph_mode: str = GRAPH_EAGER):
        self.warmup_seconds = list(warmup_seconds)
        self.graph_mode = graph_mode
        self.bookings: list[str] = []

    def seed(self, state) -> None:
        pass

    def once(self, state, booking: str) -> Outcome:
        self.bookings.append(booking)
        seconds = self.warmup_seconds.pop(0) if booking == BOOKING_WARMUP \
            else self.MEASURED_SECONDS
        return Outcome(NS(timing=NS(seconds=seconds), graph_mode=self.graph_mode))


def _shapes() -> ShapeWarmup:
    return ShapeWarmup(FakeRuns(), None)   # type: ignore[arg-type]


def _warm(warmup_seconds: list[float], shapes: ShapeWarmup | None = None, state=POINT,
          graph_mode: str = GRAPH_EAGER):
    runs = FakeRunner(warmup_seconds, graph_mode)
    warmup = (shapes or _shapes()).warm(state, runs)   # type: ignore[arg-type]
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


def test_a_point_of_a_shape_an_earlier_point_settled_takes_one_pass():
    collector = _shapes()
    _, first = _warm([10.0, 5.0, 5.0], collector)
    assert first == (3, True)
    same_shape = NS(point=DecodePoint(batch_size=4, context_tokens=4096, draft_depth=3))
    runs, warmup = _warm([7.0, 7.0, 7.0], collector, same_shape)
    assert warmup == (WARMUP_SHAPE_PASSES, True)
    assert runs.bookings == [BOOKING_WARMUP] * WARMUP_SHAPE_PASSES


def test_a_shape_whose_first_point_never_settled_warms_its_next_point_until_stable():
    collector = _shapes()
    alternating = [10.0 if i % 2 else 5.0 for i in range(WARMUP_MAX_PASSES)]
    assert _warm(alternating, collector)[1] == (WARMUP_MAX_PASSES, False)
    same_shape = NS(point=DecodePoint(batch_size=4, context_tokens=4096, draft_depth=3))
    assert _warm([7.0, 7.0], collector, same_shape)[1] == (WARMUP_MIN_PASSES, True)


def test_another_batch_or_graph_mode_is_another_shape():
    collector = _shapes()
    _warm([5.0, 5.0], collector)
    other_batch = NS(point=DecodePoint(batch_size=8, context_tokens=512, draft_depth=3))
    assert _warm([7.0, 7.0], collector, other_batch)[1] == (WARMUP_MIN_PASSES, True)
    assert _warm([7.0, 7.0], collector, POINT, GRAPH_FULL)[1] == (WARMUP_MIN_PASSES, True)
    assert _warm([7.0], collector, POINT, GRAPH_FULL)[1] == (WARMUP_SHAPE_PASSES, True)


def test_a_compiled_shape_is_the_token_count_padded_to_the_capture_size_it_ran_at():
    sizes = (1, 2, 4, 8, 16, 32)
    decode = DecodePoint(batch_size=3, context_tokens=512, draft_depth=3)   # 12 tokens
    assert compiled_shape(decode, GRAPH_FULL, sizes) == ("decode", GRAPH_FULL, 16)
    assert compiled_shape(decode, GRAPH_EAGER, sizes) == ("decode", GRAPH_EAGER, 12)
    assert compiled_shape(decode, GRAPH_FULL, None) == ("decode", GRAPH_FULL, 12)
    prefill = PrefillPoint(batch_size=2, new_tokens=40, cached_prefix_tokens=0)  # over 32
    assert compiled_shape(prefill, GRAPH_PIECEWISE, sizes) == ("prefill", GRAPH_PIECEWISE, 80)
    small = PrefillPoint(batch_size=1, new_tokens=16, cached_prefix_tokens=64)
    assert compiled_shape(small, GRAPH_PIECEWISE, sizes) == ("prefill", GRAPH_PIECEWISE, 16)
