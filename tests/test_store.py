"""Artifacts are written atomically: complete or not at all."""

import gzip
import json
import lzma

import pytest

from pytest_sdbench.artifact import store


class Boom:
    pass


def test_write_is_complete_and_leaves_no_temp_file(tmp_path):
    data = {"a": 1}
    path = store.write_artifact(data, tmp_path / "x" / "a.json")
    assert json.loads(path.read_text()) == data
    assert [p.name for p in path.parent.iterdir()] == ["a.json"]


def test_failed_write_leaves_the_old_file_untouched(tmp_path):
    path = store.write_artifact({"v": 1}, tmp_path / "a.json")
    with pytest.raises(TypeError):
        store.write_artifact({"v": Boom()}, path)
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_read_json_refuses_non_objects(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(store.UnusableArtifact, match="a JSON list, not an artifact object"):
        store.read_json(path)


def test_read_json_reads_a_gzipped_artifact_as_its_json(tmp_path):
    data = {"run_id": "x", "decode": [{"a": 1}]}
    path = tmp_path / "a.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    assert store.read_json(path) == data


def test_read_json_reads_an_xz_artifact_as_its_json(tmp_path):
    data = {"run_id": "x", "decode": [{"a": 1}]}
    path = tmp_path / "a.json.xz"
    path.write_bytes(lzma.compress(json.dumps(data).encode()))
    assert store.read_json(path) == data


def test_an_artifacts_text_is_its_json_with_a_line_an_observation(cpu_artifact_data,
                                                                   monkeypatch):
    """ArtifactText: the text parses to the artifact's encoding; each observation is one line
    of it, encoded once however often the text is made (a collection's checkpoints)."""
    from pytest_sdbench.artifact.validate.report import validate_data
    from pytest_sdbench.wire import typed
    artifact = validate_data(cpu_artifact_data).artifact
    rows = [*artifact.prefill, *artifact.decode, *artifact.mixed]
    assert artifact.mixed   # the v7 fixture: every phase's rows
    encoded: list = []
    real = typed.encode
    monkeypatch.setattr(store.typed, "encode", lambda v: (encoded.append(v), real(v))[1])
    text = store.ArtifactText()
    first, second = text.text(artifact), text.text(artifact)
    assert sum(v is row for v in encoded for row in rows) == len(rows)
    monkeypatch.undo()
    assert first == second
    assert json.loads(first) == real(artifact) == cpu_artifact_data
    lines = first.splitlines()
    assert sum(json.loads(line.rstrip(",")) in map(real, rows) for line in lines
               if line.startswith("{\"point_index\"")) == len(rows)
