"""Grid manifests: strict parsing with the exact field named, and a stable digest."""

import dataclasses
import json

import pytest

from pytest_sdbench.grid.defaults import default_grid, load_grid
from pytest_sdbench.wire.points import (
    DecodePoint,
    EngineLimits,
    Grid,
    GridError,
    PrefillPoint,
    fit_errors,
    grid_digest,
    parse_grid,
)

GOOD = {"prefill": [{"batch_size": 2, "new_tokens": 64, "cached_prefix_tokens": 32}],
        "decode": [{"batch_size": 4, "context_tokens": 256, "draft_depth": 3,
                    "acceptance_length": 2.5}]}


def test_parses_a_manifest():
    grid = parse_grid(GOOD)
    assert grid.prefill == (PrefillPoint(2, 64, 32),)
    assert grid.decode == (DecodePoint(4, 256, 3, 2.5),)


@pytest.mark.parametrize("mutate, message", [
    (lambda g: g["decode"][0].update(batch_size=0), "decode[0].batch_size: must be >= 1, got 0"),
    (lambda g: g["decode"][0].update(batch_size=True),
     "decode[0].batch_size: expected integer, got bool True"),
    (lambda g: g["prefill"][0].update(new_tokens=64.0),
     "prefill[0].new_tokens: expected integer, got float 64.0"),
    (lambda g: g["prefill"][0].pop("cached_prefix_tokens"),
     "prefill[0].cached_prefix_tokens: missing"),
    (lambda g: g["prefill"][0].update(batch=1), "prefill[0].batch: unknown field"),
    (lambda g: g["decode"][0].update(acceptance_length=5.0),
     "decode[0].acceptance_length: must lie in [1, draft_depth+1 = 4], got 5.0"),
    (lambda g: g["prefill"].append(dict(g["prefill"][0])), "prefill[1]: duplicates prefill[0]"),
    (lambda g: g.update(decode="x"), "decode: expected list"),
])
def test_errors_name_the_field_and_value(mutate, message):
    data = json.loads(json.dumps(GOOD))
    mutate(data)
    with pytest.raises(GridError) as excinfo:
        parse_grid(data)
    assert message in str(excinfo.value)


def test_load_grid_reports_missing_and_non_json(tmp_path):
    with pytest.raises(GridError, match="no such file"):
        load_grid(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(GridError, match="not JSON"):
        load_grid(bad)


def test_digest_is_canonical_and_sensitive():
    a, b = parse_grid(GOOD), parse_grid(json.loads(json.dumps(GOOD)))
    assert grid_digest(a) == grid_digest(b)
    other = Grid(a.prefill, (DecodePoint(4, 256, 3, 2.0),))
    assert grid_digest(other) != grid_digest(a)


@pytest.mark.parametrize("block", [16, 32])
def test_default_grids_have_whole_block_prefixes(block):
    for large in (False, True):
        grid = default_grid(3, block, large=large)
        assert grid.prefill
        assert grid.decode
        assert all(p.cached_prefix_tokens % block == 0 for p in grid.prefill)
        assert any(p.cached_prefix_tokens for p in grid.prefill)
        assert all(p.new_tokens > block for p in grid.prefill if p.cached_prefix_tokens)



LIMITS = EngineLimits(draft_depth=3, block_size=16, max_num_seqs=8, max_num_batched_tokens=512,
                      max_model_len=1024, kv_tokens=4096, capture_sizes=(), synthetic=False)


def test_a_grid_within_the_limits_fits():
    grid = parse_grid({"prefill": [{"batch_size": 4, "new_tokens": 64,
                                    "cached_prefix_tokens": 32}],
                       "decode": [{"batch_size": 8, "context_tokens": 256, "draft_depth": 3,
                                   "acceptance_length": None}]})
    assert fit_errors(grid, LIMITS) == []


@pytest.mark.parametrize("point, message", [
    ({"batch_size": 9, "new_tokens": 32, "cached_prefix_tokens": 0},
     "prefill[0].batch_size: 9 exceeds max_num_seqs 8"),
    ({"batch_size": 2, "new_tokens": 257, "cached_prefix_tokens": 0},
     "prefill[0]: batch_size*new_tokens = 514 exceeds max_num_batched_tokens 512; the step "
     "would be chunked"),
    ({"batch_size": 1, "new_tokens": 64, "cached_prefix_tokens": 24},
     "prefill[0].cached_prefix_tokens: must be a multiple of the KV block size 16 to be an "
     "exact cache hit, got 24"),
    ({"batch_size": 1, "new_tokens": 16, "cached_prefix_tokens": 32},
     "prefill[0].new_tokens: a cached prefix needs new_tokens > the KV block size 16 (with "
     "EAGLE vLLM recomputes the last matched block), got 16"),
    ({"batch_size": 1, "new_tokens": 64, "cached_prefix_tokens": 960},
     "prefill[0]: cached_prefix_tokens+new_tokens = 1024 exceeds max_model_len 1024"),
    ({"batch_size": 8, "new_tokens": 64, "cached_prefix_tokens": 448},
     "prefill[0]: the batch needs more KV than the engine holds (4096 tokens): "
     "batch_size*(cached_prefix_tokens+new_tokens+block_size) = 4224"),
])
def test_a_prefill_point_that_does_not_fit_is_named(point, message):
    assert fit_errors(parse_grid({"prefill": [point]}), LIMITS) == [message]


@pytest.mark.parametrize("point, message", [
    ({"batch_size": 9, "context_tokens": 64}, "decode[0].batch_size: 9 exceeds max_num_seqs 8"),
    # a settled_steps run: 1 + 6 (K+1) = 25 output tokens at K=3
    ({"batch_size": 1, "context_tokens": 1013},
     "decode[0].context_tokens: 1013 leaves no room for the run of 25 output tokens within "
     "max_model_len 1024"),
    ({"batch_size": 8, "context_tokens": 512},
     "decode[0]: batch_size*(context+output) needs 4448 KV tokens, the engine holds 4096"),
])
def test_a_decode_point_that_does_not_fit_is_named(point, message):
    grid = parse_grid({"decode": [dict(point, draft_depth=3, acceptance_length=None)]})
    assert fit_errors(grid, LIMITS) == [message]


def test_a_decode_run_of_more_output_needs_more_room():
    grid = parse_grid({"decode": [{"batch_size": 1, "context_tokens": 900, "draft_depth": 3,
                                   "acceptance_length": None}]})
    assert fit_errors(grid, LIMITS) == []
    assert fit_errors(grid, LIMITS, decode_tokens=200) == [
        "decode[0].context_tokens: 900 leaves no room for the run of 200 output tokens within "
        "max_model_len 1024"]


def test_re_admitting_a_batch_over_the_step_budget_is_refused():
    limits = dataclasses.replace(LIMITS, max_num_batched_tokens=128)
    grid = parse_grid({"decode": [{"batch_size": 4, "context_tokens": 64, "draft_depth": 3,
                                   "acceptance_length": None}]})
    assert fit_errors(grid, limits) == [
        "decode[0].batch_size: re-admitting 4 cached prompts takes up to 192 tokens in one "
        "step, over max_num_batched_tokens 128"]
