"""Each rule of the fail-closed validator rejects its case and names the field and value.
The artifacts are mutations of a real CPU artifact (tests/fixtures/cpu-agg-v7.json: 3
rounds; 8 prefill, 4 decode and 3 mixed points), or of the legacy bases of tests/forge.py
where a rule is about them."""

import json
import math
import re

import pytest

from pytest_sdbench.artifact.validate.report import Report, validate_data
from pytest_sdbench.wire.contract import (
    SCHEMA_VERSION,
    WARMUP_MAX_PASSES,
    WARMUP_MIN_PASSES,
)

from . import forge
from .conftest import FIXTURES
from .forge import reseal


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
    cpu_artifact_data["decode"] = [o for o in cpu_artifact_data["decode"] if o["point_index"] != 1]
    text = errors_of(cpu_artifact_data)
    assert "grid.decode[1] has no observation" in text
    assert "coverage.completed: 15, the artifact observes 14 points" in text


def test_duplicated_observation(cpu_artifact_data):
    first = cpu_artifact_data["decode"][0]
    cpu_artifact_data["decode"].append(first)
    n = len(cpu_artifact_data["decode"]) - 1
    text = errors_of(cpu_artifact_data)
    assert f"decode[{n}].repeat: point {first['point_index']} repeat {first['repeat']} " \
           f"step {first['step_index']} duplicates decode[0]" in text
    assert f"decode[{n}].native_iteration_id" in text


def test_snapshot_shape_differs_from_point(cpu_artifact_data):
    i = next(i for i, o in enumerate(cpu_artifact_data["prefill"])
             if o["point"]["cached_prefix_tokens"] == 64)
    cpu_artifact_data["prefill"][i]["snapshot"]["requests"][0]["kv_tokens"] = 32
    text = errors_of(cpu_artifact_data)
    assert f"prefill[{i}].snapshot: requests[0].kv_tokens is 32, the point needs 64" in text


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
    cpu_artifact_data["environment"]["other_gpu_processes"] = 0
    for phase in ("prefill", "decode", "mixed"):
        for obs in cpu_artifact_data[phase]:
            obs["provenance"]["device"] = "cuda"
            obs["provenance"]["timer"] = "torch.cuda.Event(enable_timing=True)"
            obs["timing"]["source"] = "cuda_event"
    assert "device: 'cuda' differs from identity.device 'cpu'" in errors_of(cpu_artifact_data)
    cpu_artifact_data["identity"]["device"]["value"] = "cuda"
    assert "integrity.identity_digest" in errors_of(cpu_artifact_data)
    reseal(cpu_artifact_data)   # digests are unkeyed: anyone can recompute them
    lines = errors_of(cpu_artifact_data).splitlines()
    assert lines[:2] == [
        "identity.device_name: 'x86_64' on a 'cuda' run; a GPU's name begins with one of "
        "NVIDIA, Tesla, Quadro, GeForce, TITAN, AMD, Radeon, AMD Instinct, a CPU's with none",
        "identity.attention_backend: 'CPU_ATTN' is a cpu backend, on a 'cuda' run"]
    # no sample carries the GPU clock a CUDA run reads beside each work item
    observed = [f"{phase}[{i}]" for phase in ("prefill", "decode", "mixed")
                for i in range(len(cpu_artifact_data[phase]))]
    assert lines[2:2 + len(observed)] == [f"{where}.gpu_clock: null on a cuda run; every CUDA "
                                          "sample carries the GPU clock it ran at"
                                          for where in observed]
    # and the host canary, read with no kernel launches, says so in every round
    assert lines[2 + len(observed):] == [
        f"rounds[{r}].canary_{when}.launch_seconds: None on a 'cuda' run (the kernel launch "
        "reading is taken on cuda, null on cpu)" for r in range(3) for when in ("before", "after")]


def test_complete_with_incomplete_coverage(cpu_artifact_data):
    forge.drop_point(cpu_artifact_data, "decode", 3, "test")
    forge.cohere(cpu_artifact_data)
    cpu_artifact_data["status"] = "complete"
    text = errors_of(cpu_artifact_data)
    assert text == "status: 'complete' with coverage 14/15 (1 skipped)"
    cpu_artifact_data["status"] = "partial"
    assert validate_data(cpu_artifact_data).ok


def test_prefill_and_decode_mixed_in_a_measured_batch(cpu_artifact_data):
    i = next(i for i, o in enumerate(cpu_artifact_data["decode"])
             if len(o["snapshot"]["requests"]) > 1)
    request = cpu_artifact_data["decode"][i]["snapshot"]["requests"][1]
    request["prompt_tokens"] = request["kv_tokens"] + 64  # this request is still prefilling
    text = errors_of(cpu_artifact_data)
    assert f"decode[{i}].snapshot.phase: recorded 'decode', but its requests make it " \
           "'mixed'" in text


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
    cpu_artifact_data["schema_version"] = SCHEMA_VERSION + 1
    assert f"schema_version: {SCHEMA_VERSION + 1} is newer than this reader (reads "\
           f"1..{SCHEMA_VERSION})" in errors_of(cpu_artifact_data)


@pytest.mark.parametrize("name, marker, decode", [
    ("legacy-v1-autoregressive.json", "v1-autoregressive", 4),
    ("legacy-v2-decode-only.json", "v2-phase-specific-speculative", 4)])
def test_legacy_artifacts_load_with_a_marker(name, marker, decode):
    report = validate_data(json.loads((FIXTURES / name).read_text()))
    assert report.ok, report.errors
    assert report.legacy == marker
    assert len(report.artifact.decode) == decode


def test_legacy_rules_still_apply():
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
    assert len(report.artifact.decode) == len(cpu_artifact_data["decode"])
    assert report.flags
    assert any("K=3 lies outside the import window K=4-5" in f for f in report.flags)
    assert not [f for f in validate_data(cpu_artifact_data, k_window=(1, 5)).flags
                if "import window" in f]


def _edit(path: str, value):
    """An edit of one field by its path, e.g. "decode[0].snapshot.corrections"."""
    def apply(data):
        parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
        node = data
        for part in parts[:-1]:
            node = node[int(part[1:-1])] if part.startswith("[") else node[part]
        last = parts[-1]
        node[int(last[1:-1]) if last.startswith("[") else last] = value
    return apply


def _graphs_without_capture(data):
    data["identity"]["cudagraph_mode"]["value"] = "none"
    forge.reseal(data)


# Rules the forgery corpus (tests/test_forgeries.py) does not reach, each with its message.
RULES = [
    ("cpu-v4", _edit("started_at", "2026-11-30T20:07:01+00:00"),
     "started_at: 2026-11-30T20:07:01+00:00 is after created_at "
     "2026-11-30T20:07:00.058702+00:00"),
    ("cpu-v4", _edit("decode[0].snapshot.corrections", [
        {"request_id": "x", "preemptions": 0, "from_iteration_id": 500, "rejected_tokens": 1}]),
     "decode[0].snapshot.corrections[0]: from_iteration_id 500, rejected_tokens 1; a correction "
     "comes from an earlier iteration"),
    ("cpu-v4", _edit("decode[1].snapshot.requests[0].preemptions", -1),
     "decode[1].snapshot.requests[0].preemptions: must be >= 0, got -1"),
    ("cpu-v4", _edit("decode[1].snapshot.queue.waiting", -2),
     "decode[1].snapshot.queue.waiting: must be >= 0, got -2"),
    ("cpu-v4", _edit("producer.package", "another-package"),
     "producer.package: expected 'pytest-sdbench', got 'another-package'"),
    ("cpu-v4", _edit("sampling.temperature", 0.7),
     "sampling: {'temperature': 0.7, 'ignore_eos': True, 'detokenize': False} differs from "
     "the generation sampling every request of the package uses"),
    ("cpu-v4", _edit("summaries[0].point_index", 40),
     "summaries[0]: prefill point 40 has no observation to summarise"),
    ("h200-graph-v3", _graphs_without_capture,
     "graph_mode: 'full', yet identity.cudagraph_mode is 'none' (the engine captured no graph)"),
]


@pytest.mark.parametrize("base, edit, message", RULES, ids=[r[2][:40] for r in RULES])
def test_rule(base, edit, message):
    data = forge.load(base)
    edit(data)
    assert message in errors_of(data)


def _repeated(data: dict, repeats: int) -> dict:
    """The artifact as if each point had been measured in ``repeats`` rounds (each sample a
    little slower), coherently."""
    return forge.repeat_points(data, tuple(1 + r / 100 for r in range(1, repeats)))


def test_a_repeated_artifact_is_valid(cpu_artifact_data):
    report = validate_data(_repeated(cpu_artifact_data, 3))
    assert report.ok, report.errors
    assert {s.samples for s in report.artifact.summaries} == {3}
    assert report.artifact.summaries[0].cv > 0


def test_repeats_of_a_point_share_its_warmup(cpu_artifact_data):
    data = _repeated(cpu_artifact_data, 2)
    point = next(o["point_index"] for o in data["decode"] if o["warmup_settled"])
    first, later = [i for i, o in enumerate(data["decode"]) if o["point_index"] == point][:2]
    passes = data["decode"][first]["warmup_passes"]
    other = passes + 1 if passes < WARMUP_MAX_PASSES else passes - 1   # within the policy
    data["decode"][later]["warmup_passes"] = other
    assert errors_of(data) == (
        f"decode[{later}].warmup_passes: {other} differs from {passes} in "
        f"decode[{first}], a repeat of the same point (a point is warmed up once)")


def test_a_boolean_is_no_schema_version(cpu_artifact_data):
    cpu_artifact_data["schema_version"] = True
    assert errors_of(cpu_artifact_data) == \
        f"schema_version: expected an integer 1..{SCHEMA_VERSION}, got bool True"


def test_a_legacy_label_must_fit_the_document():
    data = json.loads((FIXTURES / "cpu-agg-v4.json").read_text())
    data["schema_version"] = 3
    text = errors_of(data)
    assert "schema_version: 3 (v3-single-sample) does not fit the document: started_at is a " \
           "field of schema_version 4 and later; the artifact is relabelled" in text
    assert "prefill[0].repeat (and 11 more)" not in text   # one message per field
    assert "prefill[0].repeat (and 7 more) is a field of schema_version 4" in text


def _own_passes(data: dict) -> dict:
    """The artifact as if every point had settled by passes of its own (at least
    WARMUP_MIN_PASSES): the fixture's by_shape_seeded warm-up gave some points one pass, or
    none, on an earlier point's settled shape; the tests below then give the points they
    are about the passes they need."""
    for phase in ("prefill", "decode", "mixed"):
        for obs in data[phase]:
            obs.update(warmup_passes=max(obs["warmup_passes"], WARMUP_MIN_PASSES),
                       warmup_settled=True)
    return data


def _by_shape(data: dict, passes: dict[int, int]) -> dict:
    """The artifact stating the by_shape warm-up, with the given decode points' passes."""
    _own_passes(data)
    data["measurement_policy"]["warmup"].update(rule="by_shape", min_passes=1)
    for obs in data["decode"]:
        if obs["point_index"] in passes:
            obs.update(warmup_passes=passes[obs["point_index"]], warmup_settled=True)
    return data


def test_one_warmup_pass_stands_where_an_earlier_point_settled_its_compiled_shape(
        cpu_artifact_data):
    # decode points 0 and 1: batch 1, K=3, contexts 128 and 512 (one eager shape, 4 tokens);
    # point 0 settled by passes of its own, so point 1 may take one
    report = validate_data(_by_shape(cpu_artifact_data, {1: 1}))
    assert report.ok, report.errors


@pytest.mark.parametrize("point", [0, 2])   # 0: the first of its shape; 2: batch 4, alone
def test_one_warmup_pass_without_a_settled_shape_before_it_is_refused(cpu_artifact_data,
                                                                      point):
    data = _by_shape(cpu_artifact_data, {point: 1})
    first = next(i for i, o in enumerate(data["decode"]) if o["point_index"] == point)
    tokens = data["decode"][first]["point"]["batch_size"] * 4
    assert errors_of(data) == (
        f"decode[{first}].warmup_passes: 1 under the by_shape warm-up, yet no earlier decode "
        f"point of its compiled shape (eager, {tokens} tokens) settled; a point of an "
        "unsettled shape warms up for at least 2 passes")


def test_the_by_shape_warmup_states_its_own_bounds(cpu_artifact_data):
    data = _by_shape(cpu_artifact_data, {})
    data["measurement_policy"]["warmup"]["min_passes"] = 2
    assert errors_of(data) == "measurement_policy.warmup.min_passes: 2, the contract states 1"


def _seeded(data: dict, passes: dict[tuple[str, int], int]) -> dict:
    """The artifact stating the by_shape_seeded warm-up, with the given points' passes."""
    _own_passes(data)
    data["measurement_policy"]["warmup"].update(rule="by_shape_seeded", min_passes=0)
    for (phase, point), n in passes.items():
        for obs in data[phase]:
            if obs["point_index"] == point:
                obs.update(warmup_passes=n, warmup_settled=True)
    return data


def test_a_seeded_decode_point_of_a_settled_shape_stands_with_no_pass(cpu_artifact_data):
    # decode point 1 is of decode point 0's shape (batch 1, K=3, eager), which settled
    report = validate_data(_seeded(cpu_artifact_data, {("decode", 1): 0}))
    assert report.ok, report.errors


def test_a_seeded_decode_point_with_no_pass_and_no_settled_shape_before_it_is_refused(
        cpu_artifact_data):
    data = _seeded(cpu_artifact_data, {("decode", 2): 0})   # batch 4: alone of its shape
    first = next(i for i, o in enumerate(data["decode"]) if o["point_index"] == 2)
    assert errors_of(data) == (
        f"decode[{first}].warmup_passes: 0 under the by_shape_seeded warm-up, yet no earlier "
        "decode point of its compiled shape (eager, 16 tokens) settled; a point of an "
        "unsettled shape warms up for at least 2 passes")


def test_a_seeded_prefill_point_takes_its_one_pass(cpu_artifact_data):
    # prefill point 1 (batch 1, 64 new tokens after a 64-token prefix) is of point 0's shape
    data = _seeded(cpu_artifact_data, {("prefill", 1): 0})
    first = next(i for i, o in enumerate(data["prefill"]) if o["point_index"] == 1)
    assert errors_of(data) == (f"prefill[{first}].warmup_passes: 0 under the by_shape_seeded "
                               "warm-up; a prefill point takes at least 1")
