"""The consumer's side of `sdbench fidelity PROFILE --served DIR`, run by AISimulate's own code
in its own environment (scripts/consumer-test.sh): a served folder as `sdbench serve` leaves
it (its manifest and a `vllm bench serve --save-detailed` result, constructed here) on the
committed H200 production profile, the trace the run had predicted by `aisimulate predict`,
and the report served beside predicted. A CPU profile's export is refused (host timing), so
the H200 profile stands in for a GPU run."""

from __future__ import annotations

import json
import random
import sys

import pytest

from pytest_sdbench.fidelity.match import read_profile
from pytest_sdbench.fidelity.served import MANIFEST_FILE, MANIFEST_KIND, MANIFEST_VERSION
from pytest_sdbench.fidelity.served_compare import METRICS, compare, markdown

from ..forge import BASES

H200 = BASES["h200-production-v4"]


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
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    served = served_folder(root / "served")
    return compare(H200, read_profile(H200), served, root / "report", sys.executable,
                   say=print)


def test_aisimulate_predicts_the_trace_the_served_run_had(report):
    assert report["consumer"]["status"] == "run", report["consumer"]
    (entry,) = report["rates"]
    assert "predict_error" not in entry, entry.get("predict_error")
    predicted, served = entry["predicted"], entry["served"]
    assert predicted["requests"] == served["requests"] == 8
    for key, _ in METRICS:
        assert predicted[key] > 0, key
        assert entry["relative_error"][key] == pytest.approx(predicted[key] / served[key] - 1)
    # the step gap: the predicted TPOT x the profile's AL
    assert predicted["step_gap_median_ms"] == pytest.approx(
        predicted["tpot_median_ms"] * entry["acceptance_length"])
    assert "predicted/served - 1" in markdown(report)
