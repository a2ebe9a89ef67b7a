from pytest_sdbench.contract import STATUS_COMPLETE


def test_profile(sdbench_collection, sdbench_engine):
    a = sdbench_collection.artifact
    assert a.status == STATUS_COMPLETE, a.coverage
    assert (len(a.prefill), len(a.decode)) == (1, 1)
    assert sdbench_engine.spec.preset == "tiny"
