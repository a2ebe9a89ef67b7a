"""The published JSON Schema is generated from the artifact model and validates artifacts."""

import jsonschema
import pytest

from pytest_sdbench.artifact import schema


def test_published_schema_is_the_generated_one():
    assert schema.SCHEMA_PATH.read_text() == schema.render(), (
        "schema.json is stale: run `python -m pytest_sdbench.artifact.schema`")


def test_schema_is_a_valid_json_schema():
    meta = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)
    assert [e.message for e in meta.iter_errors(schema.load())] == []


def test_schema_accepts_a_real_artifact(cpu_artifact_data):
    errors = jsonschema.Draft202012Validator(schema.load()).iter_errors(cpu_artifact_data)
    assert [f"{list(e.absolute_path)}: {e.message}" for e in errors] == []


def test_schema_rejects_a_missing_field(cpu_artifact_data):
    del cpu_artifact_data["kv_capacity"]
    errors = list(jsonschema.Draft202012Validator(schema.load()).iter_errors(cpu_artifact_data))
    assert any("kv_capacity" in e.message for e in errors)


def _forged(data):
    """Four violations: one in the header, one in each observation list (the last row)."""
    data["mode"] = 5
    data["prefill"][-1]["graph_mode"] = 3
    data["decode"][-1]["snapshot"]["requests"][0]["kv_tokens"] = "x"
    data["mixed"][-1]["step_index"] = "3"
    return data


def test_violations_name_the_path_of_each_error(cpu_artifact_data):
    assert schema.violations(cpu_artifact_data) == []
    found = schema.violations(_forged(cpu_artifact_data))
    last_prefill, last_decode, last_mixed = (len(cpu_artifact_data[n]) - 1
                                             for n in ("prefill", "decode", "mixed"))
    assert sorted(found) == sorted([
        "mode: 5 is not one of ['prefill', 'decode', 'agg', 'mixed']",
        f"prefill.{last_prefill}.graph_mode: 3 is not one of ['eager', 'piecewise', 'full']",
        f"decode.{last_decode}.snapshot.requests.0.kv_tokens: 'x' is not of type 'integer'",
        f"mixed.{last_mixed}.step_index: '3' is not of type 'integer'"])


def test_observations_checked_in_worker_processes_find_what_one_process_finds(
        cpu_artifact_data):
    """The slices of a long artifact, each checked in a process of its own, report the same
    violations under the same paths (indexes into the whole list) as the check in one."""
    data = _forged(cpu_artifact_data)
    data["decode"] = data["decode"] * 3   # more slices than the lists: indexes offset
    serial = schema.violations(data, workers=1)
    assert len(serial) == 6   # the forged decode row, three times
    assert sorted(schema.violations(data, workers=3)) == sorted(serial)


def test_a_worker_that_fails_is_an_error_not_a_pass(cpu_artifact_data, monkeypatch):
    monkeypatch.setattr(schema, "_WORKER", "pytest_sdbench.artifact.no_such_module")
    with pytest.raises(RuntimeError, match=r"JSON Schema check of prefill\[0:\] failed"):
        schema.violations(cpu_artifact_data, workers=2)
