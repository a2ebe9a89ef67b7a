"""The grid derived from an engine's limits (points.derived_grid), on made-up limits: decode
batches at every captured size and the one past it, log-spaced contexts and prefill new
tokens, whole-block cached prefixes, the AL range on CUDA only; and the oracle presets'
small grids."""

from dataclasses import replace
from itertools import pairwise
from types import SimpleNamespace

import pytest

from pytest_sdbench.engine.presets import PRESETS
from pytest_sdbench.engine.surface import EngineSurface
from pytest_sdbench.grid.defaults import default_grid, derived_batches, derived_grid
from pytest_sdbench.run.collect import grid_for
from pytest_sdbench.wire.points import EngineLimits

# vLLM's default capture sizes for max_num_seqs 64 at K=3 (1, 2, 4, then steps of 8 and 16).
CAPTURE_SIZES = (1, 2, 4, *range(8, 257, 8), *range(272, 513, 16))
LIMITS = EngineLimits(draft_depth=3, block_size=16, max_num_seqs=64,
                      max_num_batched_tokens=16384, max_model_len=8448, kv_tokens=1 << 20,
                      capture_sizes=CAPTURE_SIZES, synthetic=False)


def _boundaries(limits: EngineLimits) -> set[int]:
    """For each capture size, the largest batch whose uniform decode step it holds."""
    per_request = limits.draft_depth + 1
    return {min(s // per_request, limits.max_num_seqs) for s in limits.capture_sizes
            if s >= per_request}


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_batches_are_every_graph_boundary_and_the_next_up_to_max_num_seqs(k):
    limits = replace(LIMITS, draft_depth=k, max_num_seqs=40)
    fullest = _boundaries(limits)
    batches = derived_batches(limits)
    assert set(batches) == fullest | {b + 1 for b in fullest if b + 1 <= 40}
    assert min(batches) == 1
    assert max(batches) == 40
    decode_batches = {p.batch_size for p in derived_grid(limits).decode}
    assert decode_batches == set(batches)


def test_batches_between_powers_of_two_are_kept():
    """K=3: 24, 40 and 48 tokens are captured, so batches 6, 10 and 12 are (with 7, 11, 13)."""
    batches = derived_batches(replace(LIMITS, capture_sizes=(4, 8, 24, 40, 48)))
    assert batches == [1, 2, 3, 6, 7, 10, 11, 12, 13]


def test_a_capture_size_that_is_no_multiple_of_one_plus_k_still_marks_a_boundary():
    """K=2 (3 tokens a request): 4 tokens hold one request, 8 two, 16 five, 24 eight; each
    batch past them runs in the next graph up."""
    batches = derived_batches(replace(LIMITS, draft_depth=2, capture_sizes=(1, 2, 4, 8, 16, 24)))
    assert batches == [1, 2, 3, 5, 6, 8, 9]


def test_eager_engine_takes_powers_of_two_and_the_next():
    assert derived_batches(replace(LIMITS, capture_sizes=(), max_num_seqs=20)) == \
        [1, 2, 3, 4, 5, 8, 9, 16, 17]


def test_contexts_are_log_spaced_up_to_max_model_len():
    grid = derived_grid(LIMITS)
    contexts = sorted({p.context_tokens for p in grid.decode})
    assert contexts == [256, 1024, 4096, 8192]   # x4, then the longest power of two
    short = derived_grid(replace(LIMITS, max_model_len=3000))
    assert sorted({p.context_tokens for p in short.decode}) == [256, 1024, 2048]
    assert all(p.context_tokens < 3000 for p in short.decode)


def test_decode_points_fit_the_kv_capacity():
    small = replace(LIMITS, kv_tokens=64 * 1100)
    grid = derived_grid(small)
    assert grid.decode
    assert all(p.batch_size * p.context_tokens < small.kv_tokens for p in grid.decode)
    assert {p.context_tokens for p in grid.decode if p.batch_size == 64} == {256, 1024}


def test_prefill_new_tokens_are_log_spaced_up_to_the_step_budget():
    budget = LIMITS.max_num_batched_tokens
    grid = derived_grid(replace(LIMITS, max_model_len=4 * budget))
    for b in (1, 4, 16):
        news = sorted({p.new_tokens for p in grid.prefill if p.batch_size == b})
        assert news[0] == 64
        assert all(high == 4 * low for low, high in pairwise(news))
        assert b * news[-1] <= budget < b * news[-1] * 4
    assert {p.batch_size for p in grid.prefill} == {1, 4, 16}
    # A prompt must also fit max_model_len: 8448 leaves out B=1 x 16k.
    assert max(p.cached_prefix_tokens + p.new_tokens for p in derived_grid(LIMITS).prefill) \
        < LIMITS.max_model_len


def test_cached_prefixes_are_none_and_a_real_share_in_whole_blocks():
    block = 32
    grid = derived_grid(replace(LIMITS, block_size=block))
    by_shape: dict[tuple[int, int], set[int]] = {}
    for p in grid.prefill:
        by_shape.setdefault((p.batch_size, p.new_tokens), set()).add(p.cached_prefix_tokens)
    for (_, new), prefixes in by_shape.items():
        assert 0 in prefixes
        (share,) = prefixes - {0}
        assert share % block == 0
        assert 0 < share <= new


def test_acceptance_lengths_range_one_to_k_plus_one_with_synthetic_acceptance_only():
    natural = derived_grid(LIMITS)
    assert {p.acceptance_length for p in natural.decode} == {None}
    grid = derived_grid(replace(LIMITS, synthetic=True), acceptance_length=2.5)
    assert {p.acceptance_length for p in grid.decode} == {1.0, 2.5, 4.0}
    assert {p.context_tokens for p in grid.decode if p.acceptance_length != 2.5} == {1024}
    short = derived_grid(replace(LIMITS, synthetic=True, max_model_len=700),
                         acceptance_length=2.5)
    assert {p.acceptance_length for p in short.decode} == {1.0, 2.5, 4.0}


def _engine(oracle: bool, graph_mode: str = "full_and_piecewise", al: float | None = None,
            preset: str = "qwen3-0.6b", budget: int = 16384):
    def fact(value):
        return SimpleNamespace(value=value)
    settings = SimpleNamespace(cudagraph_capture_sizes=fact(CAPTURE_SIZES),
                               max_num_seqs=fact(64), max_num_batched_tokens=fact(budget),
                               max_model_len=fact(8448))
    engine = SimpleNamespace(
        spec=SimpleNamespace(draft_depth=3, synthetic_acceptance_length=al,
                             oracle_limits=oracle, preset=preset),
        block_size=16, max_num_batched_tokens=budget,
        kv_capacity=SimpleNamespace(block_size=16, tokens=1 << 20),
        identity=SimpleNamespace(settings=settings, cudagraph_mode=fact(graph_mode)))
    engine.limits = EngineSurface.limits.fget(engine)   # what a started engine answers
    return engine


def test_an_engine_as_served_gets_the_derived_grid():
    engine = _engine(oracle=False, al=2.5)
    assert engine.limits == replace(LIMITS, synthetic=True)
    assert grid_for(engine) == derived_grid(replace(LIMITS, synthetic=True), 2.5)
    assert _engine(oracle=False, graph_mode="none").limits.capture_sizes == ()


@pytest.mark.parametrize("preset, size", [("tiny", 12), ("qwen3-0.6b", 16)])
def test_oracle_presets_keep_their_small_grids(preset, size):
    """Under the oracle limits the grid is the small fixed one (the preset's own step budget
    leaves points out), whatever the engine captures."""
    budget = dict(PRESETS[preset].engine_limits)["max_num_batched_tokens"]
    grid = grid_for(_engine(oracle=True, preset=preset, budget=budget))
    assert grid == default_grid(3, 16, (None,), large=preset != "tiny",
                                max_batched_tokens=budget)
    assert len(grid) == size
