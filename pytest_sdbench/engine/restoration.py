"""After a benchmark, the engine holds what it held at start-up and serves the same: every
collection checks it after the observer's detach (session), and tests import it from
pytest_sdbench.plugin.testing."""

from __future__ import annotations

from . import ranks
from .surface import Engine, ServingProbe


def restoration_violations(engine: Engine) -> list[str]:
    """After a benchmark: the engine holds what it held at start-up and serves the same.
    Tensor parallel: every rank checks its own engine, and the ranks must serve the same
    greedy output; each problem names its rank."""
    ranked = getattr(engine, "rank_restoration_violations", None)
    if ranked is not None:  # the proxy of a tensor-parallel engine: the ranks check
        return ranked()
    after = engine.probe()
    by_rank = ranks.gather_from_ranks((_violations(engine, after), after.tokens))
    if len(by_rank) == 1:
        return by_rank[0][0]
    problems = [f"rank {r}: {p}" for r, (found, _) in enumerate(by_rank) for p in found]
    tokens = [t for _, t in by_rank]
    if any(t != tokens[0] for t in tokens):
        problems.append("the ranks served different greedy outputs: " + "; ".join(
            f"rank {r}: {list(t)}" for r, t in enumerate(tokens)))
    return problems


def _violations(engine: Engine, after: ServingProbe) -> list[str]:
    baseline = engine.baseline
    assert baseline is not None, "a started engine holds its start-up probe"
    problems = []
    if after.scheduler_attrs != baseline.scheduler_attrs:
        problems.append(f"scheduler attributes differ: "
                        f"{sorted(after.scheduler_attrs ^ baseline.scheduler_attrs)}")
    if after.worker_attrs != baseline.worker_attrs:
        problems.append(f"worker attributes differ: "
                        f"{sorted(after.worker_attrs ^ baseline.worker_attrs)}")
    if after.dispatcher_attrs != baseline.dispatcher_attrs:
        problems.append(f"CUDA-graph dispatcher attributes differ: "
                        f"{sorted(after.dispatcher_attrs ^ baseline.dispatcher_attrs)}")
    if after.synthetic_rates != baseline.synthetic_rates:
        problems.append(f"synthetic acceptance rates changed: {after.synthetic_rates} vs "
                        f"{baseline.synthetic_rates}")
    if len(after.tokens) != len(baseline.tokens):
        problems.append(f"served {len(after.tokens)} tokens, not {len(baseline.tokens)}")
    natural = baseline.synthetic_rates is None  # synthetic accepts drafts at random
    if natural and after.tokens != baseline.tokens:
        problems.append(f"greedy output changed: {after.tokens} vs {baseline.tokens}")
    return problems
