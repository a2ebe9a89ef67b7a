"""Mixed points on the real vLLM engine (CPU in CI): the retained step is one step of a
running decode batch that holds exactly the point's decodes and prefills, joined to its
native time by native ID; a run whose prefills are not admitted in that step (dropped, or a
step late) fails the point, never retains another step."""

import pytest

from pytest_sdbench.artifact.validate.report import validate_data
from pytest_sdbench.plugin.testing import observation_violations
from pytest_sdbench.wire import typed
from pytest_sdbench.wire.contract import (
    MIXED_STEP_INDEX,
    PHASE_MIXED,
    PHASES,
    POLICY_MIXED_STEP,
    STATUS_COMPLETE,
    STATUS_FAILED,
)
from pytest_sdbench.wire.points import parse_grid

pytestmark = pytest.mark.sdbench_engine


@pytest.fixture(scope="module")
def mixed_grid(sdbench_engine):
    block, k = sdbench_engine.block_size, sdbench_engine.spec.draft_depth
    al = sdbench_engine.spec.synthetic_acceptance_length
    point = {"draft_depth": k, "acceptance_length": al}
    return parse_grid({
        "prefill": [{"batch_size": 1, "new_tokens": 48, "cached_prefix_tokens": 0}],
        "decode": [{"batch_size": 2, "context_tokens": 96, "draft_depth": k,
                    "acceptance_length": al}],
        "mixed": [{**point, "decode_batch_size": 3, "context_tokens": 96,
                   "prefill_batch_size": 1, "prefill_tokens": 40},
                  {**point, "decode_batch_size": 2, "context_tokens": 2 * block,
                   "prefill_batch_size": 2, "prefill_tokens": 2 * block,
                   "cached_prefix_tokens": block}]})


def _kinds(snapshot):
    decoding = [r for r in snapshot.requests if not r.in_prefill]
    prefilling = [r for r in snapshot.requests if r.in_prefill]
    return decoding, prefilling


def test_a_mixed_point_retains_one_step_of_its_decodes_and_its_prefills(sdbench_collect,
                                                                      mixed_grid,
                                                                      sdbench_engine):
    run = sdbench_collect("mixed", mixed_grid, repeats=2)
    a = run.artifact
    assert a.status == STATUS_COMPLETE, a.coverage.skipped_points
    assert (a.prefill, a.decode) == ((), ())
    assert a.measurement_policy.mixed == POLICY_MIXED_STEP
    assert len(a.mixed) == 2 * len(mixed_grid.mixed)   # one step a sample
    k = sdbench_engine.spec.draft_depth
    for o in a.mixed:
        p = o.point
        decoding, prefilling = _kinds(o.snapshot)
        assert o.step_index == MIXED_STEP_INDEX
        assert o.snapshot.phase == PHASE_MIXED
        assert [(r.new_tokens, r.draft_tokens) for r in decoding] == \
            [(1, k)] * p.decode_batch_size
        assert all(r.kv_tokens >= p.context_tokens + 1 for r in decoding)
        assert [(r.new_tokens, r.kv_tokens, r.draft_tokens, r.prompt_tokens)
                for r in prefilling] == [(p.prefill_tokens, p.cached_prefix_tokens, 0,
                                          p.cached_prefix_tokens + p.prefill_tokens)] \
            * p.prefill_batch_size
        assert o.snapshot.total_scheduled_tokens == p.scheduled_tokens
        assert o.cache_hit_tokens == (p.cached_prefix_tokens,) * p.prefill_batch_size
        assert o.native_iteration_id == o.snapshot.native_iteration_id == \
            o.timing.native_iteration_id
        assert o.timing.seconds > 0
    assert observation_violations(a) == []
    assert validate_data(typed.encode(a)).ok


def test_agg_measures_mixed_points_after_the_others_in_every_round(sdbench_collect,
                                                                   mixed_grid):
    a = sdbench_collect("agg", mixed_grid, repeats=2).artifact
    assert a.status == STATUS_COMPLETE, a.coverage.skipped_points
    assert [len({o.point_index for o in getattr(a, phase)}) for phase in PHASES] == [1, 1, 2]
    for r in a.rounds:
        phases = [ref.phase for ref in r.order]
        assert phases == sorted(phases, key=PHASES.index)   # prefill, decode, then mixed
    assert validate_data(typed.encode(a)).ok


@pytest.mark.parametrize("fault", ["dropped", "a step late"])
def test_a_run_whose_prefills_miss_the_planned_step_fails_the_point(sdbench_collect,
                                                                     mixed_grid,
                                                                     sdbench_engine,
                                                                     monkeypatch, fault):
    """The prefills never added (dropped), or added so that the scheduler admits them two
    steps later: no mixed step of the point is retained; it is skipped, naming why."""
    from pytest_sdbench.measure.runs import EngineRuns
    admitting = EngineRuns.run_admitting

    def faulty(self, prompts, max_tokens, later, booking, admit_at):
        if fault == "dropped":
            return admitting(self, prompts, max_tokens, [], booking, admit_at)
        return admitting(self, prompts, max_tokens, later, booking, admit_at + 2)
    monkeypatch.setattr(EngineRuns, "run_admitting", faulty)
    a = sdbench_collect("mixed", parse_grid({"mixed": [typed.encode(mixed_grid.mixed[0])]}),
                        repeats=1).artifact
    assert a.status == STATUS_FAILED
    assert a.mixed == ()
    (skipped,) = a.coverage.skipped_points
    want = ("admitted the point's prefills" if fault == "dropped" else
            f"admitted the prefills in run step {MIXED_STEP_INDEX + 2}, not the planned "
            f"step {MIXED_STEP_INDEX}")
    assert want in skipped.reason
    assert validate_data(typed.encode(a)).ok   # a failed artifact, honest about it


def test_a_decode_batch_evicted_since_its_seed_is_seeded_again_not_failed(
        sdbench_collect, sdbench_engine, monkeypatch):
    """A decode batch of long prompts fits one step only from the prefix cache (cached, a
    request schedules a block's tokens; evicted, its whole prompt, and three of them exceed
    the step's token budget). With the engine's own prefix cache emptied before every other
    run (each first try of a run), that run's admission misses: it is discarded, its prompts
    computed again and the run repeated (as a decode point's), and every retained row is the
    point's exact step. (Before, the first step's partial admission failed the point: H100,
    qwen3-0.6b, context 8192, 4 of 1,008 points skipped.)"""
    from pytest_sdbench.measure.runs import EngineRuns
    k = sdbench_engine.spec.draft_depth
    settings = sdbench_engine.identity.settings
    budget = settings.max_num_batched_tokens.value
    context = min(budget // 2, settings.max_model_len.value - 64)
    assert 3 * context > budget   # uncached, the three prompts cannot share one step
    grid = parse_grid({"mixed": [{"draft_depth": k, "decode_batch_size": 3,
                                  "context_tokens": context,
                                  "acceptance_length": sdbench_engine.spec
                                  .synthetic_acceptance_length,
                                  "prefill_batch_size": 1, "prefill_tokens": 40}]})
    admitting, calls = EngineRuns.run_admitting, []

    def evicting(self, *args):
        if len(calls) % 2 == 0:   # a first try: evicted since its seed; its retry is not
            assert sdbench_engine.llm.reset_prefix_cache()
        calls.append(1)
        return admitting(self, *args)
    monkeypatch.setattr(EngineRuns, "run_admitting", evicting)
    run = sdbench_collect("mixed", grid, repeats=2)
    a = run.artifact
    assert a.status == STATUS_COMPLETE, a.coverage.skipped_points
    assert run.result.breakdown.counts.get("reseeds", 0) >= 2
    assert len(a.mixed) == 2
    for o in a.mixed:
        decoding, prefilling = _kinds(o.snapshot)
        assert [(r.new_tokens, r.draft_tokens) for r in decoding] == [(1, k)] * 3
        assert [r.new_tokens for r in prefilling] == [40]
    assert observation_violations(a) == []
    assert validate_data(typed.encode(a)).ok
