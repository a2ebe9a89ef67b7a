"""Grid manifests: strict parsing with the exact field named, and a stable digest."""

import json

import pytest

from pytest_sdbench.points import (
    DecodePoint,
    Grid,
    GridError,
    PrefillPoint,
    default_grid,
    grid_digest,
    load_grid,
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

