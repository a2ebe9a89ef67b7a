"""Grids for the consumer (aisimulate.grids), on made-up limits: the grid its direct
interpolation needs (every batch, token curves spanning each batch's whole range, KV curves to
the longest prefix, decode curves to the longest context), its planned prefill axis, and the
points of its plans mapped exactly onto ours or refused by name. The consumer's own code
checks the same grids in tests/consumer/test_aisimulate_plan.py."""

import json
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest

from pytest_sdbench.aisimulate.grids import (
    KV_LINE_SPACING,
    cudagraph_axis_points,
    decode_contexts,
    direct_grid,
    engine_prefill_sampling,
    map_plan,
    native_grid,
    prefill_capture_sizes,
    prefill_lines,
)
from pytest_sdbench.cli import main
from pytest_sdbench.run.inputs import grid_choice
from pytest_sdbench.wire.points import EngineLimits, GridError, decode_max_tokens, fit_errors

# qwen3-0.6b as vLLM 0.26 serves it on an H200 (the production artifacts' settings).
CAPTURE_SIZES = (1, 2, 4, *range(8, 257, 8), *range(272, 513, 16))
LIMITS = EngineLimits(draft_depth=3, block_size=16, max_num_seqs=64,
                      max_num_batched_tokens=16384, max_model_len=8448, kv_tokens=71560 * 16,
                      capture_sizes=CAPTURE_SIZES, synthetic=True)
FIXTURES = Path(__file__).parent / "fixtures"
EAGER_CPU = EngineLimits(draft_depth=3, block_size=32, max_num_seqs=16,
                         max_num_batched_tokens=4096, max_model_len=4096, kv_tokens=419424,
                         capture_sizes=(), synthetic=False)


def _curves(grid):
    prefill, decode = {}, {}
    for p in grid.prefill:
        prefill.setdefault(p.batch_size, []).append(p)
    for d in grid.decode:
        decode.setdefault(d.batch_size, []).append(d.context_tokens)
    return prefill, decode


@pytest.mark.parametrize("limits", [LIMITS, replace(LIMITS, max_num_batched_tokens=8192),
                                    EAGER_CPU], ids=["16k-budget", "8k-budget", "cpu-eager"])
def test_every_batch_spans_its_whole_range_and_every_point_fits(limits):
    grid = direct_grid(limits, 2.78 if limits.synthetic else None)
    assert fit_errors(grid, limits) == []
    prefill, decode = _curves(grid)
    batches = list(range(1, limits.max_num_seqs + 1))
    assert sorted(prefill) == batches
    assert sorted(decode) == batches
    room = decode_max_tokens(limits.draft_depth) + limits.draft_depth
    for batch in batches:
        top = min(limits.max_num_batched_tokens // batch, limits.max_model_len - 1)
        fresh = sorted(p.new_tokens for p in prefill[batch] if not p.cached_prefix_tokens)
        assert fresh[0] == 1
        assert fresh[-1] == top
        assert max(decode[batch]) == limits.max_model_len - room
        assert min(decode[batch]) == limits.block_size


def test_each_kv_curve_reaches_the_longest_prefix_beside_its_tokens():
    """KV-first interpolation needs, at each token line, the KV curve from 0 to the longest
    prefix the engine takes beside those tokens (whole blocks within max_model_len)."""
    grid = direct_grid(LIMITS, 2.78)
    lines: dict[tuple[int, int], list[int]] = {}
    for p in grid.prefill:
        lines.setdefault((p.batch_size, p.new_tokens), []).append(p.cached_prefix_tokens)
    for (_batch, new), prefixes in lines.items():
        if new <= LIMITS.block_size:
            assert prefixes == [0]
            continue
        assert sorted(prefixes)[0] == 0
        longest = sorted(prefixes)[-1]
        assert longest % LIMITS.block_size == 0
        assert new + longest + 1 <= LIMITS.max_model_len < new + longest + 1 + 2 * 16


def test_kv_lines_are_close_enough_for_kv_first_coverage():
    """Between a block + 1 and the top, consecutive token lines (each with its KV curve) lie
    at most KV_LINE_SPACING apart, so a query whose requests stay that far below
    max_model_len has KV curves on both sides."""
    for batch in (1, 2, 3, 7, 16):
        lines = [s for s in prefill_lines(LIMITS, batch) if s > LIMITS.block_size]
        assert lines[0] == LIMITS.block_size + 1
        assert all(b - a <= KV_LINE_SPACING for a, b in pairwise(lines)), (batch, lines)


def test_no_interpolation_interval_crosses_the_engines_graph_limit():
    """Prefill steps of up to the largest capture size run in a piecewise graph, larger ones
    eager: each batch measures the last count inside and the first one past."""
    for batch in (1, 3, 8, 64):
        lines = prefill_lines(LIMITS, batch)
        edge = max(CAPTURE_SIZES) // batch
        assert edge in lines
        assert edge + 1 in lines
    assert not any(s == max(CAPTURE_SIZES) + 1 for s in prefill_lines(EAGER_CPU, 1))


def test_decode_contexts_stop_where_the_kv_capacity_does():
    small = replace(LIMITS, kv_tokens=64 * 1000)
    room = decode_max_tokens(3) + 3
    assert max(decode_contexts(small, 64)) == 1000 - room - 16
    assert decode_contexts(replace(LIMITS, kv_tokens=64 * 40), 64) == []


def test_the_consumers_prefill_axis_is_its_capture_boundaries():
    """Its explicit prefill captures (1, 2, 4, stride 8 to 248, 16 to 512, 32 above, up to
    2048) and, on the new-token axis, each capture C and C+1, doublings, and the limit."""
    captures = prefill_capture_sizes(16384)
    assert captures[:5] == (1, 2, 4, 8, 16)
    assert captures[-1] == 2048
    assert {248, 256, 272, 512, 544, 576} <= set(captures)
    axis = cudagraph_axis_points(captures, 16384)
    assert {1, 2, 3, 248, 249, 2048, 2049, 4096, 8192, 16384} <= set(axis)
    sampling = engine_prefill_sampling(LIMITS).to_dict()
    assert sampling["max_isl"] == 16384
    assert sampling["max_batch_size"] == 64
    assert sampling["prefill_max_new_token_samples"] == len(axis)
    grid = native_grid(LIMITS)
    assert [p.new_tokens for p in grid.prefill] == [t for t in axis if t < 8448]
    assert {(p.batch_size, p.cached_prefix_tokens) for p in grid.prefill} == {(1, 0)}


def test_a_plan_maps_exactly_onto_our_points_in_its_order():
    payload = {"schema_version": 1,
               "prefill": [{"batch_size": 2, "total_prefill_tokens": 512,
                            "total_kv_read_tokens": 64},
                           {"batch_size": 1, "total_prefill_tokens": 8,
                            "total_kv_read_tokens": 0}],
               "decode": [{"batch_size": 4, "total_kv_read_tokens": 4096}]}
    grid = map_plan(payload, 3, 2.78, "plan")
    assert [(p.batch_size, p.new_tokens, p.cached_prefix_tokens) for p in grid.prefill] == \
        [(2, 256, 32), (1, 8, 0)]
    assert [(d.batch_size, d.context_tokens, d.draft_depth, d.acceptance_length)
            for d in grid.decode] == [(4, 1024, 3, 2.78)]


def test_a_plan_point_that_is_no_uniform_batch_is_refused_by_name():
    payload = {"schema_version": 1,
               "prefill": [{"batch_size": 3, "total_prefill_tokens": 100,
                            "total_kv_read_tokens": 0}],
               "decode": [{"batch_size": 2, "total_kv_read_tokens": 33},
                          {"batch_size": 2, "total_prefill_tokens": 4,
                           "total_kv_read_tokens": 32}]}
    with pytest.raises(GridError) as info:
        map_plan(payload, 3, None, "plan")
    message = str(info.value)
    assert message.startswith("3 point(s) of the consumer's plan cannot be ours")
    assert ("plan.prefill[0] (batch_size 3, total_prefill_tokens 100, total_kv_read_tokens 0)"
            ": total_prefill_tokens not a multiple of batch_size") in message
    assert "plan.decode[0] (batch_size 2, total_prefill_tokens 0, total_kv_read_tokens 33)" \
        in message
    assert "plan.decode[1] (batch_size 2, total_prefill_tokens 4, total_kv_read_tokens 32): " \
        "a decode point schedules no prefill tokens" in message


def _plan(tmp_path, source: str, payload: dict | None) -> str:
    plan = {"schema_name": "aic_fpm_collection_plan", "schema_version": 11,
            "options": {} if payload is None else
            {"benchmark_points": {"payload": payload, "sha256": "0" * 64}},
            "point_generation": {"source": source}}
    path = tmp_path / "collection-plan.json"
    path.write_text(json.dumps(plan))
    return str(path)


def test_a_collection_plan_is_read_for_its_frozen_manifest(tmp_path):
    payload = {"schema_version": 1, "prefill": [], "decode": [
        {"batch_size": 1, "total_kv_read_tokens": 256}]}
    path = _plan(tmp_path, "frozen_explicit_manifest", payload)
    grid = grid_choice(f"aisimulate:{path}", (3,), None).by_depth[3]
    assert [d.context_tokens for d in grid.decode] == [256]
    auto = _plan(tmp_path, "native_auto_grid", None)
    with pytest.raises(GridError, match=r"point_generation\.source is .native_auto_grid."):
        grid_choice(f"aisimulate:{auto}", (3,), None)
    derived = grid_choice("aisimulate", (3,), None)   # no file: the engine's limits derive it
    assert not derived.by_depth
    assert derived.derive is not None


def test_collect_refuses_an_unmappable_plan_before_an_engine_starts(tmp_path, capsys):
    payload = {"schema_version": 1, "decode": [], "prefill": [
        {"batch_size": 3, "total_prefill_tokens": 100, "total_kv_read_tokens": 0}]}
    path = _plan(tmp_path, "frozen_explicit_manifest", payload)
    code = main(["collect", "--grid", f"aisimulate:{path}", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "options.benchmark_points.payload.prefill[0] (batch_size 3" in err
    assert "starting the engine" not in err


def test_grid_for_resolves_the_consumer_grids_from_the_engines_limits(tmp_path):
    """The plugin's and the CLI's grid choice: the consumer grids from the started engine's
    limits and its synthetic acceptance length, a plan from its file with the engine's K."""
    from types import SimpleNamespace

    from pytest_sdbench.run.collect import grid_for
    engine = SimpleNamespace(limits=LIMITS, spec=SimpleNamespace(
        synthetic_acceptance_length=2.78, draft_depth=3, oracle_limits=False))
    assert grid_for(engine, grid_choice("aisimulate", (3,), 2.78)) == direct_grid(LIMITS, 2.78)
    assert grid_for(engine, grid_choice("aisimulate-native", (3,), 2.78)) == native_grid(LIMITS)
    payload = {"schema_version": 1, "prefill": [],
               "decode": [{"batch_size": 2, "total_kv_read_tokens": 512}]}
    path = tmp_path / "points.json"
    path.write_text(json.dumps(payload))
    grid = grid_for(engine, grid_choice(f"aisimulate:{path}", (3,), 2.78))
    assert [(d.batch_size, d.context_tokens, d.draft_depth, d.acceptance_length)
            for d in grid.decode] == [(2, 256, 3, 2.78)]


def test_a_cpu_engine_collects_the_consumer_grid_exactly():
    """tests/fixtures/cpu-agg-aisimulate-grid.json: `sdbench collect --grid aisimulate
    --engine-arg max_num_seqs=4` on the tiny preset (vLLM 0.32 CPU, eager), every point
    collected exactly (a one-token prefill, a 33-token step behind a 4032-token prefix,
    decode to max_model_len - 12), and its grid is the one the engine's limits derive."""
    from pytest_sdbench.artifact import validate_path
    from pytest_sdbench.wire.points import engine_limits
    report = validate_path(FIXTURES / "cpu-agg-aisimulate-grid.json")
    assert report.ok, report.errors
    a = report.artifact
    assert a is not None
    assert a.status == "complete"
    limits = engine_limits(a.identity, a.kv_capacity, a.speculative.draft_depth,
                           synthetic=False)
    assert limits is not None
    assert limits.max_num_seqs == 4
    # collected under steady_step (legacy): its run, and so its longest context, was shorter
    assert a.grid == direct_grid(limits, None, a.measurement_policy.decode)
    observed = {(len(o.snapshot.requests), sum(r.new_tokens for r in o.snapshot.requests),
                 sum(r.kv_tokens for r in o.snapshot.requests)) for o in a.prefill}
    assert observed == {(p.batch_size, p.batch_size * p.new_tokens,
                         p.batch_size * p.cached_prefix_tokens) for p in a.grid.prefill}
