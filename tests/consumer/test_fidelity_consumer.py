"""The consumer's side of `sdbench fidelity`, run by AISimulate's own code in its own
environment (scripts/consumer-test.sh): a constructed serving run on a committed H200 profile,
the legacy production profile (schema v4, decode at the first decode step, `steady_step`:
docs/reference.md; steps at its measured points and beside them), priced by the consumer's
loader over the table `sdbench export --to aisimulate` writes, and its workload predicted end
to end by `aisimulate predict`. A CPU profile's export is refused (host timing), so the
consumer's side of a CPU fidelity run is absent, and says why; the H200 profile stands in for
the GPU run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from pytest_sdbench.aisimulate.export.vocabulary import CONSUMER_VERSION
from pytest_sdbench.fidelity.predict_phases import profile_points
from pytest_sdbench.fidelity.report import CONSUMER, OURS
from pytest_sdbench.fidelity.run import report

from ..fidelity_runs import constructed_run
from ..forge import BASES

# the legacy production profile (schema v4, steady_step): the mapping, not its figures
H200_LEGACY = BASES["h200-production-v4"]
CPU = Path(__file__).resolve().parents[1] / "fixtures" / "cpu-agg-v4.json"
# `aisimulate predict` needs more of the consumer's dependencies than its import does
# (requirements/consumer.txt lists them).
PREDICT_DEPENDENCIES = ("psutil", "ijson", "tqdm", "prettytable")


@pytest.fixture(scope="module")
def legacy_h200_report(tmp_path_factory):
    """The fidelity report of a constructed run on the legacy production profile."""
    # 2 requests a second: the consumer's simulated engine never batches two prefills, whose
    # batch 2 the profile lacks (at 4 a second it does, and `aisimulate predict` refuses)
    folder = constructed_run(H200_LEGACY, tmp_path_factory.mktemp("fidelity") / "h200-fidelity",
                             rate=2.0)
    return report(folder, python=sys.executable, plots=False, say=print)


def test_the_consumer_prices_every_step_its_table_covers(legacy_h200_report):
    """On the legacy production profile's export: the consumer's loader prices every step
    its table covers."""
    figures, rows = legacy_h200_report.figures, legacy_h200_report.rows
    consumer = figures["predictors"][CONSUMER]
    assert consumer["status"] == "run", consumer
    assert consumer["version"] == CONSUMER_VERSION
    # one graph mode per phase: prefill ran eager and piecewise, the export keeps eager
    assert consumer["graph_modes"] == {"prefill": "eager"}
    by_mode = {}
    for row in rows:
        ours, theirs = row.predictions[OURS], row.predictions[CONSUMER]
        by_mode.setdefault((row.step.kind, row.step.graph_mode, theirs.priced), []).append(row)
        at_point = row.step.native_iteration_id <= len(profile_points_at_run_al())
        if at_point and theirs.priced:
            # a measured point: the consumer returns the exported (median) time, as we do
            assert theirs.seconds == pytest.approx(row.step.seconds, rel=1e-12)
            assert ours.seconds == row.step.seconds
            assert "exact_lookup" in (theirs.how or "")
    # the piecewise prefill points are not in its table: refused, and ours prices them
    refused = by_mode[("prefill", "piecewise", False)]
    assert len(refused) == 6
    assert all(r.predictions[OURS].seconds == r.step.seconds for r in refused)
    assert {r.predictions[CONSUMER].category for r in refused} == {
        "off-grid: no two-sided measured support"}
    assert len(by_mode[("prefill", "eager", True)]) == 16
    assert len(by_mode[("decode", "full", True)]) == 49   # 48 points and one between batches
    (between,) = [r for r in rows if r.step.kind == "decode" and r.step.decode_requests == 7]
    assert "cross_batch_interpolation" in between.predictions[CONSUMER].how
    (mixed,) = [r for r in rows if r.step.kind == "mixed"]
    assert mixed.predictions[CONSUMER].category == "mixed: no composition for a speculative round"
    kinds = figures["models"]["qwen3-0.6b"][CONSUMER]
    assert (kinds["prefill"]["steps"], kinds["prefill"]["priced_steps"]) == (22, 16)
    assert kinds["decode"]["median_abs_error"] == pytest.approx(0.0, abs=1e-12)
    print(json.dumps(kinds["all"], indent=1))


def profile_points_at_run_al() -> list:
    """The legacy production profile's points at the run's acceptance length."""
    from pytest_sdbench.run.profile import read_profile
    artifact = read_profile(H200_LEGACY)
    al = artifact.speculative.synthetic_acceptance_length
    return [p for p in profile_points(artifact)
            if p.phase == "prefill" or p.acceptance_length == al]


def test_aisimulate_predicts_the_workload_end_to_end(legacy_h200_report):
    """`aisimulate predict` on the legacy production profile's export runs the constructed
    workload end to end."""
    missing = [m for m in PREDICT_DEPENDENCIES if importlib.util.find_spec(m) is None]
    assert not missing, f"`aisimulate predict` needs {missing} in the consumer's environment"
    (run,) = legacy_h200_report.figures["runs"]
    e2e = run["end_to_end"]
    assert "predict_error" not in e2e, e2e.get("predict_error")
    predicted, measured = e2e["predicted"], e2e["measured"]
    assert predicted["requests"] == measured["requests"] == run["requests"]
    for metric in ("ttft", "itl", "e2e"):
        assert predicted[metric]["median_ms"] > 0
    assert set(e2e["relative_error"]) == {"ttft_median", "ttft_p90", "itl_median", "itl_p90",
                                          "e2e_median", "e2e_p90", "output_throughput_tok_s",
                                          "request_throughput_rps"}
    (rate,) = legacy_h200_report.figures["rates"].values()
    assert rate["predicted"]["ttft_median_ms"] == predicted["ttft"]["median_ms"]
    folder = legacy_h200_report.folder / "consumer"
    config = (folder / "run0-predict" / "predict.yaml").read_text()
    assert "nextn: 3" in config
    assert "nextn_accepted: 1.78" in config
    assert "type: trace_timestamps" in config
    print(f"measured {json.dumps(measured)}\npredicted {json.dumps(predicted)}")


def test_a_cpu_profiles_consumer_side_is_absent_and_says_why(tmp_path):
    folder = constructed_run(CPU, tmp_path / "cpu-fidelity")
    done = report(folder, python=sys.executable, plots=False)
    consumer = done.figures["predictors"][CONSUMER]
    assert consumer["status"] == "not run"
    assert "device: 'cpu' (timing source host_perf_counter" in consumer["reason"]
    assert CONSUMER not in done.figures["models"]["tiny"]
    print(consumer["reason"])
