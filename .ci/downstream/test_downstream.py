"""A downstream repository's test, run by .ci/run (step wheel) outside the checkout, against
pytest-sdbench installed from its wheel into an environment that holds vLLM's CPU build: the
fixtures on the tiny preset and a two-point grid (grid.json)."""

from pytest_sdbench.wire.contract import STATUS_COMPLETE


def test_profile(sdbench_collection, sdbench_engine):
    a = sdbench_collection.artifact
    assert a.status == STATUS_COMPLETE, a.coverage
    assert (len(a.prefill), len(a.decode)) == (1, 1)
    assert sdbench_engine.spec.preset == "tiny"
    assert sdbench_collection.path.name.startswith("sdbench-agg-k3-")
