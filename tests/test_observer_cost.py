"""The observer's start-up cost probe (observer.cost.measure) on the real engine: what it
returns, that it leaves the engine as it found it, and that it refuses to run on an engine
already wrapped or with bad settings, before any step. (Its figure is a timing: printed by
the benchmark, never asserted.)"""

import math

import pytest

from pytest_sdbench.measure.observer import NativeObserver
from pytest_sdbench.measure.observer_cost import measure
from pytest_sdbench.measure.timing import timer_for
from pytest_sdbench.plugin.testing import restoration_violations
from pytest_sdbench.wire.contract import BOOKING_MEASURED, OBSERVER_COST_METHOD
from pytest_sdbench.wire.records import ObserverCost

pytestmark = pytest.mark.sdbench_engine


def test_the_probe_measures_observed_steps_and_restores_the_engine(sdbench_engine):
    cost = measure(sdbench_engine, batch=2, prompt_tokens=16, max_tokens=6, rounds=2)
    assert isinstance(cost, ObserverCost)
    assert cost.method == OBSERVER_COST_METHOD
    assert cost.batch_size == 2
    assert len(cost.round_seconds_per_step) == 2
    assert all(math.isfinite(s) for s in cost.round_seconds_per_step)
    assert min(cost.round_seconds_per_step) <= cost.host_seconds_per_step \
        <= max(cost.round_seconds_per_step)
    # 2 rounds of one observed run each: a prefill step and at least one decode step
    # per run (6 tokens, at most K+1 a step)
    assert cost.steps >= 2 * 2
    assert restoration_violations(sdbench_engine) == []


@pytest.mark.parametrize("setting, value", [("batch", 0), ("prompt_tokens", 0),
                                             ("max_tokens", -1), ("rounds", 0)])
def test_bad_settings_are_refused_naming_the_setting(sdbench_engine, setting, value):
    with pytest.raises(ValueError, match=rf"^{setting}: must be >= 1, got {value}$"):
        measure(sdbench_engine, **{setting: value})


def test_an_engine_with_an_observer_attached_is_refused(sdbench_engine):
    observer = NativeObserver(sdbench_engine.llm, timer_for(sdbench_engine.device)).attach()
    try:
        with observer.window(BOOKING_MEASURED) as window:
            with pytest.raises(RuntimeError, match=r"'schedule'.*wrapped already"):
                measure(sdbench_engine)
        assert window.records == []   # refused before any step
    finally:
        observer.detach()
