"""`sdbench fidelity PROFILE --served REAL --emulated EMU`: the same traffic served by real
`vllm serve` (REAL: `sdbench serve`'s folder, best with --passes 2) and by the emulated
engine (EMU: `sdbench emulate`'s folder), side by side per run: TTFT, TPOT, step gap (ITL)
and E2E medians as vLLM's own client measured them, the emulation's error against the
real server, and the real server's own noise (its second pass against its first) beside
it. Each TTFT is split into its parts by vLLM's own request metrics (the engine's mean
queue time, prefill time and TTFT; the rest of the client's mean TTFT is the API server's).

Beside it, where a consumer environment is given, AISimulate's prediction of each run
(`aisimulate predict` on the profile's export: a rate's run as its requests arrived at the
real server, a closed loop at its concurrency), its error against the real server in the
terms served_compare uses for both sides (figures from the requests themselves).

Reads only the two folders (and, for the consumer, the profile): no engine, no server."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable
from pathlib import Path

from ..wire.files import atomic_write_text
from ..wire.model import Artifact
from .served import read_manifest
from .served_settings import ServedUnusable

REPORT_MD, REPORT_JSON, REPORT_PNG = "emulation.md", "emulation.json", "emulation.png"
# (name, vLLM result key) of the figures compared, each a median over the run's requests
FIGURES = (("TTFT", "median_ttft_ms"), ("TPOT", "median_tpot_ms"),
           ("step gap", "median_itl_ms"), ("E2E", "median_e2el_ms"))
# The goal the emulation is held to (issue 54): median |error| and the worst run's, TTFT
# and TPOT.
GOAL_MEDIAN, GOAL_EVERY = 0.10, 0.25
GOAL_FIGURES = ("TTFT", "TPOT")


def _runs(folder: Path) -> dict[tuple[str, int], tuple[dict, dict]]:
    """(label, pass) -> (the manifest's run entry, vLLM's result) of every finished run."""
    manifest = read_manifest(folder)
    found = {}
    for run in manifest["runs"]:
        path = folder / run["result"]
        if run.get("returncode") == 0 and path.is_file():
            found[(run.get("label") or f"rate-{run['rate']:g}", int(run.get("pass", 0)))] = \
                (run, json.loads(path.read_text()))
    if not found:
        raise ServedUnusable(f"{folder} holds no finished `vllm bench serve` result")
    return found


def _ttft_parts(run: dict, result: dict) -> dict[str, float | None]:
    """The client's mean TTFT, and its parts by the engine's own clock (means, ms)."""
    engine = run.get("engine_metrics_ms") or {}
    client = result.get("mean_ttft_ms")
    in_engine = engine.get("time_to_first_token")
    return {"client": client, "engine": in_engine,
            "queued": engine.get("request_queue_time"),
            "prefill": engine.get("request_prefill_time"),
            "frontend": None if client is None or in_engine is None else client - in_engine}


def _error(got: float | None, want: float | None) -> float | None:
    return None if got is None or not want else got / want - 1.0


def compare_emulated(real: Path, emulated: Path) -> dict:
    """Every run the emulation served that the real server served too, in the real
    server's order; the errors against its first pass, its noise against its second."""
    real_runs, emu_runs = _runs(real), _runs(emulated)
    rows = []
    for (label, pass_index), (run, result) in real_runs.items():
        if pass_index != 0 or (label, 0) not in emu_runs:
            continue
        emu_run, emu_result = emu_runs[(label, 0)]
        again = real_runs.get((label, 1))
        row: dict = {"label": label, "rate": run.get("rate"),
                     "concurrency": run.get("concurrency"), "input_len": run.get("input_len"),
                     "output_len": run.get("output_len"), "figures": {}}
        for name, key in FIGURES:
            got, want = emu_result.get(key), result.get(key)
            row["figures"][name] = {
                "real": want, "emulated": got, "error": _error(got, want),
                "real_again": None if again is None else again[1].get(key),
                "noise": None if again is None else _error(again[1].get(key), want)}
        row["ttft_parts"] = {"real": _ttft_parts(run, result),
                             "emulated": _ttft_parts(emu_run, emu_result)}
        rows.append(row)
    if not rows:
        raise ServedUnusable(f"{emulated} and {real} served no run in common (their labels: "
                             f"{sorted({k[0] for k in emu_runs})} and "
                             f"{sorted({k[0] for k in real_runs})})")
    return {"real": str(real), "emulated": str(emulated), "runs": rows,
            "summary": _summary(rows)}


# FIGURES' names as served_compare's keys (its figures of the requests, both sides)
CONSUMER_KEYS = {"TTFT": "ttft_median_ms", "TPOT": "tpot_median_ms",
                 "step gap": "step_gap_median_ms", "E2E": "e2e_median_ms"}


def consumer_beside(report: dict, profile: Path, artifact: Artifact, python: str | None,
                    out: Path, system: str | None = None,
                    modes: dict[str, str] | None = None,
                    say: Callable[[str], None] = lambda line: None) -> None:
    """report["consumer"] and each run's "consumer": AISimulate's figures and errors against
    the real server's first pass (ConsumerNotRun: its reason, nothing else)."""
    from ..aisimulate.fidelity import ConsumerNotRun, ConsumerRun, consumer_python
    from .served_compare import (
        acceptance_length,
        consumer_predictions,
        predicted_figures,
        relative,
        served_figures,
        trace_requests,
    )
    from .served_steps import served_requests
    try:    # before the real runs' requests are read: without a consumer none are needed
        consumer_python(python)
    except ConsumerNotRun as exc:
        report["consumer"] = {"status": "not run", "reason": str(exc)}
        say(f"AISimulate not run: {exc}")
        return
    real = _runs(Path(report["real"]))
    runs, asked = [], []
    for row in report["runs"]:
        result = real[(row["label"], 0)][1]
        requests = served_requests(result)
        closed = row["rate"] is None
        planned = trace_requests(requests)
        if closed:
            planned = [dataclasses.replace(r, arrival_seconds=None) for r in planned]
        al = acceptance_length(artifact, result)[0]
        runs.append(ConsumerRun((), planned, row["concurrency"] if closed else None, al))
        asked.append((row, requests, al))
    report["consumer"], predictions = consumer_predictions(
        python, profile, artifact, runs, out / "consumer", system, modes, say)
    if report["consumer"]["status"] != "run":
        return
    for i, (row, requests, al) in enumerate(asked):
        prediction = predictions.get(i)
        if prediction is None or "error" in prediction:
            row["consumer"] = {"error": (prediction or {}).get("error", "no prediction")}
            continue
        served, predicted = served_figures(requests), predicted_figures(prediction, al)
        errors = relative(served, predicted)
        row["consumer"] = {name: {"served": served.get(key), "predicted": predicted.get(key),
                                  "error": errors.get(key)}
                           for name, key in CONSUMER_KEYS.items()}
    report["summary"]["consumer"] = {
        name: _median_abs([r["consumer"][name]["error"] for r in report["runs"]
                           if name in r.get("consumer", {})]) for name in CONSUMER_KEYS}


def _median_abs(values: list[float | None]) -> dict:
    found = [abs(v) for v in values if v is not None]
    return {"runs": len(found), "median_abs_error": statistics.median(found) if found else None,
            "max_abs_error": max(found) if found else None,
            "within_goal_every": sum(v <= GOAL_EVERY for v in found)}


def _summary(rows: list[dict]) -> dict:
    out = {}
    for name, _ in FIGURES:
        errors = [abs(r["figures"][name]["error"]) for r in rows
                  if r["figures"][name]["error"] is not None]
        noise = [abs(r["figures"][name]["noise"]) for r in rows
                 if r["figures"][name]["noise"] is not None]
        out[name] = {"runs": len(errors),
                     "median_abs_error": statistics.median(errors) if errors else None,
                     "max_abs_error": max(errors) if errors else None,
                     "within_goal_every": sum(e <= GOAL_EVERY for e in errors),
                     "median_abs_noise": statistics.median(noise) if noise else None}
    out["goal"] = {name: out[name]["median_abs_error"] is not None
                   and out[name]["median_abs_error"] <= GOAL_MEDIAN
                   and out[name]["within_goal_every"] == out[name]["runs"]
                   for name in GOAL_FIGURES}
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(report: dict) -> str:
    lines = ["# Emulated against real `vllm serve`", "",
             f"real: `{report['real']}`; emulated: `{report['emulated']}`. Each figure is the "
             "median over a run's requests as `vllm bench serve` measured it; error = "
             "emulated/real - 1; noise = the real server's second pass against its first.", "",
             "| run | " + " | ".join(f"{n} real ms | {n} emulated ms | {n} error | {n} noise"
                                      for n, _ in FIGURES) + " |",
             "|---|" + "---|" * (4 * len(FIGURES))]
    for r in report["runs"]:
        cells = []
        for name, _ in FIGURES:
            f = r["figures"][name]
            cells += [_ms(f["real"]), _ms(f["emulated"]), _pct(f["error"]), _pct(f["noise"])]
        lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    s = report["summary"]
    lines += ["", "| figure | runs | median abs(error) | max abs(error) | runs within "
              f"{100 * GOAL_EVERY:.0f}% | median abs(noise) |", "|---|---|---|---|---|---|"]
    for name, _ in FIGURES:
        f = s[name]
        lines.append(f"| {name} | {f['runs']} | {_pct(f['median_abs_error'])} | "
                     f"{_pct(f['max_abs_error'])} | {f['within_goal_every']} | "
                     f"{_pct(f['median_abs_noise'])} |")
    lines += ["", "Goal (TTFT and TPOT: median abs(error) <= "
              f"{100 * GOAL_MEDIAN:.0f}%, every run <= {100 * GOAL_EVERY:.0f}%): "
              + ", ".join(f"{n} {'met' if ok else 'missed'}" for n, ok in s["goal"].items()),
              "", "Each TTFT in parts (means, ms; vLLM's request metrics: queued, prefill and "
              "the engine's TTFT; frontend = the client's mean TTFT - the engine's):", "",
              "| run | real client | real frontend | real queued | real prefill | emulated "
              "client | emulated frontend | emulated queued | emulated prefill |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        p, q = r["ttft_parts"]["real"], r["ttft_parts"]["emulated"]
        lines.append(f"| {r['label']} | " + " | ".join(
            _ms(x[k]) for x in (p, q) for k in ("client", "frontend", "queued", "prefill"))
            + " |")
    return "\n".join(lines + _consumer_lines(report)) + "\n"


def _consumer_lines(report: dict) -> list[str]:
    consumer = report.get("consumer")
    if consumer is None:
        return []
    if consumer["status"] != "run":
        return ["", f"AISimulate beside it: not run ({consumer.get('reason')})"]
    names = list(CONSUMER_KEYS)
    lines = ["", f"AISimulate beside it (`aisimulate predict` {consumer.get('version') or ''} on "
             "the profile's export; a rate's run as it arrived at the real server, a closed "
             "loop at its concurrency): error = predicted/real - 1, both sides' figures from "
             "the requests (served_compare's terms), beside the emulation's error:", "",
             "| run | " + " | ".join(f"{n} emulated error | {n} AISimulate error"
                                      for n in names) + " |",
             "|---|" + "---|" * (2 * len(names))]
    for r in report["runs"]:
        mine = r.get("consumer", {})
        cells = []
        for n in names:
            theirs = mine.get(n, {}).get("error") if isinstance(mine.get(n), dict) else None
            cells += [_pct(r["figures"][n]["error"]), _pct(theirs)]
        lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    failed = [(r["label"], r["consumer"]["error"]) for r in report["runs"]
              if "error" in r.get("consumer", {})]
    if failed:   # the consumer's own refusal, once a distinct reason (its text, cut short)
        reasons = dict.fromkeys(error.split("perf database error: ")[-1][:240]
                                for _, error in failed)
        lines += ["", f"AISimulate predicted no figures for {len(failed)} of "
                  f"{len(report['runs'])} runs ({', '.join(label for label, _ in failed)}): "
                  + " | ".join(reasons)]
    s = report["summary"]
    lines += ["", "| figure | emulated median abs(error) | AISimulate median abs(error) | "
              f"emulated runs within {100 * GOAL_EVERY:.0f}% | AISimulate runs within "
              f"{100 * GOAL_EVERY:.0f}% |", "|---|---|---|---|---|"]
    for n in names:
        c = s.get("consumer", {}).get(n, {})
        lines.append(f"| {n} | {_pct(s[n]['median_abs_error'])} | "
                     f"{_pct(c.get('median_abs_error'))} | {s[n]['within_goal_every']}/"
                     f"{s[n]['runs']} | {c.get('within_goal_every', 0)}/{c.get('runs', 0)} |")
    return lines


def write(report: dict, out: Path, plots: bool = True,
          say: Callable[[str], None] = lambda line: None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [atomic_write_text(out / REPORT_MD, markdown(report)),
               atomic_write_text(out / REPORT_JSON, json.dumps(report, indent=1) + "\n")]
    if plots:
        written.append(_plot(report, out / REPORT_PNG))
    return written


def _plot(report: dict, path: Path) -> Path:
    """Emulated against real, one panel a figure, a point a run, the line of equality."""
    from ..readers.figures import figure, png_bytes
    from ..wire.files import atomic_write_bytes
    fig = figure(4.0 * len(FIGURES), 4.0)
    for i, (name, _) in enumerate(FIGURES):
        ax = fig.add_subplot(1, len(FIGURES), i + 1)
        pairs = [(r["figures"][name]["real"], r["figures"][name]["emulated"])
                 for r in report["runs"] if r["figures"][name]["real"] is not None
                 and r["figures"][name]["emulated"] is not None]
        if pairs:
            xs, ys = zip(*pairs, strict=True)
            ax.scatter(xs, ys, s=18)
            top = max(*xs, *ys) * 1.05
            ax.plot([0, top], [0, top], linewidth=0.8, color="grey")
            ax.set_xlim(0, top)
            ax.set_ylim(0, top)
        ax.set_title(f"{name} (ms)")
        ax.set_xlabel("real vllm serve")
        ax.set_ylabel("emulated")
    return atomic_write_bytes(path, png_bytes(fig))
