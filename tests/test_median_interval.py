"""The median's distribution-free (order-statistic) confidence interval, checked against the
binomial coverage written out and against a simulation."""

import math
import random

import pytest

from pytest_sdbench.wire.rounds import median_interval_rank, order_statistic_half_width


def _coverage(n: int, k: int) -> float:
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n


@pytest.mark.parametrize("n", range(1, 41))
def test_the_rank_is_the_widest_coverage_of_at_least_95_percent(n):
    k = median_interval_rank(n, 0.95)
    if n < 6:     # P(B = 0) = 1/32 > 2.5% at n = 5: no 95% interval from so few samples
        assert k is None
        return
    assert k is not None
    assert _coverage(n, k) >= 0.95
    assert k + 1 > (n + 1) // 2 or _coverage(n, k + 1) < 0.95


def test_known_ranks():
    # n = 6: [x1, x6], 96.9%; n = 10: [x2, x9], 97.9%; n = 20: [x6, x15], 95.9%
    assert [median_interval_rank(n) for n in (6, 10, 20)] == [1, 2, 6]


def test_the_half_width_is_the_farther_end_relative_to_the_median():
    assert order_statistic_half_width([1.0] * 5) is None
    width = order_statistic_half_width([9.0, 10.0, 10.0, 10.0, 10.0, 12.0])
    assert width == pytest.approx(0.2)      # median 10, ends 9 and 12


def test_the_interval_covers_the_median_as_stated_for_skewed_noise():
    rng, n, trials = random.Random(7), 8, 4000
    k = median_interval_rank(n)
    assert k is not None
    true_median = math.log(2)     # of an exponential(1): skewed, far from normal
    covered = 0
    for _ in range(trials):
        ranked = sorted(rng.expovariate(1.0) for _ in range(n))
        covered += ranked[k - 1] <= true_median <= ranked[n - k]
    assert covered / trials == pytest.approx(_coverage(n, k), abs=0.015)
