"""The prompt pool on the real vLLM engine (CPU in CI): the decode points draw their prompts
from one pool, computed once a pass before them, and seed nothing of their own while the
prefix cache holds it; a run whose admission missed the cache (here the engine's own prefix
cache emptied between samples) is discarded, its prompts are computed again and the run
repeated, and every retained row is still exact."""

import pytest

from pytest_sdbench import session
from pytest_sdbench.artifact.validate.report import validate_data
from pytest_sdbench.prompt_pool import full_cache_hit
from pytest_sdbench.testing import observation_violations
from pytest_sdbench.wire import typed
from pytest_sdbench.wire.points import parse_grid
from pytest_sdbench.wire.rounds import RepeatPlan

pytestmark = pytest.mark.sdbench_engine
ROUNDS = 2


@pytest.fixture(scope="module")
def pool_grid(sdbench_engine):
    block, k = sdbench_engine.block_size, sdbench_engine.spec.draft_depth
    al = sdbench_engine.spec.synthetic_acceptance_length
    return parse_grid({
        "prefill": [{"batch_size": 2, "new_tokens": 2 * block, "cached_prefix_tokens": block},
                    {"batch_size": 1, "new_tokens": 48, "cached_prefix_tokens": 0}],
        "decode": [{"batch_size": 3, "context_tokens": 3 * block, "draft_depth": k,
                    "acceptance_length": al},
                   {"batch_size": 2, "context_tokens": 2 * block + 5, "draft_depth": k,
                    "acceptance_length": al}]})


def _collect(engine, grid, tmp_path):
    return session.collect_to_artifact(engine, "agg", grid, tmp_path,
                                       repeats=RepeatPlan(repeats=ROUNDS, seed=3))


def _exact(run) -> None:
    assert validate_data(typed.encode(run.artifact)).ok
    assert observation_violations(run.artifact) == []
    assert run.artifact.coverage.completed == run.artifact.coverage.expected


def test_decode_points_share_the_pool_and_seed_nothing_while_the_cache_holds_it(
        sdbench_engine, pool_grid, tmp_path):
    run = _collect(sdbench_engine, pool_grid, tmp_path)
    counts = run.result.breakdown.counts
    # one pool run a pass (the warm-up pass and each round), none a decode point; the
    # cached-prefix prefill point computes its prefix before each of its passes (one block
    # while cached); no run missed the cache
    assert counts.get("seed pool") == 1 + ROUNDS
    assert counts.get("seed decode", 0) == 0
    assert counts.get("seed prefix") == 1 + ROUNDS
    assert counts.get("reseeds", 0) == 0
    _exact(run)
    # the cached-prefix prefill point was served its whole prefix from the pool's blocks
    cached = [o for o in run.artifact.prefill if o.point.cached_prefix_tokens]
    assert len(cached) == ROUNDS
    assert all(h == o.point.cached_prefix_tokens for o in cached for h in o.cache_hit_tokens)


def test_a_run_that_missed_the_emptied_cache_is_seeded_again_and_stays_exact(
        sdbench_engine, pool_grid, tmp_path, monkeypatch):
    emptied = []
    on_point = session.Checkpoint.on_point

    def emptying(self, result):
        # after every sample: the engine's own prefix cache is emptied, so the next point's
        # admission misses and its prompts must be computed again
        assert sdbench_engine.llm.reset_prefix_cache()
        emptied.append(len(result.prefill) + len(result.decode))
        on_point(self, result)

    monkeypatch.setattr(session.Checkpoint, "on_point", emptying)
    run = _collect(sdbench_engine, pool_grid, tmp_path)
    counts = run.result.breakdown.counts
    # the cache was emptied after every sample, so each round's decode point that did not
    # follow the pool's run found it empty: re-seeded (its own prompts), none failed
    assert counts.get("reseeds", 0) >= ROUNDS * (len(pool_grid.decode) - 1)
    assert counts.get("seed decode", 0) == counts["reseeds"]
    assert emptied
    _exact(run)


def test_a_full_cache_hit_is_what_vllm_serves_with_eagle(sdbench_engine):
    """full_cache_hit's rule, against the engine: a prompt computed once is served again
    with its cached blocks less the last one (EAGLE recomputes it), at most prompt - 1."""
    from pytest_sdbench.collector import sampling_params
    block = sdbench_engine.block_size
    for length in (block - 1, block + 1, 2 * block, 3 * block + 7):
        prompt = sdbench_engine.fresh_tokens(length)
        sdbench_engine.generate([prompt], sampling_params(1))
        out = sdbench_engine.generate([prompt], sampling_params(1))
        assert out[0].num_cached_tokens == full_cache_hit(length, block), length
