"""Each rule of the fail-closed validator rejects its case and names the field and value.
The artifacts are mutations of a real CPU artifact (tests/fixtures/cpu-agg-v4.json)."""

import math

import pytest

from pytest_sdbench.artifact import validate_data
from pytest_sdbench.artifact.validate import Report

from .conftest import FIXTURES


def errors_of(data) -> str:
    report = validate_data(data)
    assert not report.ok, "the validator accepted a broken artifact"
    return "\n".join(report.errors)


def test_real_artifact_is_valid(cpu_artifact_data):
    report = validate_data(cpu_artifact_data)
    assert report.ok, report.errors
    assert report.legacy is None
    assert report.artifact.status == "complete"


def test_missing_observation(cpu_artifact_data):
    del cpu_artifact_data["decode"][1]
    text = errors_of(cpu_artifact_data)
    assert "grid.decode[1] has no observation" in text
    assert "coverage.completed: 12, the artifact observes 11 points" in text


def test_duplicated_observation(cpu_artifact_data):
    cpu_artifact_data["decode"].append(cpu_artifact_data["decode"][0])
    text = errors_of(cpu_artifact_data)
    assert "decode[4].repeat: point 0 repeat 0 duplicates decode[0]" in text
    assert "decode[4].native_iteration_id" in text


def test_snapshot_shape_differs_from_point(cpu_artifact_data):
    cpu_artifact_data["prefill"][1]["snapshot"]["requests"][0]["kv_tokens"] = 32
    text = errors_of(cpu_artifact_data)
    assert "prefill[1].snapshot: requests[0].kv_tokens is 32, the point needs 64" in text


def test_point_relabelled(cpu_artifact_data):
    cpu_artifact_data["decode"][0]["point"]["context_tokens"] = 999
    assert "decode[0].point:" in errors_of(cpu_artifact_data)


def test_timing_id_differs_from_snapshot(cpu_artifact_data):
    timing = cpu_artifact_data["decode"][2]["timing"]
    timing["native_iteration_id"] += 1
    assert "decode[2].timing.native_iteration_id" in errors_of(cpu_artifact_data)


@pytest.mark.parametrize("seconds", [0.0, -0.001, math.nan, math.inf])
def test_bad_time(cpu_artifact_data, seconds):
    cpu_artifact_data["prefill"][0]["timing"]["seconds"] = seconds
    assert f"prefill[0].timing.seconds: must be finite and > 0, got {seconds}" in \
        errors_of(cpu_artifact_data)


def test_cpu_timing_relabelled_as_cuda(cpu_artifact_data):
    cpu_artifact_data["decode"][0]["timing"]["source"] = "cuda_event"
    text = errors_of(cpu_artifact_data)
    assert "decode[0].timing.source: 'cuda_event' cannot come from a 'cpu' run" in text


def test_whole_artifact_relabelled_as_cuda(cpu_artifact_data):
    cpu_artifact_data["device"] = "cuda"
    for phase in ("prefill", "decode"):
        for obs in cpu_artifact_data[phase]:
            obs["provenance"]["device"] = "cuda"
            obs["provenance"]["timer"] = "torch.cuda.Event(enable_timing=True)"
            obs["timing"]["source"] = "cuda_event"
    assert "device: 'cuda' differs from identity.device.value 'cpu'" in \
        errors_of(cpu_artifact_data)
    cpu_artifact_data["identity"]["device"]["value"] = "cuda"
    assert "integrity.identity_digest" in errors_of(cpu_artifact_data)


def test_complete_with_incomplete_coverage(cpu_artifact_data):
    skipped = cpu_artifact_data["decode"].pop()
    cpu_artifact_data["coverage"].update(completed=11, skipped=1, skipped_points=[
        {"phase": "decode", "point_index": skipped["point_index"], "reason": "test"}])
    text = errors_of(cpu_artifact_data)
    assert "status: 'complete' with coverage 11/12 (1 skipped)" in text
    cpu_artifact_data["status"] = "partial"
    assert validate_data(cpu_artifact_data).ok


def test_prefill_and_decode_mixed_in_a_measured_batch(cpu_artifact_data):
    request = cpu_artifact_data["decode"][2]["snapshot"]["requests"][1]
    request["prompt_tokens"] = request["kv_tokens"] + 64  # this request is still prefilling
    text = errors_of(cpu_artifact_data)
    assert "decode[2].snapshot.phase: recorded 'decode', but its requests make it 'mixed'" in text


def test_warmup_counted_as_measured(cpu_artifact_data):
    cpu_artifact_data["prefill"][3]["snapshot"]["booking"] = "warmup"
    assert "prefill[3].snapshot.booking: 'warmup'" in errors_of(cpu_artifact_data)


@pytest.mark.parametrize("part", ["kv_capacity", "identity"])
def test_kv_capacity_or_identity_missing(cpu_artifact_data, part):
    del cpu_artifact_data[part]
    assert f"{part}: missing" in errors_of(cpu_artifact_data)


def test_kv_capacity_altered(cpu_artifact_data):
    cpu_artifact_data["kv_capacity"]["num_blocks"] += 100
    text = errors_of(cpu_artifact_data)
    assert "integrity.kv_capacity_digest" in text
    assert "kv_capacity.tokens" in text


def test_identity_altered(cpu_artifact_data):
    cpu_artifact_data["identity"]["target"]["dtype"]["value"] = "float16"
    assert "integrity.identity_digest" in errors_of(cpu_artifact_data)


def test_identity_guessed_field(cpu_artifact_data):
    revision = cpu_artifact_data["identity"]["target"]["revision"]
    assert revision["status"] == "unresolved"
    assert "revision" in revision["reason"]
    revision.update(value="main")  # a guess left beside the reason
    assert "identity.target.revision: unresolved fields need a reason and no value" in \
        errors_of(cpu_artifact_data)


@pytest.mark.parametrize("value, kind", [(True, "bool True"), (4.0, "float 4.0")])
def test_bool_or_float_where_an_integer_belongs(cpu_artifact_data, value, kind):
    cpu_artifact_data["decode"][3]["snapshot"]["requests"][0]["kv_tokens"] = value
    assert f"decode[3].snapshot.requests[0].kv_tokens: expected integer, got {kind}" in \
        errors_of(cpu_artifact_data)


def test_future_version_is_refused(cpu_artifact_data):
    cpu_artifact_data["schema_version"] = 5
    assert "schema_version: 5 is newer than this reader" in errors_of(cpu_artifact_data)


@pytest.mark.parametrize("name, marker, decode", [
    ("legacy-v1-autoregressive.json", "v1-autoregressive", 4),
    ("legacy-v2-decode-only.json", "v2-phase-specific-speculative", 4)])
def test_legacy_artifacts_load_with_a_marker(name, marker, decode):
    import json
    report = validate_data(json.loads((FIXTURES / name).read_text()))
    assert report.ok, report.errors
    assert report.legacy == marker
    assert len(report.artifact.decode) == decode


def test_legacy_rules_still_apply():
    import json
    data = json.loads((FIXTURES / "legacy-v2-decode-only.json").read_text())
    data["decode"][0]["timing"]["seconds"] = -1.0
    assert "decode[0].timing.seconds" in errors_of(data)
    data = json.loads((FIXTURES / "legacy-v2-decode-only.json").read_text())
    data["mode"] = "agg"
    assert "'agg' did not exist in schema_version 2" in errors_of(data)
    data = json.loads((FIXTURES / "legacy-v1-autoregressive.json").read_text())
    data["identity"]["target"]["dtype"]["value"] = "float16"
    assert "legacy artifact was altered" in errors_of(data)


def test_draft_depth_outside_import_window_is_flagged_not_dropped(cpu_artifact_data):
    report: Report = validate_data(cpu_artifact_data, k_window=(4, 5))
    assert report.ok
    assert len(report.artifact.decode) == 4
    assert report.flags
    assert "K=3 lies outside the import window K=4-5" in report.flags[0]
    assert not validate_data(cpu_artifact_data, k_window=(1, 5)).flags
