"""The GPU oracle (CUDA only; skipped with the reason on CPU): the qwen3-0.6b preset under a
3.6 GiB VRAM mark, prefill-only collection, the decode acceptance matrix, and the CUDA-graph
batch axis. Every collection checks the engine's restoration itself
(pytest_sdbench.run.collect.collect_to_artifact). On CUDA the suite turns on synthetic acceptance
and CUDA graphs (gate.py), so the gate runs every test with no other option; the eager
engine is the second run:

    pytest --sdbench-mode=agg oracle_tests/
    pytest --sdbench-mode=agg --sdbench-engine-arg enforce_eager=true oracle_tests/
"""

import pytest

from pytest_sdbench.engine.spec import GRAPH_BATCHES
from pytest_sdbench.plugin.testing import observation_violations
from pytest_sdbench.wire.contract import GRAPH_EAGER, MIXED_STEP_INDEX, STATUS_COMPLETE
from pytest_sdbench.wire.points import parse_grid

from .gate import skip_for_option

pytestmark = [pytest.mark.sdbench_cuda, pytest.mark.sdbench_vram(3.6)]

MATRIX_AL = (1.0, 2.78, 4.0)
MATRIX_TOKENS = 128  # output tokens per request: enough decode steps to estimate AL


def _eager(engine) -> bool:
    return bool(engine.identity.settings.enforce_eager.value)


def _mode(engine) -> str:
    return "eager" if _eager(engine) else "cuda-graph"


def test_prefill_only_oracle(sdbench_collect):
    run = sdbench_collect("prefill")
    a = run.artifact
    assert a.status == STATUS_COMPLETE, a.coverage.skipped_points
    assert a.prefill
    assert not a.decode
    assert observation_violations(a) == []
    assert any(o.kv_seed_regime == "real_prefix" for o in a.prefill)


@pytest.mark.parametrize("al", MATRIX_AL)
def test_decode_matrix_cell(sdbench_collect, sdbench_engine, sdbench_note, al):
    engine = sdbench_engine
    if engine.spec.synthetic_acceptance_length is None:
        skip_for_option("acceptance-length", "the matrix needs synthetic acceptance")
    k = engine.spec.draft_depth
    # The largest batch whose uniform decode step is a captured graph shape, so that the
    # CUDA-graph row of the matrix really runs as a graph (and the eager row the same batch).
    batch = max(_captured_batches(engine)) if not _eager(engine) else \
        max(GRAPH_BATCHES)
    grid = parse_grid({"decode": [{"batch_size": batch, "context_tokens": 256,
                                   "draft_depth": k, "acceptance_length": al}]})
    run = sdbench_collect("decode", grid, decode_tokens=MATRIX_TOKENS)
    # settled_steps retains several steps of the one work item: each is checked, after the
    # note, so that a failing cell still leaves its figures in the gate's summary
    observations = run.artifact.decode
    assert observations, "the matrix cell retained no decode step"
    obs = observations[0]
    sdbench_note(f"matrix {_mode(engine)} B={batch} AL {al}: observed "
                 f"{obs.run_acceptance_length:.3f} over {obs.run_acceptance_samples} "
                 f"request-steps (first retained step "
                 f"{obs.observed_acceptance_length:.2f}; {len(observations)} retained), "
                 f"graph_mode {obs.graph_mode}, {obs.timing.seconds * 1e3:.3f} ms")
    assert observation_violations(run.artifact) == []
    for obs in observations:
        assert (obs.graph_mode == GRAPH_EAGER) == _eager(engine), obs.graph_mode
        assert abs(obs.run_acceptance_length - al) <= 0.1, obs.run_acceptance_length


def _capture_sizes(engine) -> list[int]:
    """As the started engine's config holds them (the identity; also under tensor parallel,
    where the engine lives in the rank processes)."""
    sizes = engine.identity.settings.cudagraph_capture_sizes
    assert sizes.resolved, sizes.reason
    return sorted(sizes.value)


def _captured_batches(engine) -> list[int]:
    """Batches whose uniform decode step (1 + K tokens a request) is a captured size."""
    k = engine.spec.draft_depth
    return sorted({s // (k + 1) for s in _capture_sizes(engine) if s % (k + 1) == 0})


def test_cuda_graph_batch_axis(sdbench_collect, sdbench_engine, sdbench_note):
    engine = sdbench_engine
    if _eager(engine):
        pytest.skip("the engine runs eagerly, as chosen (enforce_eager): the graph axis "
                    "runs in the gate's default run, with CUDA graphs")
    k = engine.spec.draft_depth
    sizes = _capture_sizes(engine)
    captured = _captured_batches(engine)
    axis = sorted({b for c in captured for b in (c, c + 1) if b <= engine.max_num_seqs})
    al = engine.spec.synthetic_acceptance_length
    grid = parse_grid({"decode": [{"batch_size": b, "context_tokens": 128, "draft_depth": k,
                                   "acceptance_length": al} for b in axis]})
    run = sdbench_collect("decode", grid)
    a = run.artifact
    assert a.status == STATUS_COMPLETE
    assert observation_violations(a) == []
    for obs in a.decode:
        tokens = obs.point.batch_size * (k + 1)
        sdbench_note(f"graph axis: B={obs.point.batch_size} ({tokens} tokens; captured sizes "
                     f"{sizes}) ran {obs.graph_mode}, {obs.timing.seconds * 1e3:.3f} ms")
        if tokens <= max(sizes):
            assert obs.graph_mode != GRAPH_EAGER
        else:
            assert obs.graph_mode == GRAPH_EAGER


def test_mixed_step_oracle(sdbench_collect, sdbench_engine, sdbench_note):
    """Mixed points on the GPU under async scheduling: each retained step holds exactly its
    point's decodes (1 + K at their context) and prefills (whole, over the verified prefix),
    its native ID joins snapshot and CUDA-event time, the graph mode is one vLLM reported;
    the collection checks the engine's restoration and its serving afterwards itself."""
    engine = sdbench_engine
    k, al = engine.spec.draft_depth, engine.spec.synthetic_acceptance_length
    block = engine.block_size
    point = {"draft_depth": k, "acceptance_length": al}
    grid = parse_grid({"mixed": [
        {**point, "decode_batch_size": 4, "context_tokens": 256, "prefill_batch_size": 1,
         "prefill_tokens": 128},
        {**point, "decode_batch_size": 2, "context_tokens": 512, "prefill_batch_size": 2,
         "prefill_tokens": 4 * block, "cached_prefix_tokens": 2 * block}]})
    run = sdbench_collect("mixed", grid)
    a = run.artifact
    assert a.status == STATUS_COMPLETE, a.coverage.skipped_points
    assert observation_violations(a) == []
    for obs in a.mixed:
        p = obs.point
        sdbench_note(f"mixed {_mode(engine)} Bd={p.decode_batch_size} ctx={p.context_tokens} "
                     f"Bp={p.prefill_batch_size} new={p.prefill_tokens} "
                     f"prefix={p.cached_prefix_tokens}: {obs.timing.seconds * 1e3:.3f} ms, "
                     f"graph_mode {obs.graph_mode}, step {obs.step_index}, corrections "
                     f"{len(obs.snapshot.corrections)}")
        assert obs.step_index == MIXED_STEP_INDEX
        assert obs.snapshot.total_scheduled_tokens == p.scheduled_tokens
        assert obs.cache_hit_tokens == (p.cached_prefix_tokens,) * p.prefill_batch_size
        assert obs.native_iteration_id == obs.timing.native_iteration_id
