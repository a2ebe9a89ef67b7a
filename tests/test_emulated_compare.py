"""`sdbench fidelity --served REAL --emulated EMU`: the comparison of two served folders
(pure logic over the files `sdbench serve` and `sdbench emulate` write; the servers' own
runs are tests/test_served.py's and tests/test_emulate.py's)."""

import json
from pathlib import Path

from pytest_sdbench.cli import main
from pytest_sdbench.fidelity.emulated_compare import compare_emulated
from pytest_sdbench.fidelity.served import MANIFEST_FILE, MANIFEST_KIND


def _folder(root, name, runs):
    """A served folder: a manifest of `runs` (label, pass, ttft, tpot, engine metrics) and
    vLLM's result file of each."""
    folder = root / name
    folder.mkdir()
    entries = []
    for label, index, ttft, tpot, engine_ttft in runs:
        result = f"served-{label}-p{index}.json"
        (folder / result).write_text(json.dumps({
            "median_ttft_ms": ttft, "mean_ttft_ms": ttft + 1, "median_tpot_ms": tpot,
            "median_itl_ms": 2.5 * tpot, "median_e2el_ms": ttft + 100 * tpot}))
        entries.append({"label": label, "pass": index, "rate": None, "concurrency": 4,
                        "result": result, "returncode": 0,
                        "engine_metrics_ms": {"time_to_first_token": engine_ttft,
                                              "request_queue_time": 0.5,
                                              "request_prefill_time": engine_ttft - 0.5}})
    (folder / MANIFEST_FILE).write_text(json.dumps({"kind": MANIFEST_KIND, "runs": entries}))
    return folder


def test_each_run_is_compared_with_the_real_servers_and_its_noise(tmp_path):
    real = _folder(tmp_path, "real", [("c4-128x128", 0, 10.0, 1.0, 8.0),
                                      ("c4-128x128", 1, 10.5, 1.02, 8.2),
                                      ("c16-128x128", 0, 20.0, 2.0, 15.0)])
    emu = _folder(tmp_path, "emu", [("c4-128x128", 0, 11.0, 0.9, 8.5),
                                    ("c16-128x128", 0, 30.0, 2.0, 25.0)])
    report = compare_emulated(real, emu)
    first, second = report["runs"]
    assert first["figures"]["TTFT"]["error"] == 11.0 / 10.0 - 1
    assert first["figures"]["TTFT"]["noise"] == 10.5 / 10.0 - 1
    assert first["figures"]["TPOT"]["error"] == 0.9 / 1.0 - 1
    assert second["figures"]["TTFT"]["noise"] is None   # no second pass of that run
    assert first["ttft_parts"]["real"]["frontend"] == 11.0 - 8.0   # client mean - engine
    summary = report["summary"]
    assert summary["TTFT"]["max_abs_error"] == 30.0 / 20.0 - 1
    assert summary["goal"] == {"TTFT": False, "TPOT": True}   # 50% > 25%; 10% and 0%


def test_the_command_writes_the_report_and_refuses_folders_with_nothing_in_common(tmp_path,
                                                                                  capsys):
    real = _folder(tmp_path, "real", [("rate-4", 0, 10.0, 1.0, 8.0)])
    emu = _folder(tmp_path, "emu", [("rate-4", 0, 10.0, 1.0, 8.0)])
    other = _folder(tmp_path, "other", [("rate-16", 0, 10.0, 1.0, 8.0)])
    out = tmp_path / "out"
    assert main(["fidelity", "--served", str(real), "--emulated", str(emu), "--out", str(out),
                 "--no-plots"]) == 0
    assert "| rate-4 | 10.00 | 10.00 | +0.0% |" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["emulation.json", "emulation.md"]
    assert main(["fidelity", "--served", str(real), "--emulated", str(other), "--no-plots"]) == 2
    assert "served no run in common" in capsys.readouterr().err


def test_without_a_consumer_environment_aisimulate_is_said_not_run(tmp_path, capsys,
                                                                     monkeypatch):
    """With PROFILE and no consumer environment: the comparison stands, and the report says
    AISimulate was not run and why (the consumer's own run: tests/consumer)."""
    monkeypatch.delenv("SDBENCH_CONSUMER_PYTHON", raising=False)
    real = _folder(tmp_path, "real", [("rate-4", 0, 10.0, 1.0, 8.0)])
    emu = _folder(tmp_path, "emu", [("rate-4", 0, 11.0, 1.0, 8.0)])
    profile = str(Path(__file__).resolve().parents[1] / "docs/evidence/h100/serving-under-load"
                  / "sdbench-agg-k3-292b5bf1ed5f.json.xz")
    out = tmp_path / "out"
    assert main(["fidelity", profile, "--served", str(real), "--emulated", str(emu),
                 "--out", str(out), "--no-plots"]) == 0
    captured = capsys.readouterr()
    assert "AISimulate beside it: not run (no consumer environment was given" in captured.out
    report = json.loads((out / "emulation.json").read_text())
    assert report["consumer"]["status"] == "not run"
    assert report["runs"][0]["figures"]["TTFT"]["error"] == 11.0 / 10.0 - 1


def test_a_profile_it_cannot_read_is_refused_in_one_line(tmp_path, capsys):
    real = _folder(tmp_path, "real", [("rate-4", 0, 10.0, 1.0, 8.0)])
    emu = _folder(tmp_path, "emu", [("rate-4", 0, 11.0, 1.0, 8.0)])
    missing = tmp_path / "no-such-profile.json"
    assert main(["fidelity", str(missing), "--served", str(real), "--emulated", str(emu),
                 "--out", str(tmp_path / "out"), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "no-such-profile.json" in err[0]
    assert not (tmp_path / "out" / "emulation.json").exists()
