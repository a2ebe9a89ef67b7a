"""testing.restoration_violations on a stand-in engine whose probe after a benchmark differs
from its start-up baseline in one way at a time (on the CPU engine both dispatcher and
synthetic rates are empty, so only constructed probes reach those branches), and the
tensor-parallel gather of every rank's problems and tokens."""

from dataclasses import replace

import pytest

from pytest_sdbench.engine import ranks
from pytest_sdbench.engine.surface import ServingProbe
from pytest_sdbench.plugin.testing import restoration_violations

BASELINE = ServingProbe(tokens=(11, 12, 13), scheduler_attrs=frozenset({"requests", "waiting"}),
                        worker_attrs=frozenset({"model_runner"}),
                        dispatcher_attrs=frozenset({"graphs"}), synthetic_rates=None)


class _Engine:
    """What restoration_violations reads of a single-rank engine: probe() and baseline."""

    def __init__(self, after: ServingProbe, baseline: ServingProbe = BASELINE):
        self.after, self.baseline = after, baseline

    def probe(self) -> ServingProbe:
        return self.after


def test_an_engine_as_it_started_has_no_violations():
    assert restoration_violations(_Engine(BASELINE)) == []


@pytest.mark.parametrize("changed, message", [
    ({"scheduler_attrs": BASELINE.scheduler_attrs | {"_sdbench_hook"}},
     "scheduler attributes differ: ['_sdbench_hook']"),
    ({"worker_attrs": frozenset()}, "worker attributes differ: ['model_runner']"),
    ({"dispatcher_attrs": BASELINE.dispatcher_attrs | {"execute_model"}},
     "CUDA-graph dispatcher attributes differ: ['execute_model']"),
    ({"synthetic_rates": (0.5, 0.25)},
     "synthetic acceptance rates changed: (0.5, 0.25) vs None"),
    ({"tokens": (11, 12, 99)}, "greedy output changed: (11, 12, 99) vs (11, 12, 13)"),
    ({"tokens": (11, 12)}, "served 2 tokens, not 3"),
], ids=["scheduler", "worker", "dispatcher", "synthetic-rates", "greedy-tokens", "length"])
def test_each_difference_from_the_baseline_is_named(changed, message):
    found = restoration_violations(_Engine(replace(BASELINE, **changed)))
    assert message in found
    if "tokens" not in changed:
        assert found == [message]


def test_under_synthetic_acceptance_other_tokens_are_no_violation_but_their_count_is():
    synthetic = replace(BASELINE, synthetic_rates=(0.5,))
    assert restoration_violations(_Engine(replace(synthetic, tokens=(1, 2, 3)), synthetic)) == []
    assert restoration_violations(_Engine(replace(synthetic, tokens=(1,)), synthetic)) == [
        "served 1 tokens, not 3"]


def _two_ranks(monkeypatch, rank_1: tuple[list[str], tuple[int, ...]]) -> list:
    """Fake the all-gather: this process is rank 0, `rank_1` is what rank 1 handed in."""
    handed_in: list = []

    def gather(value):
        handed_in.append(value)
        return [value, rank_1]
    monkeypatch.setattr(ranks, "gather_from_ranks", gather)
    return handed_in


def test_tensor_parallel_problems_name_their_rank(monkeypatch):
    handed_in = _two_ranks(monkeypatch, (["worker attributes differ: ['x']"], BASELINE.tokens))
    found = restoration_violations(_Engine(replace(BASELINE, worker_attrs=frozenset())))
    assert handed_in == [(["worker attributes differ: ['model_runner']"], BASELINE.tokens)]
    assert found == ["rank 0: worker attributes differ: ['model_runner']",
                     "rank 1: worker attributes differ: ['x']"]


def test_ranks_that_served_different_tokens_are_a_violation(monkeypatch):
    _two_ranks(monkeypatch, ([], (11, 12, 14)))
    assert restoration_violations(_Engine(BASELINE)) == [
        "the ranks served different greedy outputs: rank 0: [11, 12, 13]; "
        "rank 1: [11, 12, 14]"]


def test_ranks_that_agree_and_kept_their_baseline_have_no_violations(monkeypatch):
    _two_ranks(monkeypatch, ([], BASELINE.tokens))
    assert restoration_violations(_Engine(BASELINE)) == []


def test_a_tensor_parallel_proxy_hands_the_check_to_its_ranks():
    class Proxy:
        def rank_restoration_violations(self) -> list[str]:
            return ["rank 1: scheduler attributes differ: ['x']"]

        def probe(self):
            raise AssertionError("the proxy's ranks check, not the proxy")
    assert restoration_violations(Proxy()) == ["rank 1: scheduler attributes differ: ['x']"]
