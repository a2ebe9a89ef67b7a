"""The published JSON Schema is generated from the artifact model and validates artifacts."""

import jsonschema

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
