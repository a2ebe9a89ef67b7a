"""The prompt pool on the real vLLM engine (CPU in CI): the decode points draw their prompts
from one pool, computed once a pass before them, and seed nothing of their own while the
prefix cache holds it; a run whose admission missed the cache (here the engine's own prefix
cache emptied between samples) is discarded, its prompts are computed again and the run
repeated, and every retained row is still exact."""

import pytest

from pytest_sdbench.artifact.validate.report import validate_data
from pytest_sdbench.measure.prompt_pool import full_cache_hit
from pytest_sdbench.plugin.testing import observation_violations
from pytest_sdbench.run import collect as session
from pytest_sdbench.run import partial
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
    # cached-prefix prefill point computes its prefix (pool prompt 0) at its warm-up only,
    # not before each round's run; no run missed the cache
    assert counts.get("seed pool") == 1 + ROUNDS
    assert counts.get("seed decode", 0) == 0
    assert counts.get("seed prefix") == 1
    assert counts.get("reseeds", 0) == 0
    _exact(run)
    # the cached-prefix prefill point was served its whole prefix from the pool's blocks
    cached = [o for o in run.artifact.prefill if o.point.cached_prefix_tokens]
    assert len(cached) == ROUNDS
    assert all(h == o.point.cached_prefix_tokens for o in cached for h in o.cache_hit_tokens)


def test_a_run_that_missed_the_emptied_cache_is_seeded_again_and_stays_exact(
        sdbench_engine, pool_grid, tmp_path, monkeypatch):
    emptied = []
    on_point = partial.PartialArtifact.on_point

    def emptying(self, result):
        # after every sample: the engine's own prefix cache is emptied, so the next point's
        # admission misses and its prompts must be computed again
        assert sdbench_engine.llm.reset_prefix_cache()
        emptied.append(len(result.prefill) + len(result.decode))
        on_point(self, result)

    monkeypatch.setattr(partial.PartialArtifact, "on_point", emptying)
    run = _collect(sdbench_engine, pool_grid, tmp_path)
    counts = run.result.breakdown.counts
    # the cache was emptied after every sample, so each round's decode point that did not
    # follow the pool's run found it empty: re-seeded (its own prompts), none failed; so
    # was the cached-prefix prefill point's prefix (seeded at its warm-up, then on a miss)
    assert counts.get("reseeds", 0) >= ROUNDS * (len(pool_grid.decode) - 1)
    assert counts["reseeds"] == counts.get("seed decode", 0) + counts["seed prefix"] - 1
    assert counts["seed prefix"] > 1
    assert emptied
    _exact(run)


def test_a_full_cache_hit_is_what_vllm_serves_with_eagle(sdbench_engine):
    """full_cache_hit's rule, against the engine: a prompt computed once is served again
    with its cached blocks less the last one (EAGLE recomputes it), at most prompt - 1."""
    from pytest_sdbench.measure.runs import sampling_params
    block = sdbench_engine.block_size
    for length in (block - 1, block + 1, 2 * block, 3 * block + 7):
        prompt = sdbench_engine.fresh_tokens(length)
        sdbench_engine.generate([prompt], sampling_params(1))
        out = sdbench_engine.generate([prompt], sampling_params(1))
        assert out[0].num_cached_tokens == full_cache_hit(length, block), length


def test_a_pool_narrower_than_the_widest_batch_serves_the_batches_it_covers(
        sdbench_engine, pool_grid, tmp_path, monkeypatch):
    """Where the cache's share holds 2 pool prompts, not the 3 the widest decode point needs:
    the batch-2 point takes the pool's prompts and seeds nothing; the batch-3 point takes
    the pool's 2 and one prompt of its own, seeded before each of its passes; every row
    exact."""
    from pytest_sdbench.measure import prompt_pool
    from pytest_sdbench.measure.decode import DecodeRunner
    seeded = []   # (the seeded prompts, the pool's, cut to the point's context)
    seed = DecodeRunner.seed

    def recording(self, state):
        context, pool = state.point.context_tokens, self.runs.pool
        seeded.append((state.prompts, pool.batch(len(pool.prompts), context)))
        seed(self, state)

    monkeypatch.setattr(DecodeRunner, "seed", recording)
    length = max(d.context_tokens for d in pool_grid.decode)
    cache = sdbench_engine.kv_capacity.tokens
    monkeypatch.setattr(prompt_pool, "POOL_CACHE_SHARE", (2 * length + 1) / cache)
    pool = prompt_pool.PromptPool.fitting(pool_grid, sdbench_engine.block_size, cache,
                                          sdbench_engine.fresh_tokens)
    assert pool is not None
    assert len(pool.prompts) == 2
    assert (pool.covers(2), pool.covers(3)) == (True, False)
    run = _collect(sdbench_engine, pool_grid, tmp_path)
    counts = run.result.breakdown.counts
    assert counts.get("seed pool") == 1 + ROUNDS
    assert counts.get("seed decode") == 1 + ROUNDS     # the batch-3 point's own, each pass
    assert counts.get("reseeds", 0) == 0
    assert len(seeded) == 1 + ROUNDS
    for prompts, pooled in seeded:
        assert len(prompts) == 3
        assert prompts[:2] == pooled
        assert prompts[2] not in pooled
    _exact(run)


def test_the_pool_is_as_wide_as_the_share_holds():
    """Pure: the widest batch where the share holds it, fewer prompts where it does not,
    none where not one prompt fits."""
    from pytest_sdbench.measure.prompt_pool import POOL_CACHE_SHARE, PromptPool
    grid = parse_grid({"prefill": [], "decode": [
        {"batch_size": b, "context_tokens": 100, "draft_depth": 3, "acceptance_length": 2.0}
        for b in (1, 8, 64)]})
    fresh = [0].__mul__

    def width(cache_tokens: int) -> int | None:
        pool = PromptPool.fitting(grid, 16, cache_tokens, fresh)
        return None if pool is None else len(pool.prompts)

    assert width(int(64 * 100 / POOL_CACHE_SHARE) + 1) == 64
    assert width(int(40 * 100 / POOL_CACHE_SHARE) + 1) == 40
    assert width(int(99 / POOL_CACHE_SHARE)) is None
