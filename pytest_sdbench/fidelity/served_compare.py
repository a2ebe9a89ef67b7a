"""`sdbench fidelity PROFILE --served DIR`: the serving runs `sdbench serve` left (vLLM's own
server and client, no code of this project in the engine) against AISimulate's prediction of
the very trace each run had. Pure but for the consumer's subprocess: no engine.

Per run, the trace is what vLLM's client really sent: arrival = start_times - min(start_times)
(the client's send times; with Poisson arrivals and no concurrency cap a request is sent when
it arrives), input_lens and output_lens from its detailed result; only the requests that
succeeded. The consumer predicts it with its own code (consumer_side.py, `aisimulate
predict` on `sdbench export --to aisimulate` of the profile).

The figures, served and predicted, defined the same way on both sides:
- TTFT: median and p90 over requests.
- TPOT: per request (E2E - TTFT) / (output tokens - 1), median over requests (vLLM's own
  definition; the consumer's from its per-request E2E and TTFT).
- step gap (the ITL both sides define alike): vLLM's served ITL is the gap between two
  streamed chunks, and one chunk is one engine step of about AL tokens; the consumer counts
  the gaps inside one speculative delivery as zero, so its per-token ITL median is 0. The
  served step gap is the median of vLLM's ITLs; the predicted one is the predicted TPOT x AL
  (the consumer's tokens a step). The consumer's own per-request itl_ms is kept beside it,
  under its own name, and not compared.
Each with e = predicted / served - 1. Beside them, the profile's own price of every served
decode-only step (served_steps.py): the step the engine runs while it serves, priced by the
row that claims to be it."""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..wire.files import atomic_write_text
from ..wire.model import Artifact, utc_now
from .predict_mixed import BASIS_ROWS, BASIS_RULE
from .report import percentile
from .served import read_manifest, served_results
from .served_steps import ServedRequest, price_served_steps, served_requests
from .served_windows import price_mixed_windows
from .workload import PlannedRequest

REPORT_KIND, REPORT_VERSION = "pytest-sdbench/served-fidelity", 1
STEM = "served-fidelity"
METRICS = (("ttft_median_ms", "TTFT median"), ("ttft_p90_ms", "TTFT p90"),
           ("tpot_median_ms", "TPOT median"), ("step_gap_median_ms", "step gap median"),
           ("e2e_median_ms", "E2E median"))
STEP_GAP_RULE = (
    "vLLM's served ITL is the gap between two streamed chunks, one chunk an engine step of "
    "about AL tokens; the consumer counts the gaps inside one speculative delivery as zero "
    "(its per-token ITL median is 0). Compared step to step: served = the median of vLLM's "
    "ITLs; predicted = the predicted TPOT median x AL (tokens a step).")
TPOT_RULE = ("per request (E2E - TTFT) / (output tokens - 1), requests of more than one "
             "output token; the median over requests (vLLM's definition, on both sides)")


def trace_requests(requests: Sequence[ServedRequest]) -> list[PlannedRequest]:
    """The run as it really arrived, for the consumer's Mooncake trace: arrivals from the
    earliest send, in send order; no shared prefix (vLLM's random dataset shares none)."""
    first = min(r.start for r in requests)
    ordered = sorted(requests, key=lambda r: r.start)
    return [PlannedRequest(i, r.start - first, r.input_tokens, r.output_tokens)
            for i, r in enumerate(ordered)]


def _median_ms(values: Sequence[float]) -> float | None:
    return 1e3 * statistics.median(values) if values else None


def _p90_ms(values: Sequence[float]) -> float | None:
    return 1e3 * percentile(values, 90) if values else None


def served_figures(requests: Sequence[ServedRequest]) -> dict:
    gaps = [g for r in requests for g in r.itls]
    tpots = [t for r in requests if (t := r.tpot) is not None]
    return {"requests": len(requests),
            "ttft_median_ms": _median_ms([r.ttft for r in requests]),
            "ttft_p90_ms": _p90_ms([r.ttft for r in requests]),
            "tpot_median_ms": _median_ms(tpots),
            "step_gap_median_ms": _median_ms(gaps), "step_gap_p90_ms": _p90_ms(gaps),
            "e2e_median_ms": _median_ms([r.e2e for r in requests]),
            "tokens_per_chunk": (sum(r.output_tokens - 1 for r in requests) / len(gaps)
                                 if gaps else None)}


def predicted_figures(prediction: dict, tokens_per_step: float) -> dict:
    """The consumer's per-request records in the same terms (its times are milliseconds)."""
    rows = [r for r in prediction.get("requests") or []
            if isinstance(r.get("ttft_ms"), (int, float))]
    ttfts = [r["ttft_ms"] / 1e3 for r in rows]
    e2es = [r["e2e_latency_ms"] / 1e3 for r in rows
            if isinstance(r.get("e2e_latency_ms"), (int, float))]
    tpots = [(r["e2e_latency_ms"] - r["ttft_ms"]) / 1e3 / (r["output_length"] - 1)
             for r in rows if isinstance(r.get("e2e_latency_ms"), (int, float))
             and isinstance(r.get("output_length"), int) and r["output_length"] > 1]
    own_itl = [r["itl_ms"] / 1e3 for r in rows if isinstance(r.get("itl_ms"), (int, float))]
    tpot = _median_ms(tpots)
    return {"requests": len(rows), "ttft_median_ms": _median_ms(ttfts),
            "ttft_p90_ms": _p90_ms(ttfts), "tpot_median_ms": tpot,
            "step_gap_median_ms": tpot * tokens_per_step if tpot is not None else None,
            "e2e_median_ms": _median_ms(e2es),
            "consumer_itl_ms_median": _median_ms(own_itl)}


def relative(served: dict, predicted: dict) -> dict:
    out = {}
    for key, _ in METRICS:
        s, p = served.get(key), predicted.get(key)
        out[key] = p / s - 1 if s and p is not None else None
    return out


def acceptance_length(artifact: Artifact, result: dict) -> tuple[float, str]:
    """Tokens a step: the profile's synthetic AL, else the run's own measured AL (vLLM's
    spec-decode counters, in its result), else 1."""
    al = artifact.speculative.synthetic_acceptance_length
    if al is not None:
        return float(al), "the profile's synthetic acceptance length"
    measured = result.get("spec_decode_acceptance_length")
    if isinstance(measured, (int, float)) and measured >= 1:
        return float(measured), "the served run's acceptance length (vLLM's counters)"
    return 1.0, "1 (no acceptance length known)"


def consumer_predictions(python: str | None, profile_path: Path, artifact: Artifact,
                         runs: list, folder: Path, system: str | None = None,
                         modes: dict[str, str] | None = None,
                         say: Callable[[str], None] = lambda line: None
                         ) -> tuple[dict, dict[int, dict]]:
    """`aisimulate predict` of the runs (aisimulate.fidelity.ConsumerRun): how the consumer
    ran ({"status": "run", ...} or "not run" and why) and its prediction of each run, by
    index."""
    from ..aisimulate.fidelity import ConsumerNotRun, consumer_python, run_consumer
    try:
        py = consumer_python(python)
        done = run_consumer(py, profile_path, artifact, runs, folder, system, modes or {})
    except ConsumerNotRun as exc:
        say(f"AISimulate not run: {exc}")
        return {"status": "not run", "reason": str(exc)}, {}
    return ({"status": "run", "python": py, "export": done.export,
             "version": done.result.get("consumer", {}).get("version")},
            {p["run"]: p for p in done.result.get("predictions", [])})


def compare(profile_path: Path, artifact: Artifact, served: Path, out: Path,
            python: str | None, system: str | None = None,
            modes: dict[str, str] | None = None,
            say: Callable[[str], None] = lambda line: None) -> dict:
    """The report of every served run against the consumer's prediction of its trace."""
    from ..aisimulate.fidelity import ConsumerRun
    manifest = read_manifest(served)
    results = served_results(served, manifest)
    runs: list[dict[str, Any]] = []
    for rate, result in results:
        requests = served_requests(result)
        if not requests:
            raise ValueError(f"--served: the run at rate {rate:g} has no request that "
                             "succeeded")
        al, al_source = acceptance_length(artifact, result)
        runs.append({"rate": rate, "requests": requests, "arrived": trace_requests(requests),
                     "al": al, "al_source": al_source, "result": result})
    consumer, predictions = consumer_predictions(
        python, profile_path, artifact,
        [ConsumerRun((), r["arrived"], None, r["al"]) for r in runs], out / "consumer",
        system, modes, say)
    per_rate = []
    for i, run in enumerate(runs):
        served_f = served_figures(run["requests"])
        entry: dict = {
            "rate": run["rate"], "result_file": next(
                r["result"] for r in manifest["runs"] if float(r["rate"]) == run["rate"]),
            "acceptance_length": run["al"], "acceptance_length_source": run["al_source"],
            "served_acceptance_length": run["result"].get("spec_decode_acceptance_length"),
            "served": served_f, "trace": f"consumer/run{i}-trace.jsonl"
            if consumer["status"] == "run" else None}
        entry["profile_steps"] = price_served_steps(artifact, run["requests"])
        if entry["profile_steps"]["mixed"]["gaps"]:
            entry["profile_steps"]["mixed_windows"] = price_mixed_windows(artifact,
                                                                          run["requests"])
        prediction = predictions.get(i)
        if prediction is not None and "error" not in prediction:
            predicted = predicted_figures(prediction, run["al"])
            entry.update(predicted=predicted, relative_error=relative(served_f, predicted))
        elif prediction is not None:
            entry["predict_error"] = prediction["error"]
        per_rate.append(entry)
    return {"kind": REPORT_KIND, "version": REPORT_VERSION, "created_at": utc_now(),
            "profile": {"path": str(profile_path), "run_id": artifact.run_id,
                        "device": artifact.device},
            "served": {"folder": str(served), "manifest_status": manifest.get("status"),
                       "versions": manifest.get("versions"),
                       "server_command": manifest.get("server", {}).get("command")},
            "definitions": {"error": "e = predicted / served - 1", "tpot": TPOT_RULE,
                            "step_gap": STEP_GAP_RULE,
                            "arrival": "start_times - min(start_times) of the requests that "
                                       "succeeded, from vLLM's detailed result"},
            "consumer": consumer, "rates": per_rate}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def markdown(report: dict) -> str:
    lines = [f"# Served vs predicted: profile {report['profile']['run_id']}", ""]
    consumer = report["consumer"]
    if consumer["status"] != "run":
        lines += [f"AISimulate's predictions are absent: {consumer.get('reason')}", ""]
    lines += ["| rate (req/s) | metric | served ms | predicted ms | predicted/served - 1 |",
              "|---|---|---|---|---|"]
    for entry in report["rates"]:
        predicted = entry.get("predicted") or {}
        errors = entry.get("relative_error") or {}
        for key, label in METRICS:
            lines.append(f"| {entry['rate']:g} | {label} | {_ms(entry['served'].get(key))} | "
                         f"{_ms(predicted.get(key))} | {_pct(errors.get(key))} |")
        if "predict_error" in entry:
            lines.append(f"| {entry['rate']:g} | aisimulate predict failed (below) | | | |")
    lines += _steps_table(report)
    lines += ["", f"- errors: {report['definitions']['error']}",
              f"- TPOT: {report['definitions']['tpot']}",
              f"- step gap: {report['definitions']['step_gap']}",
              f"- arrivals: {report['definitions']['arrival']}"]
    for entry in report["rates"]:
        lines.append(f"- rate {entry['rate']:g}: {entry['served']['requests']} requests; AL "
                     f"{entry['acceptance_length']:.3g} ({entry['acceptance_length_source']})"
                     f"; served tokens a chunk "
                     f"{_ms(entry['served'].get('tokens_per_chunk'))}")
        if "predict_error" in entry:
            lines.append(f"- rate {entry['rate']:g}: aisimulate predict failed: "
                         f"{entry['predict_error']}")
    return "\n".join(lines) + "\n"


def _steps_table(report: dict) -> list[str]:
    """The profile's own price of the served decode steps (served_steps.py), by batch."""
    entries = [e for e in report["rates"] if e.get("profile_steps")]
    if not entries:
        return []
    lines = ["", "The profile's own price of the served decode steps (client gaps of "
             "decode-only steps; served_steps.RULE):", "",
             "| rate (req/s) | batch | gaps | served median ms | profile median ms | bias "
             "(median e) | median abs(e) |", "|---|---|---|---|---|---|---|"]
    for entry in entries:
        steps = entry["profile_steps"]
        rows = [*steps["by_batch"].items(), ("all", steps["overall"])]
        for batch, row in rows:
            if row:
                lines.append(f"| {entry['rate']:g} | {batch} | {row['gaps']} | "
                             f"{row['served_median_ms']:.2f} | {row['predicted_median_ms']:.2f}"
                             f" | {row['bias']:+.1%} | {row['median_abs_error']:.1%} |")
        unpriced = ", ".join(f"{n} {why}" for why, n in sorted(steps["unpriced"].items()))
        lines.append(f"| {entry['rate']:g} | left out | {steps['mixed_left_out']} mixed"
                     f"{'; ' + unpriced + ' unpriced' if unpriced else ''} | | | | |")
    return [*lines, *_mixed_lines(entries)]


def _mixed_lines(entries: list[dict]) -> list[str]:
    """The served mixed steps the profile prices (served_steps.MIXED_RULE), by batch."""
    entries = [e for e in entries if e["profile_steps"].get("mixed")]
    if not entries:
        return []
    lines = ["", "The profile's own price of the served mixed steps (a request's prefill "
             "beside the decoding ones; served_steps.MIXED_RULE, priced by "
             "predict_mixed.MIXED_RULE from the profile's mixed rows, or by "
             "predict_mixed.MIXED_FALLBACK_RULE where it has "
             "none; batch: decoding and prefilled requests; a step counted once in the gaps "
             "of each request decoding in it):", ""]
    lines += [f"- rate {e['rate']:g}: {mixed_pricing(e['profile_steps']['mixed'])}"
              for e in entries]
    lines += ["",
             "| rate (req/s) | batch | gaps | served median ms | profile median ms | bias "
             "(median e) | median abs(e) |", "|---|---|---|---|---|---|---|"]
    for entry in entries:
        mixed = entry["profile_steps"]["mixed"]
        for batch, row in [*mixed["by_batch"].items(), ("all", mixed["overall"])]:
            if row:
                lines.append(f"| {entry['rate']:g} | {batch} | {row['gaps']} | "
                             f"{row['served_median_ms']:.2f} | {row['predicted_median_ms']:.2f}"
                             f" | {row['bias']:+.1%} | {row['median_abs_error']:.1%} |")
        lag = mixed["prefill_lag"]
        by_lag = ", ".join(f"{k}: {v:.2f} ms" for k, v in lag["median_gap_ms_by_lag"].items())
        unpriced = ", ".join(f"{n} {why}" for why, n in sorted(mixed["unpriced"].items()))
        lines.append(f"| {entry['rate']:g} | left out | {mixed['waiting_left_out']} with no "
                     f"prefill ending in them (a lag step, or a request waiting)"
                     f"{'; ' + unpriced + ' unpriced' if unpriced else ''}"
                     f"; prefill lag {lag['lag_chunks']} chunk(s) (median gap by lag: "
                     f"{by_lag}) | | | | |")
    lines += _window_lines(entries)
    lines += ["", "Each request's TTFT in parts by the client's clock (served_steps.ttft_parts; "
              "medians over the requests whose prefill step shows in another's gaps):", ""]
    for entry in entries:
        parts = entry["profile_steps"].get("ttft_parts") or {}
        if parts.get("requests"):
            lines.append(f"- rate {entry['rate']:g}: TTFT {parts['ttft_ms']:.2f} ms; its "
                         f"parts: send to the prefill step {parts['before_step_ms']:.2f} ms "
                         f"(frontend, admission), the prefill step "
                         f"{parts['prefill_step_ms']:.2f} ms (what a profile row prices), "
                         f"the step's end to the first chunk "
                         f"{parts['after_step_ms']:.2f} ms ({parts['lag_chunks']} step(s) "
                         f"later, and the output path); {parts['requests']} requests, "
                         f"{parts['unread']} whose prefill step shows in no other's gaps")
    return lines


def _window_lines(entries: list[dict]) -> list[str]:
    """The same prefills priced over a window of steps (served_windows.WINDOW_RULE), beside
    their mixed gap alone: what the engine's hand-off of each step's output moves between
    gaps, and what the prices themselves miss."""
    rates = [(e["rate"], e["profile_steps"]["mixed_windows"]) for e in entries
             if e["profile_steps"].get("mixed_windows")]
    if not rates:
        return []
    lines = ["", "The same prefills over a window of steps (served_windows.WINDOW_RULE: "
             "the mixed step and its neighbours together, so that when vLLM hands a step's "
             "output on, after launching the next, moves no time out of what is compared):",
             ""]
    for rate, windows in rates:
        left = ", ".join(f"{n} {why}" for why, n in sorted(windows["left_out"].items()))
        line = (f"- rate {rate:g}: {windows['windows']} windows"
                f"{' (left out: ' + left + ')' if left else ''}")
        whole, alone = windows["overall"], windows["mixed_gap_alone"]
        if whole:
            line += (f": median abs(e) {whole['median_abs_error']:.1%}, bias "
                     f"{whole['bias']:+.1%}; their mixed gap alone "
                     f"{alone['median_abs_error']:.1%}, bias {alone['bias']:+.1%}")
        lines.append(line)
    return lines


def mixed_pricing(mixed: dict) -> str:
    """How the served mixed gaps of one rate were priced: from the profile's mixed rows or by
    the rule (a profile without them), and those outside what was measured, by why with an
    example; in gaps, and about how many steps."""
    about = mixed.get("steps_about") or {}
    unpriced = mixed.get("unpriced") or {}
    examples = mixed.get("unpriced_examples") or {}
    if mixed.get("basis", BASIS_RULE) == BASIS_ROWS:
        priced = (f"{mixed.get('priced_from_rows', 0)} priced from the profile's mixed rows "
                  f"(about {about.get(BASIS_ROWS, 0):g} steps), none by the rule")
    else:
        priced = (f"none from mixed rows (the profile has none), "
                  f"{mixed.get('priced_by_rule', 0)} priced by the rule "
                  f"(predict_mixed.MIXED_FALLBACK_RULE; about {about.get(BASIS_RULE, 0):g} steps)")
    outside = "; ".join(f"{n} {why} (e.g. {examples[why]})" if examples.get(why)
                        else f"{n} {why}" for why, n in sorted(unpriced.items()))
    return (f"{mixed['gaps']} mixed gaps: {priced}, {sum(unpriced.values())} outside what was "
            f"measured (about {about.get('outside', 0):g} steps)"
            + (f": {outside}" if outside else ""))


def plot(report: dict, path: Path) -> Path:
    from ..readers.figures import require_matplotlib
    require_matplotlib()
    from matplotlib.figure import Figure
    fig = Figure(figsize=(9.0, 4.0))
    axes = fig.subplots(1, len(METRICS) - 1)
    rates = [e["rate"] for e in report["rates"]]
    for ax, (key, label) in zip(axes, METRICS[:-1], strict=True):
        ax.plot(rates, [e["served"].get(key) for e in report["rates"]], "o-", label="served")
        predicted = [(e.get("predicted") or {}).get(key) for e in report["rates"]]
        if any(p is not None for p in predicted):
            ax.plot(rates, predicted, "s--", label="AISimulate")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("request rate (req/s)", fontsize=8)
        ax.set_ylabel("ms", fontsize=8)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def write(report: dict, out: Path, plots: bool) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [atomic_write_text(out / f"{STEM}.json", json.dumps(report, indent=1) + "\n"),
               atomic_write_text(out / f"{STEM}.md", markdown(report))]
    if plots:
        try:
            written.append(plot(report, out / f"{STEM}.png"))
        except (ImportError, RuntimeError) as exc:
            print(f"sdbench fidelity: no plot ({exc})", file=sys.stderr)
    return written
