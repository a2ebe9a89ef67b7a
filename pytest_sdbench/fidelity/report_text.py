"""The fidelity report as text (report.py computes its figures): the Markdown read at a
glance, and the CSV of every step with each predictor's price."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

from ..wire.contract import PHASE_MIXED
from .report import (
    ALL_KINDS,
    CONSUMER,
    CONSUMER_RULE,
    E2E_METRICS,
    FIGURES,
    OURS,
    PREDICTORS,
    StepRow,
    e2e_value,
    mixed_pricing,
)
from .serving_records import STEP_KINDS


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.1f}%" if signed else f"{100 * value:.1f}%"


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in rows]
    return lines


def _split_table(predictors: dict, split: str, column: str) -> list[str]:
    """The error figures of each predictor and step kind split by kind_figures' `split`
    (by_graph_mode, by_batch), one row a part."""
    table = [(predictor, kind, part, k["steps"], k["priced_steps"],
              _pct(k["median_abs_error"]), _pct(k["bias"], signed=True))
             for predictor, kinds in predictors.items() for kind in STEP_KINDS
             for part, k in kinds[kind][split].items()]
    return _table(("predictor", "step kind", column, "steps", "priced", "median abs error",
                   "bias"), table)


def markdown(figures: dict, rows: Sequence[StepRow], examples: int = 3) -> str:
    profile, consumer = figures["profile"], figures["predictors"][CONSUMER]
    name = profile["model"]
    al = profile["acceptance_length"]
    lines = ["# Fidelity: does the profile predict a serving run it never saw?", "",
             f"Profile `{profile['path']}` (run {profile['run_id'][:12]}): {name} on "
             f"{profile['device_name']} ({profile['device']}), vLLM {profile['engine_version']}, "
             f"EAGLE3 K={profile['draft_depth']}, acceptance {profile['acceptance_control']}"
             + (f" AL {al:g}" if al is not None else "") + f", {profile['points']['prefill']} "
             f"prefill, {profile['points']['decode']} decode and "
             f"{profile['points'].get('mixed', 0)} mixed points, "
             f"{profile['repeats']} repeat(s) each.", "",
             "The serving engine was configured as the profile's: every identity field and "
             "effective engine setting compared equal."
             + "".join(f" Note: {n}." for n in figures["engine_notes"]), ""]
    for run in figures["runs"]:
        lines.append(f"- **{run['label']}**: {run['workload']['description']}; "
                     f"{run['requests']} requests, {sum(run['steps'].values())} steps "
                     f"({', '.join(f'{n} {k}' for k, n in sorted(run['steps'].items()))}), "
                     f"{run['wall_seconds']:.1f} s; acceptance length measured "
                     f"{_num(run['observed_acceptance_length'])}"
                     + (f" (contended: {run['environment'].get('reason')})"
                        if run["environment"].get("contended") else ""))
    lines += ["", figures["timing"]["note"], ""]
    if consumer.get("status") != "run":
        lines += [f"AISimulate's predictions: not run: {consumer.get('reason')}.", ""]
    lines += ["## Each step, predicted against measured", "",
              f"e = predicted / measured - 1 over the priced steps; bias is the median of e "
              f"(> 0 predicts slow). Model {name}.", ""]
    table: list[tuple] = []
    for predictor, kinds in figures["models"][name].items():
        for kind in (*STEP_KINDS, ALL_KINDS):
            k = kinds[kind]
            table.append((predictor, kind, k["steps"], k["priced_steps"],
                          _pct(k["median_abs_error"]), _pct(k["p90_abs_error"]),
                          _pct(k["bias"], signed=True)))
    lines += _table(("predictor", "step kind", "steps", "priced", "median abs error",
                     "p90 abs error", "bias"), table)
    mixed = [(predictor, kinds[PHASE_MIXED]) for predictor, kinds in
             figures["models"][name].items() if kinds[PHASE_MIXED]["steps"]]
    if mixed:
        lines += ["", "Mixed steps, how they were priced (ours: from the profile's mixed rows "
                  "where it has any, else by the rule, labelled so; the rules below):", ""]
        lines += [f"- **{predictor}**: {mixed_pricing(k)}" for predictor, k in mixed]
    lines += ["", f"![predicted vs measured]({FIGURES[0]})", "",
              f"![error histogram]({FIGURES[1]})", "", "By CUDA-graph mode:", ""]
    lines += _split_table(figures["models"][name], "by_graph_mode", "graph mode")
    lines += ["", "By batch (the step's requests):", ""]
    lines += _split_table(figures["models"][name], "by_batch", "batch")
    lines += ["", "## Steps not priced, by why", ""]
    table = []
    for predictor in figures["models"][name]:
        unpriced: dict[tuple[str, str], list[StepRow]] = {}
        for r in rows:
            p = r.predictions.get(predictor)
            if p is not None and not p.priced:
                unpriced.setdefault((r.step.kind, str(p.category)), []).append(r)
        for (kind, category), these in sorted(unpriced.items()):
            shown = "; ".join(f"step {r.step.native_iteration_id}: "
                              f"{r.predictions[predictor].detail}" for r in these[:examples])
            table.append((predictor, kind, category, len(these), shown))
    lines += _table(("predictor", "step kind", "why", "steps", "examples"), table) \
        if table else ["Every step was priced."]
    lines += ["", "## End to end", ""]
    for run in figures["runs"]:
        e2e = run["end_to_end"]
        measured, predicted = e2e["measured"], e2e.get("predicted")
        errors = e2e.get("relative_error") or {}
        lines += [f"**{run['label']}**", ""]
        table = []
        for metric, stat, label in E2E_METRICS:
            key = metric if stat is None else f"{metric}_{stat.removesuffix('_ms')}"
            table.append((label, _num(e2e_value(measured, metric, stat)),
                          _num(e2e_value(predicted, metric, stat)) if predicted else "-",
                          _pct(errors.get(key), signed=True)))
        lines += _table(("metric", "measured", "AISimulate", "error"), table)
        if "predict_error" in e2e:
            lines += ["", f"`aisimulate predict` failed: {e2e['predict_error']}"]
        lines.append("")
    lines += [f"![end to end]({FIGURES[2]})", "", "ITL is a request's mean inter-token "
              "latency, from its first to its last token over its tokens after the first (the "
              "consumer's per-request itl_ms, its TPOT); medians and p90 are over requests.",
              "", "## The predictors' rules", "",
              f"- **{OURS}**: {figures['predictors'][OURS]['rule']}",
              f"- **{CONSUMER}**: {CONSUMER_RULE}"
              + (f" Version {consumer.get('version')}; export `{consumer.get('export')}`, "
                 f"graph modes {consumer.get('graph_modes') or 'one per phase'}."
                 if consumer.get("status") == "run" else ""), "",
              "Files: `fidelity.json` (these figures), `steps.csv` (every step), "
              "`fidelity-run.json` (the serving runs as recorded), `profile.json` (the "
              "profile), `consumer/` (the consumer's inputs and outputs, when run).", ""]
    return "\n".join(lines)


def steps_csv(rows: Sequence[StepRow]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["run", "native_iteration_id", "kind", "graph_mode", "prefill_requests",
                     "prefill_tokens", "prefill_kv_tokens", "decode_requests",
                     "decode_kv_tokens", "draft_tokens", "measured_ms",
                     *(f"{p}_{c}" for p in PREDICTORS
                       for c in ("ms", "how", "unpriced", "basis"))])
    for r in rows:
        s = r.step
        cells = [r.run, s.native_iteration_id, s.kind, s.graph_mode, s.prefill_requests,
                 s.prefill_tokens, s.prefill_kv_tokens, s.decode_requests, s.decode_kv_tokens,
                 s.draft_tokens, f"{1e3 * s.seconds:.6f}"]
        for p in PREDICTORS:
            priced = r.predictions.get(p)
            if priced is None:
                cells += ["", "", "", ""]
            elif priced.seconds is not None:
                cells += [f"{1e3 * priced.seconds:.6f}", priced.how or "", "",
                          priced.basis or ""]
            else:
                cells += ["", "", f"{priced.category}: {priced.detail}", priced.basis or ""]
        writer.writerow(cells)
    return buffer.getvalue()
