"""The artifacts the GPU oracle wrote on the H200 (docs/evidence/h200/) satisfy the contract,
and a copy with its timing relabelled is refused; every artifact committed as evidence, from
one H200 or two (docs/evidence/h200*/), is accepted by the validator."""

import functools
import json
from pathlib import Path

import jsonschema
import pytest

from pytest_sdbench.artifact import schema, validate_path
from pytest_sdbench.artifact.validate.report import Report, validate_data

EVIDENCE = Path(__file__).resolve().parents[1] / "docs" / "evidence" / "h200"
ARTIFACTS = sorted(EVIDENCE.glob("artifacts-*/*.json"))
EVERY_ARTIFACT = sorted(p for pattern in ("h200*/**/sdbench-*.json", "h200*/**/sdbench-*.json.gz",
                                          "h200*/**/sdbench-*.json.xz")
                        for p in EVIDENCE.parent.glob(pattern) if "-index" not in p.name)


# One validation and one parse of each committed file a run: artifacts-*/ is in both
# ARTIFACTS and EVERY_ARTIFACT, and its tests read the same report and document. The tests
# only read what these return (a fresh copy is made before an edit).
@functools.cache
def _validated(path: Path) -> Report:
    return validate_path(path)


@functools.cache
def _document(path: Path) -> str:
    return path.read_text()


def test_evidence_is_present():
    assert {p.parent.name for p in ARTIFACTS} == {"artifacts-eager", "artifacts-graph"}


@pytest.mark.parametrize("path", ARTIFACTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_h200_artifact_is_valid(path):
    report = _validated(path)
    assert report.ok, report.errors
    assert report.artifact.device == "cuda"
    assert {o.timing.source for o in (*report.artifact.prefill, *report.artifact.decode)} == \
        {"cuda_event"}
    data = json.loads(_document(path))
    if report.legacy is None:  # the published schema is the current version's
        jsonschema.validate(data, schema.load())
    else:
        assert report.legacy == "v3-single-sample"
        assert data["schema_version"] == 3


@pytest.mark.parametrize("path", [p for p in ARTIFACTS if "-agg-" in p.name],
                         ids=lambda p: p.parent.name)
def test_h200_artifact_with_timing_source_edited_is_rejected(path):
    data = json.loads(_document(path))
    data["decode"][0]["timing"]["source"] = "host_perf_counter"
    errors = validate_data(data).errors
    assert any(e.startswith("decode[0].timing.source: 'host_perf_counter' cannot come from a "
                            "'cuda' run") for e in errors), errors


def test_every_evidence_folder_has_artifacts():
    folders = {p.relative_to(EVIDENCE.parent).parts[0] for p in EVERY_ARTIFACT}
    assert folders == {"h200", "h200x2"}, folders


@pytest.mark.parametrize("path", EVERY_ARTIFACT,
                         ids=lambda p: str(p.relative_to(EVIDENCE.parent)))
def test_every_committed_gpu_artifact_is_valid(path):
    report = _validated(path)
    assert report.ok, report.errors
    assert report.artifact.device == "cuda"
    if "h200x2" in path.parts:   # its folder names the rank count: ...tp1... or ...tp2...
        ranks = 2 if "tp2" in path.parent.name else 1
        assert report.artifact.identity.tensor_parallel_size.value == ranks
