"""`sdbench serve`: `vllm serve` with the profile's settings, driven by `vllm bench serve` at
two Poisson rates, end to end on the real CPU engine (one server start for the file), its
refusals before any server starts, and `sdbench fidelity --served` on what it left."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sdbench.fidelity.served import MANIFEST_FILE
from pytest_sdbench.fidelity.served_compare import (
    ServedRequest,
    predicted_figures,
    served_figures,
    served_requests,
    trace_requests,
)
from pytest_sdbench.fidelity.served_settings import NOT_FLAGS, result_name, serve_flags

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "tests" / "fixtures" / "cpu-agg-v6.json"
H200 = ROOT / "docs" / "evidence" / "h200" / "settled" / "qwen3-8b" / \
    "sdbench-decode-k3-635c0af72d36.json.xz"
RATES = ("4", "16")
PROMPTS, INPUT, OUTPUT = 6, 24, 12
# The tests of the `served` fixture (one server start, two bench runs: about a minute) run
# on one xdist worker (conftest.py), so that the fixture runs once a suite, not once a
# worker (seen: its setup twice, 73 s and 69 s, when the two tests went to both workers).
SERVED_GROUP = "served-run"


def _sdbench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_sdbench.cli", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _said(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if "Triton" not in line]


# ---- refusals: before any server starts ----------------------------------------------------

def _serve_args(out: Path, **given: str) -> list[str]:
    options = {"--num-prompts": "4", "--input-len": "16", "--output-len": "8", **given}
    rates = options.pop("--rate", "4").split()
    args = [str(options.pop("profile", PROFILE))]
    for rate in rates:
        args += ["--rate", rate]
    for name, value in options.items():
        args += [name, value]
    return ["serve", *args, "--out", str(out)]


@pytest.mark.parametrize("given, line", [
    ({"--rate": "0"}, "--rate: requests a second must be a finite number > 0, got 0"),
    ({"--rate": "nan"}, "--rate: requests a second must be a finite number > 0, got nan"),
    ({"--rate": "4 4"}, "--rate: each rate once, got 4, 4"),
    ({"--num-prompts": "0"}, "--num-prompts: must be >= 1, got 0"),
    ({"--input-len": "-3"}, "--input-len: must be >= 1, got -3"),
    ({"--output-len": "0"}, "--output-len: must be >= 1, got 0"),
    ({"--input-len": "4000", "--output-len": "200"},
     "--input-len 4000 and --output-len 200: a request of 4200 tokens exceeds the profile's "
     "max_model_len 4096"),
    ({"--port": "70000"}, "--port: must lie in 1-65535, got 70000"),
    ({"--health-timeout": "0"}, "--health-timeout: must be > 0 seconds, got 0"),
    ({"profile": str(H200)}, "device: the profile was measured on cuda"),
])
def test_bad_options_are_refused_before_a_server_starts(tmp_path, given, line):
    out = tmp_path / "served"
    done = _sdbench(*_serve_args(out, **given), timeout=120)
    assert done.returncode == 2, done.stderr[-1500:]
    said = _said(done)
    assert len(said) == 1, said
    assert said[0].startswith(f"sdbench serve: {line}"), said
    assert not out.exists()


def test_a_port_in_use_and_a_used_folder_are_refused(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        done = _sdbench(*_serve_args(tmp_path / "a", **{"--port": str(port)}), timeout=120)
    assert done.returncode == 2
    assert _said(done) == [f"sdbench serve: --port: {port} is in use on 127.0.0.1"]
    used = tmp_path / "b"
    used.mkdir()
    (used / MANIFEST_FILE).write_text("{}")
    done = _sdbench(*_serve_args(used), timeout=120)
    assert done.returncode == 2
    assert _said(done) == [f"sdbench serve: --out: {used} already holds a served run "
                           f"({MANIFEST_FILE}); give another folder"]
    assert sorted(p.name for p in used.iterdir()) == [MANIFEST_FILE]


def test_engine_arguments_become_vllm_serve_flags():
    flags = serve_flags({"model": "/m", "skip_tokenizer_init": True, "disable_log_stats": False,
                         "enforce_eager": True, "enable_chunked_prefill": False,
                         "max_num_seqs": 16, "load_format": "dummy", "seed": 0,
                         "speculative_config": {"method": "eagle3", "model": "/d",
                                                "num_speculative_tokens": 3},
                         "block_size": None})
    assert set(NOT_FLAGS) >= {"model", "skip_tokenizer_init", "disable_log_stats"}
    assert flags == ["--enforce-eager", "--no-enable-chunked-prefill", "--max-num-seqs", "16",
                     "--load-format", "dummy", "--seed", "0", "--speculative-config",
                     '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}']


# ---- the comparison's definitions (no engine) ----------------------------------------------

def test_the_trace_is_what_the_client_sent_and_the_step_gap_is_defined_alike():
    result = {"start_times": [10.5, 10.0, 11.0, 12.0], "input_lens": [20, 10, 30, 5],
              "output_lens": [7, 4, 1, 9], "ttfts": [0.1, 0.2, 0.3, 0.0],
              "itls": [[0.03, 0.03, 0.03], [0.02, 0.04], [], []],
              "errors": ["", "", "", "timeout"]}
    requests = served_requests(result)
    assert len(requests) == 3            # the failed one is no part of the trace
    from pytest_sdbench.aisimulate.fidelity import mooncake_rows
    rows = mooncake_rows(trace_requests(requests))
    assert [(r["timestamp"], r["input_length"], r["output_length"]) for r in rows] == \
        [(0.0, 10, 4), (500.0, 20, 7), (1000.0, 30, 1)]
    assert len({h for r in rows for h in r["hash_ids"]}) == sum(len(r["hash_ids"])
                                                               for r in rows)
    served = served_figures(requests)
    assert served["ttft_median_ms"] == pytest.approx(200.0)
    # TPOT: (E2E - TTFT) / (output - 1): 0.09 / 6 and 0.06 / 3
    assert served["tpot_median_ms"] == pytest.approx(1e3 * (0.015 + 0.02) / 2)
    assert served["step_gap_median_ms"] == pytest.approx(30.0)   # vLLM's chunk gaps
    assert served["tokens_per_chunk"] == pytest.approx((6 + 3) / 5)
    prediction = {"requests": [
        {"ttft_ms": 100.0, "e2e_latency_ms": 160.0, "output_length": 7, "itl_ms": 0.0},
        {"ttft_ms": 300.0, "e2e_latency_ms": 330.0, "output_length": 4, "itl_ms": 0.0}]}
    predicted = predicted_figures(prediction, tokens_per_step=2.5)
    assert predicted["tpot_median_ms"] == pytest.approx(10.0)
    assert predicted["step_gap_median_ms"] == pytest.approx(25.0)   # TPOT x AL
    assert predicted["consumer_itl_ms_median"] == 0.0              # its own, not compared
    assert ServedRequest(0.0, 1, 1, 0.1, ()).tpot is None


def test_served_decode_gaps_leave_out_prefills_and_count_the_batch_and_its_kv():
    """Client timings only: a gap is decode-only when no request was in its prefill window,
    its batch is every request between its first and last chunk at the gap's midpoint, and
    each of those read its prompt and its tokens delivered so far."""
    from pytest_sdbench.fidelity.served_steps import decode_gaps
    # A: sent at 0, chunks at 1, 2, ..., 6 (15 tokens after the first: 3 a chunk).
    # B: sent at 3.5 (its prefill until its first chunk at 4.5), chunks at 5.5 and 6.5.
    a = ServedRequest(0.0, 100, 16, 1.0, (1.0,) * 5)
    b = ServedRequest(3.5, 50, 5, 1.0, (1.0, 1.0))
    gaps, mixed = decode_gaps([a, b])
    assert mixed == 2                      # A's gaps (3, 4] and (4, 5] hold B's prefill
    assert len(gaps) + mixed == len(a.itls) + len(b.itls)
    assert all(g.seconds == 1.0 for g in gaps)
    # A at 1.5 and 2.5 alone: 100 + 1 + (chunks delivered - 1) x 3; A at 5.5 with B (53);
    # B at 5.0 with A (113 + 51); B at 6.0 alone (A's last chunk came at 6)
    assert sorted((g.batch, g.kv_tokens) for g in gaps) == \
        [(1, 53), (1, 101), (1, 104), (2, 164), (2, 166)]


def test_a_mixed_gap_is_the_step_that_ended_a_prefill_read_at_the_lag_the_run_shows():
    """B's prefill (its window 2.5 to 7) overlaps three of A's gaps; the longest sits one
    chunk before B's first chunk (which came with A's at 7: vLLM hands a step's output on
    while the next step runs), so the lag is 1 and that gap is the mixed step, of A decoding
    and B's prompt; the other two are left out (B waiting). Every overlapped gap is one or
    the other."""
    from pytest_sdbench.fidelity.served_steps import decode_gaps, mixed_gaps
    a = ServedRequest(0.0, 100, 7, 1.0, (1.0, 1.0, 3.0, 1.0, 1.0, 1.0))   # chunks 1,2,3,6..9
    b = ServedRequest(2.5, 40, 3, 4.5, (1.0, 1.0))                        # chunks 7, 8, 9
    gaps, waiting, lag = mixed_gaps([a, b])
    assert lag == {"lag_chunks": 1, "median_gap_ms_by_lag": {0: 1e3, 1: 3e3, 2: 1e3}}
    assert [(g.seconds, g.decoding, g.prompts) for g in gaps] == [(3.0, 1, (40,))]
    assert waiting == 2
    assert len(gaps) + waiting == decode_gaps([a, b])[1]
    # B's TTFT (4.5) in parts: sent at 2.5, its prefill step (3, 6], its first chunk at 7
    from pytest_sdbench.fidelity.served_steps import ttft_parts
    assert ttft_parts([a, b]) == {"requests": 1, "unread": 1, "lag_chunks": 1,
                                  "ttft_ms": 4.5e3, "before_step_ms": 0.5e3,
                                  "prefill_step_ms": 3e3, "after_step_ms": 1e3}


def test_a_mixed_step_is_priced_as_one_prefill_of_all_its_requests_and_tokens():
    """predict.RULE's mixed rule from totals: 1 decoding request (1 + K = 4 tokens) beside a
    1024-token prompt is a prefill step of 2 requests and 1028 tokens, linear in B between
    the measured batches 1 and 4; the mode is that of the prefill points at that many tokens."""
    from pytest_sdbench.fidelity.predict import Interpolator
    from pytest_sdbench.fidelity.predict_phases import MeasuredPoint
    points = [MeasuredPoint("prefill", i, mode, b, t, 0, s) for i, (mode, b, t, s) in
              enumerate([("piecewise", 1, 256, 0.010), ("eager", 1, 1024, 0.020),
                         ("eager", 1, 4096, 0.080), ("eager", 4, 1024, 0.030),
                         ("eager", 4, 4096, 0.110)])]
    rule = Interpolator(points, draft_depth=3, acceptance_length=None)
    assert [rule.prefill_mode(t) for t in (100, 256, 257, 1028, 9999)] == \
        ["piecewise", "piecewise", "eager", "eager", "eager"]
    at_1 = 0.020 + (0.080 - 0.020) * 4 / 3072
    at_4 = 0.030 + (0.110 - 0.030) * 4 / 3072
    priced = rule.price_mixed(1, 1, 1024, "eager")
    assert priced.seconds == pytest.approx(at_1 + (at_4 - at_1) / 3)
    assert priced.how == "between batches 1 and 4"
    assert rule.price_mixed(4, 1, 1024, "eager").category == "off-grid: batch"
    # a profile with no mixed rows: the rule, labelled so (mixed rows: test_fidelity_mixed.py)
    assert priced.basis == "rule: no mixed rows"


# ---- the bench client: vLLM's `vllm bench serve`, one process for every run ---------------

def test_the_bench_client_runs_vllms_own_parser_a_run_a_log_and_outlives_a_bad_run(tmp_path):
    """A run's flags are parsed by vLLM's own `vllm bench serve` parser in the client process:
    unknown flags exit 2 with vLLM's usage in that run's log; the client then answers the next
    run (`--help`: vLLM's flags, exit 0) and ends cleanly when its stdin closes."""
    from pytest_sdbench.fidelity.bench_client import BenchClient
    from pytest_sdbench.fidelity.served_settings import child_env
    client = BenchClient(tmp_path / "bench-client.log", child_env())
    try:
        assert client.run(["--no-such-flag"], tmp_path / "bad.log") == 2
        assert "--no-such-flag" in (tmp_path / "bad.log").read_text()
        assert client.run(["--help"], tmp_path / "help.log") == 0
        usage = (tmp_path / "help.log").read_text()
        assert "--request-rate" in usage
        assert "--max-concurrency" in usage
    finally:
        assert client.close() == 0


def test_a_bench_client_that_is_gone_fails_the_run_and_says_so(tmp_path):
    from pytest_sdbench.fidelity.bench_client import BenchClient
    client = BenchClient(tmp_path / "bench-client.log", dict(os.environ), python="false")
    assert client.run(["--help"], tmp_path / "run.log") == 1
    assert "the bench client exited (1)" in (tmp_path / "run.log").read_text()
    assert client.gone().startswith("the bench client exited (1)")   # served.py refuses it
    assert client.close() == 1


# ---- end to end on the CPU engine ----------------------------------------------------------

@pytest.fixture(scope="module")
def served(tmp_path_factory):
    out = tmp_path_factory.mktemp("served") / "tiny"
    args = ["serve", str(PROFILE), "--num-prompts", str(PROMPTS), "--input-len", str(INPUT),
            "--output-len", str(OUTPUT), "--seed", "3", "--out", str(out)]
    for rate in RATES:
        args += ["--rate", rate]
    done = _sdbench(*args)
    return out, done


@pytest.mark.sdbench_engine
@pytest.mark.xdist_group(SERVED_GROUP)
def test_sdbench_serve_leaves_vllms_own_results_and_a_manifest(served):
    out, done = served
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert manifest["status"] == "done"
    command = manifest["server"]["command"]
    assert command[command.index("serve") + 1].endswith("/target")
    for flag in ("--load-format", "--speculative-config", "--max-num-seqs", "--max-model-len",
                 "--enable-chunked-prefill", "--enforce-eager", "--seed"):
        assert flag in command, flag
    assert "--skip-tokenizer-init" not in command
    spec = json.loads(command[command.index("--speculative-config") + 1])
    assert spec["method"] == "eagle3"
    assert spec["num_speculative_tokens"] == 3
    assert manifest["settings"]["pinned_from_profile"]["max_num_seqs"] == 16
    assert manifest["server"]["healthy_after_seconds"] > 0
    # the server and its engine core are gone
    assert manifest["server"]["exit_status"] == 0     # stopped cleanly by SIGTERM
    assert manifest["server"]["processes_left"] is False
    with pytest.raises(ProcessLookupError):
        os.killpg(manifest["server"]["pid"], 0)
    # every run went through one client process, which ended cleanly
    assert manifest["client"]["module"] == "pytest_sdbench.fidelity.bench_client"
    assert manifest["client"]["exit_status"] == 0
    assert manifest["client"]["env_left_out"] == []
    assert (out / manifest["client"]["log"]).is_file()
    assert [r["rate"] for r in manifest["runs"]] == [float(r) for r in RATES]
    # a seed of its own a rate (3, 4, ...): no rate's prompts cached by an earlier one
    assert [r["seed"] for r in manifest["runs"]] == [3 + i for i in range(len(RATES))]
    for run in manifest["runs"]:
        assert run["command"][run["command"].index("--seed") + 1] == str(run["seed"])
        assert run["returncode"] == 0
        assert "Benchmark duration" in (out / run["log"]).read_text()   # vLLM's own summary
        bench = run["command"]
        assert bench[bench.index("bench"):bench.index("bench") + 2] == ["bench", "serve"]
        assert bench[bench.index("--dataset-name") + 1] == "random"
        result = json.loads((out / result_name(run["rate"])).read_text())
        assert result["completed"] == PROMPTS
        assert result["failed"] == 0
        assert result["input_lens"] == [INPUT] * PROMPTS     # one token a word, no special
        assert result["output_lens"] == [OUTPUT] * PROMPTS   # EOS ignored
        assert len(result["start_times"]) == len(result["itls"]) == PROMPTS
        assert result["request_rate"] == float(run["rate"])
        assert all(t > 0 for t in result["ttfts"])
    assert manifest["versions"]["python"]


@pytest.mark.sdbench_engine
@pytest.mark.xdist_group(SERVED_GROUP)
def test_fidelity_compares_the_served_runs_and_says_the_consumer_is_absent(served, tmp_path):
    out, done = served
    assert done.returncode == 0, done.stderr[-3000:]
    report_dir = tmp_path / "report"
    env_free = {k: v for k, v in os.environ.items() if k != "SDBENCH_CONSUMER_PYTHON"}
    compared = subprocess.run([sys.executable, "-m", "pytest_sdbench.cli", "fidelity",
                               str(PROFILE), "--served", str(out), "--out", str(report_dir),
                               "--no-plots"], capture_output=True, text=True, timeout=300,
                              cwd=ROOT, env=env_free)
    assert compared.returncode == 0, compared.stderr[-2000:]
    report = json.loads((report_dir / "served-fidelity.json").read_text())
    assert report["consumer"]["status"] == "not run"
    assert "no consumer environment was given" in report["consumer"]["reason"]
    assert [e["rate"] for e in report["rates"]] == [float(r) for r in RATES]
    for entry in report["rates"]:
        s = entry["served"]
        assert s["requests"] == PROMPTS
        assert s["ttft_median_ms"] > 0
        assert s["tpot_median_ms"] > 0
        assert s["step_gap_median_ms"] > 0
        assert math.isfinite(s["e2e_median_ms"])
        assert "predicted" not in entry
        steps = entry["profile_steps"]     # every served gap accounted for, once
        priced = sum(row["gaps"] for row in steps["by_batch"].values())
        result = json.loads((out / result_name(entry["rate"])).read_text())
        assert steps["gaps"] == sum(len(itls) for itls in result["itls"])
        assert priced + steps["mixed_left_out"] + sum(steps["unpriced"].values()) == \
            steps["gaps"]
        mixed = steps["mixed"]   # the mixed ones: a prefill ended in them, or none did
        assert mixed["gaps"] + mixed["waiting_left_out"] == steps["mixed_left_out"]
        assert sum(row["gaps"] for row in mixed["by_batch"].values()) + \
            sum(mixed["unpriced"].values()) == mixed["gaps"]
        # the profile (v6) has no mixed rows: every priced mixed gap by the rule, said so
        assert mixed["basis"] == "rule: no mixed rows"
        assert (mixed["priced_from_rows"], mixed["priced_by_rule"]) == (
            0, sum(row["gaps"] for row in mixed["by_batch"].values()))
        assert mixed["prefill_lag"]["lag_chunks"] in (0, 1, 2)
        parts = steps["ttft_parts"]
        assert parts["requests"] + parts["unread"] == PROMPTS
    md = (report_dir / "served-fidelity.md").read_text()
    assert "AISimulate's predictions are absent" in md
    assert "TTFT median" in md
    assert "step gap" in md
    assert "none from mixed rows (the profile has none)" in md
    assert [line for line in _said(compared) if "AISimulate not run" in line]


def test_the_server_is_stopped_with_its_whole_process_group(tmp_path):
    """No process of the server outlives the command: its group gets SIGTERM, then SIGKILL
    (here a child that ignores SIGTERM), and the stop waits until the group is gone."""
    from pytest_sdbench.fidelity.served import Server, ServingFailed, group_gone
    from pytest_sdbench.fidelity.served_settings import free_port
    stubborn = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('child up', flush=True); time.sleep(120)")
    parent = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
              f"{stubborn!r}]); time.sleep(120)")
    server = Server([sys.executable, "-c", parent], tmp_path / "server.log", dict(os.environ))
    with pytest.raises(ServingFailed, match=r"was not healthy at .* within 1 s"):
        server.wait_healthy(f"http://127.0.0.1:{free_port()}/health", timeout=1)
    server.stop(grace=1)
    assert server.group_left is False
    assert group_gone(server.process.pid, timeout=0)
    assert "child up" in (tmp_path / "server.log").read_text()


class _FlatPrices:
    """A profile's prices, flat: a decode step 1.0 at batch 2 and 1.2 at batch 3, a mixed
    step 3.0 (served_windows asks nothing else of the interpolator)."""
    draft_depth = 3

    def mixed_mode(self, tokens):
        return "eager"

    def price_mixed(self, batch, prompts, tokens, mode, decode_kv_tokens=0):
        from pytest_sdbench.fidelity.predict_phases import Priced
        return Priced(3.0)

    def price_decode(self, batch, kv_tokens, mode):
        from pytest_sdbench.fidelity.predict_phases import Priced
        return Priced({2: 1.0, 3: 1.2}.get(batch))


def _released_late(extra: tuple = ()) -> list:
    """A and B decode from 1 s on, a step a second on the device (steps ending at 2 to 5);
    Q, sent at 4.5, is prefilled in a 3 s step from 5 to 8. As vLLM hands a step's output on
    after launching the next (a prefill's launch about as long as the step), the chunks of
    the step that ended at 5 come at 7.5, and the prefill's 0.5 s after them (at 8, Q's first
    chunk); then A, B and Q decode at 1.2 s a step."""
    decoding = ServedRequest(0.0, 100, 20, 1.0, (1.0, 1.0, 1.0, 3.5, 0.5, 1.2, 1.2, 1.2))
    return [decoding, decoding, ServedRequest(4.5, 64, 4, 3.5, (1.2, 1.2, 1.2)), *extra]


def test_a_window_of_steps_holds_the_time_a_late_hand_off_moves_between_gaps():
    """The long gap closes one chunk before Q's first (lag 1) and is 3.5 s against the
    mixed step's 3.0; the window of four gaps (1, 3.5, 0.5 and 1.2 s, from chunk 2 on) is
    the steps' 1 + 3 + 1 + 1.2 exactly: its error is 0, the gap alone's -1/7."""
    from pytest_sdbench.fidelity.served_windows import WINDOW_GAPS, mixed_windows
    found, left_out = mixed_windows(_FlatPrices(), "full", _released_late())
    assert WINDOW_GAPS == 4
    assert left_out == {}
    assert [(w.seconds, w.price, w.mixed_seconds, w.mixed_price) for w in found] == \
        [(pytest.approx(6.2), pytest.approx(6.2), pytest.approx(3.5), 3.0)]


def test_a_window_at_lag_0_prices_the_gap_that_closed_on_the_prompts_first_chunk():
    """The emulated server's order: the prefill's 3 s gap closes on Q's first chunk (lag 0);
    the window (1, 1, 3 and 1.2 s) and the gap alone are both priced exactly."""
    from pytest_sdbench.fidelity.served_steps import mixed_gaps
    from pytest_sdbench.fidelity.served_windows import mixed_windows
    decoding = ServedRequest(0.0, 100, 20, 1.0, (1.0, 1.0, 1.0, 1.0, 3.0, 1.2, 1.2, 1.2))
    served = [decoding, decoding, ServedRequest(4.5, 64, 4, 3.5, (1.2, 1.2, 1.2))]
    assert mixed_gaps(served)[2]["lag_chunks"] == 0
    found, left_out = mixed_windows(_FlatPrices(), "full", served)
    assert left_out == {}
    assert [(w.seconds, w.price, w.mixed_seconds, w.mixed_price) for w in found] == \
        [(pytest.approx(6.2), pytest.approx(6.2), pytest.approx(3.0), 3.0)]


def test_a_window_another_prefill_overlaps_is_left_out_and_counted():
    """R, sent at 8.5 and first served at 9, overlaps Q's window and Q's prefill overlaps
    R's: both are left out, named, and nothing is priced."""
    from pytest_sdbench.fidelity.served_windows import mixed_windows
    late = ServedRequest(8.5, 64, 2, 0.5, (1.2,))
    found, left_out = mixed_windows(_FlatPrices(), "full", _released_late((late,)))
    assert found == []
    assert left_out == {"another prefill overlaps it": 2}


def test_the_report_gives_each_rates_windows_and_says_why_a_rate_has_none():
    from pytest_sdbench.fidelity.served_compare import _window_lines
    figure = {"median_abs_error": 0.028, "bias": 0.006}
    priced = {"windows": 22, "left_out": {"another prefill overlaps it": 169},
              "overall": figure, "mixed_gap_alone": {"median_abs_error": 0.239, "bias": 0.02}}
    none = {"windows": 0, "left_out": {"another prefill overlaps it": 3}, "overall": None,
            "mixed_gap_alone": None}
    lines = _window_lines([{"rate": 16.0, "profile_steps": {"mixed_windows": priced}},
                           {"rate": 32.0, "profile_steps": {"mixed_windows": none}},
                           {"rate": 4.0, "profile_steps": {}}])
    assert lines[3:] == [
        "- rate 16: 22 windows (left out: 169 another prefill overlaps it): median abs(e) "
        "2.8%, bias +0.6%; their mixed gap alone 23.9%, bias +2.0%",
        "- rate 32: 0 windows (left out: 3 another prefill overlaps it)"]
    assert _window_lines([{"rate": 4.0, "profile_steps": {}}]) == []
