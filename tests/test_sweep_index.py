"""The K-sweep index names the grid its artifacts share with K taken out: equal for every K,
and each artifact's grid is it with its K filled in (plus, for grids derived from each
engine, points of that K's own). Pure: artifacts from the CPU fixture with their grid and K
replaced."""

from dataclasses import replace

import pytest

from pytest_sdbench.artifact.sweep import sweep_index
from pytest_sdbench.artifact.validate.report import validate_data
from pytest_sdbench.grid.defaults import default_grid, derived_grid
from pytest_sdbench.grid.shared import SharedGrid, shared_grid, with_depth, without_depth
from pytest_sdbench.wire import typed
from pytest_sdbench.wire.contract import SWEEP_INDEX_KIND
from pytest_sdbench.wire.points import EngineLimits, grid_digest


@pytest.fixture
def artifact_for(cpu_artifact_data):
    base = validate_data(cpu_artifact_data).artifact

    def make(k, grid):
        return replace(base, grid=grid, speculative=replace(base.speculative, draft_depth=k),
                       integrity=replace(base.integrity, grid_digest=grid_digest(grid)))
    return make


def test_a_fixed_grid_is_shared_by_every_k(artifact_for):
    grids = {k: default_grid(k, 16) for k in (1, 2, 3)}
    runs = [(artifact_for(k, grids[k]), f"k{k}.json") for k in (3, 1, 2)]
    index = sweep_index(runs)
    assert index["kind"] == SWEEP_INDEX_KIND
    assert index["draft_depths"] == [1, 2, 3]
    assert len({e["grid_digest"] for e in index["artifacts"]}) == 3  # K is in each digest
    shared = typed.decode(SharedGrid, index["shared_grid"])
    assert index["shared_grid_digest"] == typed.digest(shared)
    assert index["grids_identical"] is True
    for entry in index["artifacts"]:
        k = entry["draft_depth"]
        assert entry["path"] == f"k{k}.json"
        assert entry["own_points"] == 0
        assert without_depth(grids[k]) == shared
        assert with_depth(shared, k) == grids[k]


def test_grids_derived_per_k_share_their_common_points(artifact_for):
    """K=1 captures batches 1, 2, 4, 8 and 12 (2, 4, 8, 16, 24 tokens), K=3 batches 1, 2, 4
    and 6 (4, 8, 16, 24 tokens): with each +1, batches 1-5 are shared; AL K+1 differs by K."""
    limits = EngineLimits(draft_depth=1, block_size=16, max_num_seqs=16,
                          max_num_batched_tokens=4096, max_model_len=2048, kv_tokens=1 << 20,
                          capture_sizes=(1, 2, 4, 8, 16, 24), synthetic=True)
    grids = {k: derived_grid(replace(limits, draft_depth=k), acceptance_length=2.0)
             for k in (1, 3)}
    index = sweep_index([(artifact_for(k, g), f"k{k}.json") for k, g in grids.items()])
    shared = typed.decode(SharedGrid, index["shared_grid"])
    assert shared == shared_grid(list(grids.values()))
    assert index["grids_identical"] is False
    assert {d.batch_size for d in shared.decode} == {1, 2, 3, 4, 5}
    assert {d.acceptance_length for d in shared.decode} == {1.0, 2.0}   # not K+1
    assert shared.prefill == grids[1].prefill == grids[3].prefill
    for entry in index["artifacts"]:
        grid = grids[entry["draft_depth"]]
        mine = with_depth(shared, entry["draft_depth"])
        assert set(mine.decode) <= set(grid.decode)
        assert entry["own_points"] == len(grid) - len(shared) > 0
