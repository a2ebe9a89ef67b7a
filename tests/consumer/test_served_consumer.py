"""The consumer's side of `sdbench fidelity PROFILE --served DIR`, run by AISimulate's own code
in its own environment (scripts/consumer-test.sh): a served folder as `sdbench serve` leaves
it (its manifest and a `vllm bench serve --save-detailed` result, constructed here) on the
committed H200 production profile (legacy: schema v4, decode at the first decode step,
`steady_step`; docs/reference.md), the trace the run had predicted by `aisimulate predict`,
and the report served beside predicted; and the H200 serving runs of issue 33 on a schema 6
profile, re-read. A CPU profile's export is refused (host timing), so the H200 profile stands
in for a GPU run."""

from __future__ import annotations

import json
import lzma
import random
import sys

import pytest

from pytest_sdbench.fidelity.served import MANIFEST_FILE, MANIFEST_KIND, MANIFEST_VERSION
from pytest_sdbench.fidelity.served_compare import METRICS, compare, markdown
from pytest_sdbench.run.profile import read_profile

from ..forge import BASES, ROOT

# the legacy production profile (schema v4, steady_step): the mapping, not its figures
H200_LEGACY = BASES["h200-production-v4"]


def served_folder(folder, rate: float = 2.0, requests: int = 8):
    """A served folder: the manifest and one detailed result whose requests arrive at
    `rate` (Poisson, seeded) with prompts within the profile's measured prefills."""
    rng = random.Random(5)
    start, starts = 100.0, []
    for _ in range(requests):
        start += rng.expovariate(rate)
        starts.append(start)
    output = 16
    result = {"completed": requests, "failed": 0, "request_rate": rate,
              "start_times": starts,
              "input_lens": [rng.randint(1100, 3000) for _ in starts],
              "output_lens": [output] * requests,
              "ttfts": [0.05 + 0.01 * i for i in range(requests)],
              "itls": [[0.012] * 5 + [0.004] for _ in starts],
              "errors": [""] * requests, "spec_decode_acceptance_length": 2.78}
    folder.mkdir(parents=True)
    name = f"served-rate-{rate:g}.json"
    (folder / name).write_text(json.dumps(result))
    (folder / MANIFEST_FILE).write_text(json.dumps({
        "kind": MANIFEST_KIND, "version": MANIFEST_VERSION, "status": "done",
        "runs": [{"rate": rate, "result": name, "returncode": 0}]}))
    return folder


@pytest.fixture(scope="module")
def legacy_report(tmp_path_factory):
    """A constructed served folder compared with the legacy production profile."""
    root = tmp_path_factory.mktemp("served")
    served = served_folder(root / "served")
    return compare(H200_LEGACY, read_profile(H200_LEGACY), served, root / "report",
                   sys.executable, say=print)


def test_aisimulate_predicts_the_trace_the_served_run_had(legacy_report):
    """On the legacy production profile: `aisimulate predict` runs the served trace."""
    assert legacy_report["consumer"]["status"] == "run", legacy_report["consumer"]
    (entry,) = legacy_report["rates"]
    assert "predict_error" not in entry, entry.get("predict_error")
    predicted, served = entry["predicted"], entry["served"]
    assert predicted["requests"] == served["requests"] == 8
    for key, _ in METRICS:
        assert predicted[key] > 0, key
        assert entry["relative_error"][key] == pytest.approx(predicted[key] / served[key] - 1)
    # the step gap: the predicted TPOT x the profile's AL
    assert predicted["step_gap_median_ms"] == pytest.approx(
        predicted["tpot_median_ms"] * entry["acceptance_length"])
    assert "predicted/served - 1" in markdown(legacy_report)


# ---- the H200 serving runs of issue 33, re-read: the published verdict is pinned -----------
# docs/evidence/h200/served-aisimulate: vllm serve + vllm bench serve on qwen3-8b at 4 and 16
# requests/s, and the profile (the consumer's own grid) they are priced by. Real engine data,
# so the consumer's prediction of the real traces is what this checks; the figures the
# evidence README publishes (served-fidelity.json) must come out again, not be re-derived.
SERVED_H200 = ROOT / "docs/evidence/h200/served-aisimulate"
SERVED_PROFILE = SERVED_H200 / "sdbench-agg-k3-893a0f15199c.json.xz"


@pytest.fixture(scope="module")
def h200_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("h200-served")
    served = root / "served"
    served.mkdir()
    (served / MANIFEST_FILE).write_bytes((SERVED_H200 / MANIFEST_FILE).read_bytes())
    for rate in (4, 16):
        name = f"served-rate-{rate}.json"
        (served / name).write_bytes(lzma.decompress((SERVED_H200 / f"{name}.xz").read_bytes()))
    return compare(SERVED_PROFILE, read_profile(SERVED_PROFILE), served, root / "report",
                   sys.executable, say=print)


def test_the_h200_served_runs_read_as_published(h200_report):
    published = json.loads((SERVED_H200 / "served-fidelity.json").read_text())
    assert h200_report["consumer"]["status"] == "run", h200_report["consumer"]
    assert [e["rate"] for e in h200_report["rates"]] == [4.0, 16.0]
    for entry, pinned in zip(h200_report["rates"], published["rates"], strict=True):
        assert "predict_error" not in entry, entry.get("predict_error")
        for key, _ in METRICS:
            assert entry["served"][key] == pytest.approx(pinned["served"][key], rel=1e-9), key
            assert entry["predicted"][key] == pytest.approx(pinned["predicted"][key],
                                                            rel=1e-6), key
    # the verdicts docs/evidence/h200/served-aisimulate/README.md states, pinned here as
    # numbers (a change of figure changes both)
    errors = {e["rate"]: e["relative_error"] for e in h200_report["rates"]}
    assert round(100 * errors[4.0]["tpot_median_ms"], 1) == 3.3
    assert round(100 * errors[4.0]["ttft_median_ms"], 1) == -28.1
    assert round(100 * errors[16.0]["tpot_median_ms"], 1) == 19.0
    assert round(100 * errors[16.0]["ttft_median_ms"], 1) == -20.8


def test_aisimulate_is_run_beside_an_emulation_on_the_same_runs(h200_report, tmp_path):
    """`sdbench fidelity PROFILE --served REAL --emulated EMU`: AISimulate predicts each real
    run (here the H200 served runs, their own copy standing in for the emulated folder) and
    its error is the served report's for the same run: one consumer, one set of terms."""
    from pytest_sdbench.fidelity.emulated_compare import (
        compare_emulated,
        consumer_beside,
    )
    from pytest_sdbench.fidelity.emulated_compare import markdown as emulated_markdown
    real = tmp_path / "real"
    real.mkdir()
    manifest = json.loads((SERVED_H200 / MANIFEST_FILE).read_text())
    (real / MANIFEST_FILE).write_text(json.dumps(manifest))
    for rate in (4, 16):
        name = f"served-rate-{rate}.json"
        (real / name).write_bytes(lzma.decompress((SERVED_H200 / f"{name}.xz").read_bytes()))
    report = compare_emulated(real, real)
    consumer_beside(report, SERVED_PROFILE, read_profile(SERVED_PROFILE), sys.executable,
                    tmp_path / "out", say=print)
    assert report["consumer"]["status"] == "run", report["consumer"]
    served = {e["rate"]: e["relative_error"] for e in h200_report["rates"]}
    for run in report["runs"]:
        assert run["figures"]["TPOT"]["error"] == 0.0            # the same folder
        mine = run["consumer"]
        assert mine["TPOT"]["error"] == pytest.approx(served[run["rate"]]["tpot_median_ms"])
        assert mine["TTFT"]["error"] == pytest.approx(served[run["rate"]]["ttft_median_ms"])
    text = emulated_markdown(report)
    assert "AISimulate beside it" in text
    assert f"{100 * served[16.0]['tpot_median_ms']:+.1f}%" in text
