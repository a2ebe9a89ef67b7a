"""The rules of rounds (pytest_sdbench.wire.rounds), pure logic: the seeded order of a round,
the median's confidence interval, when a point takes another round, why it stopped, the
canary's spread; and the options that choose them. How a real collection follows them:
tests/test_collection.py."""

import argparse
import math
import statistics

import pytest

from pytest_sdbench.engine.placement import CpuListError, parse_cpus
from pytest_sdbench.run.options import cpu_list, half_width, repeat_plan
from pytest_sdbench.wire.contract import (
    CANARY_WORKLOAD,
    MEDIAN_SE_FACTOR,
    MIN_PINNED_ROUNDS,
    PINNED_CONFIDENCE,
    PINNED_Z,
    REPEAT_BACK_TO_BACK,
    STOP_FIXED,
    STOP_NOT_FINISHED,
    STOP_PINNED,
    STOP_ROUND_CAP,
)
from pytest_sdbench.wire.rounds import (
    CanarySample,
    PointRef,
    RepeatPlan,
    Round,
    UntilPinned,
    canary_readings,
    canary_spread,
    median_half_width,
    needs_another_round,
    point_canary_spread,
    round_order,
    stop_rule,
)

REFS = [PointRef("decode", i) for i in range(6)] + [PointRef("prefill", i) for i in range(5)]


def test_a_round_measures_prefill_before_decode_each_phase_shuffled():
    order = round_order(REFS, seed=0, round_index=0)
    assert sorted(order) == sorted(REFS)
    phases = [r.phase for r in order]
    assert phases == ["prefill"] * 5 + ["decode"] * 6
    assert [r.point_index for r in order[:5]] != [0, 1, 2, 3, 4]   # shuffled (seed 0)


def test_the_order_is_a_pure_function_of_seed_round_and_points():
    assert round_order(REFS, 7, 3) == round_order(list(reversed(REFS)), 7, 3)
    orders = {round_order(REFS, 7, r) for r in range(5)}
    assert len(orders) == 5                       # a fresh order each round
    assert round_order(REFS, 7, 0) != round_order(REFS, 8, 0)   # and per seed
    # Pinned to its value: random.Random(str) is stable across Python versions and
    # machines, so a reader anywhere recomputes the order an artifact recorded.
    assert [(r.phase[0], r.point_index) for r in round_order(REFS, 0, 0)] == [
        ("p", 3), ("p", 4), ("p", 1), ("p", 0), ("p", 2),
        ("d", 2), ("d", 1), ("d", 0), ("d", 4), ("d", 5), ("d", 3)]


def test_the_medians_half_width_is_the_stated_rule():
    """v6 states Student's t with n-1 degrees of freedom (2.776 at n = 5, 4.303 at n = 3,
    written out from a t table, not from the module's own table); v5 and older the normal
    z = 1.96 at every n."""
    seconds = [1.0, 1.1, 0.9, 1.05, 0.95]
    se = MEDIAN_SE_FACTOR * statistics.stdev(seconds) / math.sqrt(5) / 1.0
    assert median_half_width(seconds) == pytest.approx(2.776445 * se)
    assert median_half_width(seconds, "normal_z") == pytest.approx(PINNED_Z * se)
    three = [1.0, 1.1, 0.9]
    assert median_half_width(three) == pytest.approx(
        4.302653 * MEDIAN_SE_FACTOR * statistics.stdev(three) / math.sqrt(3))
    many = [1.0 + 0.01 * (i % 7) for i in range(40)]   # past the table: within 0.2% of t
    assert median_half_width(many) == pytest.approx(
        2.022691 * MEDIAN_SE_FACTOR * statistics.stdev(many) / math.sqrt(40) /
        statistics.median(many), rel=2e-3)
    assert median_half_width([1.0]) is None
    assert median_half_width([1.0, 1.0]) == 0.0
    assert PINNED_CONFIDENCE == 0.95
    assert PINNED_Z == pytest.approx(1.95996, abs=1e-5)


def test_a_point_takes_its_fixed_rounds_then_stops_without_until_pinned():
    assert needs_another_round([], 3, None)
    assert needs_another_round([1.0, 1.0], 3, None)
    assert not needs_another_round([1.0, 1.0, 1.0], 3, None)
    assert stop_rule([1.0, 1.0, 1.0], 3, None) == STOP_FIXED
    assert stop_rule([1.0, 1.0], 3, None) == STOP_NOT_FINISHED


def test_until_pinned_adds_rounds_until_the_median_is_pinned_or_the_cap():
    until = UntilPinned(max_half_width=0.02, confidence=PINNED_CONFIDENCE, max_rounds=6)
    steady = [1.0, 1.001, 0.999]
    assert not needs_another_round(steady, 3, until)        # pinned at 3
    assert stop_rule(steady, 3, until) == STOP_PINNED
    noisy = [1.0, 1.5, 0.7]
    assert needs_another_round(noisy, 3, until)
    assert stop_rule(noisy, 3, until) == STOP_NOT_FINISHED
    capped = [1.0, 1.5, 0.7, 1.3, 0.8, 1.2]
    assert not needs_another_round(capped, 3, until)
    assert stop_rule(capped, 3, until) == STOP_ROUND_CAP
    # Fewer than MIN_PINNED_ROUNDS samples never pin, whatever their spread.
    assert MIN_PINNED_ROUNDS == 3
    assert needs_another_round([1.0, 1.0], 1, until)


def test_the_canary_spread_summarises_every_reading():
    rounds = [Round(0, (PointRef("prefill", 0),), CanarySample(1.0, None),
                    CanarySample(1.2, None)),
              Round(1, (PointRef("prefill", 0),), CanarySample(0.8, None), None)]
    readings = canary_readings(rounds)
    assert [r.python_seconds for r in readings] == [1.0, 1.2, 0.8]   # the open round's one
    spread = canary_spread(CANARY_WORKLOAD, readings)
    assert spread.samples == 3
    assert spread.python_median_seconds == 1.0
    assert spread.python_spread == pytest.approx(0.4)
    assert spread.launch_median_seconds is None
    assert canary_spread(CANARY_WORKLOAD, []) is None
    assert point_canary_spread(rounds, [0]) == pytest.approx(0.2 / 1.1)
    assert point_canary_spread(rounds, []) is None


@pytest.mark.parametrize("values, message", [
    ({"repeats": 3, "repeat_order": REPEAT_BACK_TO_BACK, "until_pinned": 0.02},
     "--sdbench-until-pinned: takes rounds"),
    ({"repeats": 5, "until_pinned": 0.02, "max_rounds": 4},
     "--sdbench-max-rounds: 4 is fewer than the 5 rounds"),
    ({"repeats": 3, "max_rounds": 9}, "--sdbench-max-rounds: takes --sdbench-until-pinned"),
])
def test_a_repeat_plan_that_cannot_run_is_refused_naming_the_option(values, message):
    with pytest.raises(ValueError, match=message):
        repeat_plan(values, cli=False)


def test_the_options_build_the_plan():
    plan = repeat_plan({"repeats": 3, "until_pinned": 0.02, "max_rounds": 9, "order_seed": 4},
                       cli=True)
    assert plan == RepeatPlan(3, "rounds", 4, UntilPinned(0.02, PINNED_CONFIDENCE, 9))
    assert repeat_plan({}, cli=True) == RepeatPlan()


def test_widths_and_cpu_lists_parse_as_a_user_writes_them():
    assert half_width("2%") == pytest.approx(0.02)
    assert half_width("0.05") == 0.05
    for bad in ("0", "100%", "x", "-1%"):
        with pytest.raises(argparse.ArgumentTypeError):
            half_width(bad)
    assert parse_cpus("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert cpu_list("2") == (2,)
    for bad in ("3-1", "a", "-2", ""):
        with pytest.raises(CpuListError):
            parse_cpus(bad)
