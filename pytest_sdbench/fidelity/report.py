"""The fidelity report: every step's measured time beside each predictor's, the errors per
step kind, the end-to-end figures of each run beside AISimulate's prediction, as JSON (the
figures), Markdown (read at a glance) and a CSV of every step. Pure: no engine.

Errors are relative: e = predicted / measured - 1. Per predictor and step kind: the median
and p90 of |e| over the priced steps, the bias (the median of e: > 0 predicts slow), the
steps and the priced steps; unpriced steps counted by why.

This module computes the figures (the JSON); report_text.py writes them as Markdown and CSV."""

from __future__ import annotations

import hashlib
import re
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..wire.contract import PHASE_MIXED
from ..wire.model import Artifact, utc_now
from .predict import Interpolator
from .predict_mixed import BASIS_ROWS, BASIS_RULE
from .predict_phases import Priced
from .serving_records import STEP_KINDS, ServingRun, StepRecord, batch_bucket, bucket_label
from .workload import ARRIVAL_POISSON

REPORT_KIND, REPORT_VERSION = "pytest-sdbench/fidelity-report", 1
OURS, CONSUMER = "ours", "aisimulate"
PREDICTORS = (OURS, CONSUMER)
ALL_KINDS = "all"
# The consumer's refusals, by what its message says.
CONSUMER_CATEGORIES = (("mixed-iteration", "mixed: no composition for a speculative round"),
                       ("two-sided", "off-grid: no two-sided measured support"),
                       ("bracket", "off-grid: no batch bracket"))
CONSUMER_RULE = (
    "AISimulate's own loader (RustForwardPassPerfModel, estimation_mode fpm_interpolation, "
    "method direct, fallback deny, nextn = K) over the FPM table `sdbench export --to "
    "aisimulate` writes: a prefill query needs same-batch, two-sided measured support in "
    "tokens or KV; a decode query interpolates within its batch, or between batches of one "
    "capture regime; a mixed step of a speculative round has no composition; nothing is "
    "extrapolated. Its table holds one CUDA-graph mode per phase and reads no graph label.")
TIMING_NOTE = (
    "Step times are native: the model step of each engine iteration, joined with its "
    "snapshot by native iteration ID ({source}). Request latencies (TTFT, inter-token, "
    "end-to-end) are host-clock times (time.perf_counter) from a request's arrival to when "
    "LLMEngine.step() handed its tokens back: what a serving user sees, host overhead and "
    "queueing included.")
FIGURES = ("fidelity-steps.png", "fidelity-errors.png", "fidelity-e2e.png")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between order statistics (numpy's default)."""
    if not values:
        raise ValueError("percentile of no value")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def error_stats(errors: Sequence[float], steps: int) -> dict:
    """The figures of one predictor and step kind from the signed errors of its priced
    steps (e = predicted / measured - 1), of `steps` steps in all."""
    absolute = [abs(e) for e in errors]
    return {"steps": steps, "priced_steps": len(errors),
            "median_abs_error": statistics.median(absolute) if errors else None,
            "p90_abs_error": percentile(absolute, 90) if errors else None,
            "bias": statistics.median(errors) if errors else None}


def latency_stats(values: Sequence[float]) -> dict:
    """Median and p90 in milliseconds of values in seconds."""
    if not values:
        return {"median_ms": None, "p90_ms": None, "samples": 0}
    return {"median_ms": 1e3 * statistics.median(values),
            "p90_ms": 1e3 * percentile(values, 90), "samples": len(values)}


@dataclass
class StepRow:
    """One step of one run, with each predictor's price."""
    run: int
    step: StepRecord
    predictions: dict[str, Priced] = field(default_factory=dict)

    def error(self, predictor: str) -> float | None:
        p = self.predictions.get(predictor)
        return None if p is None or p.seconds is None else p.seconds / self.step.seconds - 1


def consumer_priced(row: dict) -> Priced:
    """A consumer_side.py step result as a Priced (its refusal without the export's model
    path and the advice it repeats, which say nothing of the step)."""
    if "ms" in row:
        return Priced(seconds=row["ms"] / 1e3, how=row.get("resolution"))
    message = str(row.get("error", "no answer"))
    message = re.sub(r' for model_path="[^"]*"', "", message)
    message = message.split(" Collect matching")[0].replace("perf database error: ", "")
    category = next((name for marker, name in CONSUMER_CATEGORIES if marker in message),
                    "refused")
    return Priced(category=category, detail=message)


def step_rows(runs: Sequence[ServingRun], ours: Interpolator,
              consumer_steps: Iterable[dict] | None) -> list[StepRow]:
    rows = [StepRow(i, s, {OURS: ours.price(s)}) for i, run in enumerate(runs) for s in run.steps]
    if consumer_steps is not None:
        by_id = {(r["run"], r["native_iteration_id"]): r for r in consumer_steps}
        for row in rows:
            answer = by_id.get((row.run, row.step.native_iteration_id))
            row.predictions[CONSUMER] = consumer_priced(answer) if answer else Priced(
                category="refused", detail="the consumer returned no answer for this step")
    return rows


def _split(rows: Sequence[StepRow], predictor: str, part: Callable[[StepRow], Any],
           label: Callable[[Any], str]) -> dict:
    """The error figures of the rows of each part (in the parts' order), by label."""
    parts: dict[Any, list[StepRow]] = {}
    for r in rows:
        parts.setdefault(part(r), []).append(r)
    return {label(key): error_stats([e for r in these if (e := r.error(predictor)) is not None],
                                    len(these)) for key, these in sorted(parts.items())}


def kind_figures(rows: Sequence[StepRow], predictor: str) -> dict:
    """Per step kind (and all kinds): the error figures, the unpriced steps by why, and the
    errors by graph mode and by batch (the step's requests, in BATCH_BUCKETS)."""
    figures = {}
    for kind in (*STEP_KINDS, ALL_KINDS):
        mine = [r for r in rows if kind in (ALL_KINDS, r.step.kind)
                and predictor in r.predictions]
        errors = [e for r in mine if (e := r.error(predictor)) is not None]
        entry = error_stats(errors, len(mine))
        entry["unpriced"] = dict(Counter(r.predictions[predictor].category for r in mine
                                         if not r.predictions[predictor].priced))
        entry["by_graph_mode"] = _split(mine, predictor, lambda r: r.step.graph_mode, str)
        entry["by_batch"] = _split(mine, predictor, lambda r: batch_bucket(r.step.requests),
                                   bucket_label)
        if kind == PHASE_MIXED:
            # how each mixed step was priced: from the profile's mixed rows, or by the rule
            # (a profile without them); the predictor's own where it says none
            entry["by_basis"] = _split(mine, predictor,
                                       lambda r: r.predictions[predictor].basis or OWN_BASIS,
                                       str)
        figures[kind] = entry
    return figures


OWN_BASIS = "the predictor's own"


def mixed_pricing(mixed: dict) -> str:
    """One line: how a predictor's mixed steps were priced (kind_figures' mixed entry): from
    the profile's mixed rows, by the rule (a profile without them) or by the predictor's own
    means, how many of them priced, and those not priced, by why."""
    parts = [f"{_BASIS_WORDS.get(basis, basis)}, {k['priced_steps']} of {k['steps']} priced"
             for basis, k in (mixed.get("by_basis") or {}).items()]
    unpriced = mixed.get("unpriced") or {}
    outside = ", ".join(f"{n} {why}" for why, n in sorted(unpriced.items()))
    return (f"{mixed['steps']} mixed step(s): " + "; ".join(parts)
            + f"; {sum(unpriced.values())} not priced" + (f" ({outside})" if outside else ""))


_BASIS_WORDS = {BASIS_ROWS: "from the profile's mixed rows",
                BASIS_RULE: "by the rule (the profile has no mixed rows)",
                OWN_BASIS: "by its own means"}


def measured_e2e(run: ServingRun) -> dict:
    requests = run.requests
    first = min(r.arrival for r in requests)
    last = max(r.finished or r.arrival for r in requests)
    span = max(last - first, 1e-9)
    return {"ttft": latency_stats([r.ttft for r in requests if r.deliveries]),
            "itl": latency_stats([x for r in requests if (x := r.itl) is not None]),
            "e2e": latency_stats([r.e2e for r in requests if r.finished is not None]),
            "output_throughput_tok_s": sum(r.delivered_tokens for r in requests) / span,
            "request_throughput_rps": len(requests) / span, "requests": len(requests)}


def predicted_e2e(prediction: dict) -> dict:
    """The consumer's figures of one run, from its per-request records (the same statistics
    as the measured ones) and its throughput summary."""
    records = prediction.get("requests") or []
    summary = prediction.get("summary") or {}

    def ms(key: str) -> list[float]:
        return [row[key] / 1e3 for row in records if isinstance(row.get(key), (int, float))]
    return {"ttft": latency_stats(ms("ttft_ms")), "itl": latency_stats(ms("itl_ms")),
            "e2e": latency_stats(ms("e2e_latency_ms")),
            "output_throughput_tok_s": summary.get("output_throughput_tok_s"),
            "request_throughput_rps": summary.get("request_throughput_rps"),
            "requests": len(records)}


E2E_METRICS = (("ttft", "median_ms", "TTFT median (ms)"), ("ttft", "p90_ms", "TTFT p90 (ms)"),
               ("itl", "median_ms", "ITL median (ms)"), ("itl", "p90_ms", "ITL p90 (ms)"),
               ("e2e", "median_ms", "E2E median (ms)"), ("e2e", "p90_ms", "E2E p90 (ms)"),
               ("output_throughput_tok_s", None, "output tokens/s"),
               ("request_throughput_rps", None, "requests/s"))


def e2e_value(figures: dict, metric: str, stat: str | None) -> float | None:
    value = figures.get(metric)
    return value.get(stat) if stat is not None and isinstance(value, dict) else value


def relative_errors(measured: dict, predicted: dict) -> dict:
    out = {}
    for metric, stat, _ in E2E_METRICS:
        m, p = e2e_value(measured, metric, stat), e2e_value(predicted, metric, stat)
        key = metric if stat is None else f"{metric}_{stat.removesuffix('_ms')}"
        out[key] = None if m in (None, 0) or p is None else p / m - 1
    return out


def model_name(artifact: Artifact) -> str:
    from ..run.profile import preset_of
    preset = preset_of(artifact)
    return preset or Path(str(artifact.identity.target.model.value)).name


def build_figures(profile_path: Path, artifact: Artifact, runs: Sequence[ServingRun],
                  rows: Sequence[StepRow], consumer: dict, notes: Sequence[str]) -> dict:
    """The report's JSON. `consumer`: {"status": "run"|"not run", "reason", "version",
    "export", "graph_modes", "predictions": [...per run...]}."""
    predictors = [OURS] + ([CONSUMER] if consumer.get("status") == "run" else [])
    name = model_name(artifact)
    per_run = []
    rates = {}
    for i, run in enumerate(runs):
        mine = [r for r in rows if r.run == i]
        measured = measured_e2e(run)
        entry: dict = {
                 "label": run.label, "workload": run.workload, "wall_seconds": run.wall_seconds,
                 "started_at": run.started_at, "requests": len(run.requests),
                 "steps": dict(Counter(s.kind for s in run.steps)), "idle_steps": run.idle_steps,
                 "timing_source": run.timing_source, "environment": run.environment,
                 "acceptance_length": run.acceptance_length,
                 "observed_acceptance_length": run.observed_acceptance_length(),
                 "errors": {p: kind_figures(mine, p) for p in predictors},
                 "end_to_end": {"measured": measured}}
        prediction = next((p for p in consumer.get("predictions", []) if p.get("run") == i),
                          None)
        if prediction is not None and "error" not in prediction:
            predicted = predicted_e2e(prediction)
            entry["end_to_end"].update(predicted=predicted,
                                       relative_error=relative_errors(measured, predicted))
        elif prediction is not None:
            entry["end_to_end"]["predict_error"] = prediction["error"]
        per_run.append(entry)
        key = (f"{run.workload['rate']:g}" if run.workload["arrival"] == ARRIVAL_POISSON
               else f"concurrency {run.workload['concurrency']}")
        predicted_e = entry["end_to_end"].get("predicted") or {}
        rates[key] = {
            "measured": {"ttft_median_ms": measured["ttft"]["median_ms"],
                         "itl_median_ms": measured["itl"]["median_ms"]},
            "predicted": {"ttft_median_ms": (predicted_e.get("ttft") or {}).get("median_ms"),
                          "itl_median_ms": (predicted_e.get("itl") or {}).get("median_ms")}}
    ident = artifact.identity
    return {
        "kind": REPORT_KIND, "version": REPORT_VERSION, "created_at": utc_now(),
        "profile": {"path": str(profile_path), "sha256": _sha256(profile_path),
                    "run_id": artifact.run_id, "model": name, "device": artifact.device,
                    "device_name": ident.device_name.value,
                    "engine_version": ident.engine_version.value,
                    "draft_depth": artifact.speculative.draft_depth,
                    "acceptance_control": artifact.speculative.acceptance_control,
                    "acceptance_length": artifact.speculative.synthetic_acceptance_length,
                    "repeats": artifact.measurement_policy.repeats,
                    "points": {"prefill": len({o.point_index for o in artifact.prefill}),
                               "decode": len({o.point_index for o in artifact.decode}),
                               "mixed": len({o.point_index for o in artifact.mixed})}},
        "engine_notes": list(notes),
        "timing": {"steps": sorted({r.timing_source for r in runs}),
                   "requests": "host clock (time.perf_counter) when LLMEngine.step() "
                               "returned the tokens",
                   "note": TIMING_NOTE.format(source=", ".join(sorted(
                       {r.timing_source for r in runs})))},
        "predictors": {OURS: {"rule": Interpolator.rule},
                       CONSUMER: {"rule": CONSUMER_RULE, **{k: v for k, v in consumer.items()
                                                            if k != "predictions"}}},
        "error_definition": "e = predicted / measured - 1; median_abs_error and p90_abs_error "
                            "over the priced steps; bias = the median of e (> 0: predicts "
                            "slow)",
        "models": {name: {p: kind_figures(rows, p) for p in predictors}},
        "rates": rates,
        "runs": per_run,
    }


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None
