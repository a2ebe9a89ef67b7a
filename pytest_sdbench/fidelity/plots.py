"""The report's pictures (matplotlib, optional; through plot.py's object-API helpers):
each step's predicted time against its measured one (log-log, by step kind, the identity
line and +-10%), the histogram of the signed errors, and the end-to-end table."""

from __future__ import annotations

from collections.abc import Sequence

from ..readers.figures import distinct_colors, figure, png_bytes
from .report import E2E_METRICS, PREDICTORS, StepRow, e2e_value
from .serving_records import STEP_KINDS

ERROR_RANGE = 0.5     # the histogram spans -50%..+50%; steps beyond are counted in its legend


def _present(rows: Sequence[StepRow]) -> list[str]:
    return [p for p in PREDICTORS if any(p in r.predictions for r in rows)]


def steps_figure(rows: Sequence[StepRow], title: str):
    predictors = _present(rows)
    fig = figure(5.5 * len(predictors), 5.0)
    colors = dict(zip(STEP_KINDS, distinct_colors(len(STEP_KINDS)), strict=True))
    for i, predictor in enumerate(predictors):
        ax = fig.add_subplot(1, len(predictors), i + 1)
        values: list[float] = []
        for kind in STEP_KINDS:
            pairs = [(1e3 * r.step.seconds, 1e3 * p.seconds) for r in rows
                     if r.step.kind == kind and (p := r.predictions.get(predictor)) is not None
                     and p.seconds is not None]
            if pairs:
                xs, ys = zip(*pairs, strict=True)
                values += [*xs, *ys]
                ax.scatter(xs, ys, s=8, alpha=0.5, color=colors[kind],
                           label=f"{kind} ({len(pairs)})")
        if values:
            low, high = min(values) / 1.2, max(values) * 1.2
            ax.plot([low, high], [low, high], "-", color="black", linewidth=1, label="identity")
            for factor, style in ((1.1, "--"), (0.9, "--")):
                ax.plot([low, high], [low * factor, high * factor], style, color="grey",
                        linewidth=0.8)
            ax.set_xlim(low, high)
            ax.set_ylim(low, high)
        _log_axes(ax)
        ax.set_xlabel("measured step time (ms)")
        ax.set_ylabel(f"predicted by {predictor} (ms)")
        ax.set_title(f"{predictor}: dashed lines +-10%", fontsize=9)
        ax.grid(True, which="both", alpha=0.2)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def _log_axes(ax) -> None:
    """Log-log, labelled with plain numbers at 1, 2, 5 x 10^n (more labels crowd)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    for axis, scale in ((ax.xaxis, ax.set_xscale), (ax.yaxis, ax.set_yscale)):
        scale("log")
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.set_minor_formatter(NullFormatter())


def errors_figure(rows: Sequence[StepRow], title: str):
    predictors = _present(rows)
    fig = figure(5.5 * len(predictors), 4.0)
    colors = dict(zip(STEP_KINDS, distinct_colors(len(STEP_KINDS)), strict=True))
    bins = [ERROR_RANGE * (i / 25 - 1) for i in range(51)]
    for i, predictor in enumerate(predictors):
        ax = fig.add_subplot(1, len(predictors), i + 1)
        for kind in STEP_KINDS:
            errors = [e for r in rows if r.step.kind == kind
                      and (e := r.error(predictor)) is not None]
            if not errors:
                continue
            outside = sum(abs(e) > ERROR_RANGE for e in errors)
            ax.hist([100 * max(-ERROR_RANGE, min(ERROR_RANGE, e)) for e in errors],
                    bins=[100 * b for b in bins], alpha=0.55, color=colors[kind],
                    label=f"{kind} ({len(errors)}"
                          + (f", {outside} beyond +-{100 * ERROR_RANGE:g}%)" if outside
                             else ")"))
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_xlabel("predicted / measured - 1 (%)")
        ax.set_ylabel("steps")
        ax.set_title(predictor, fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def e2e_figure(figures: dict, title: str):
    runs = figures["runs"]
    fig = figure(8.0, 0.5 + 2.9 * len(runs))
    for i, run in enumerate(runs):
        ax = fig.add_subplot(len(runs), 1, i + 1)
        ax.axis("off")
        e2e = run["end_to_end"]
        predicted, errors = e2e.get("predicted"), e2e.get("relative_error") or {}
        cells = []
        for metric, stat, label in E2E_METRICS:
            key = metric if stat is None else f"{metric}_{stat.removesuffix('_ms')}"
            m = e2e_value(e2e["measured"], metric, stat)
            p = e2e_value(predicted, metric, stat) if predicted else None
            e = errors.get(key)
            cells.append([label, "-" if m is None else f"{m:.2f}",
                          "-" if p is None else f"{p:.2f}",
                          "-" if e is None else f"{100 * e:+.1f}%"])
        table = ax.table(cellText=cells, colLabels=["metric", "measured", "AISimulate",
                                                    "error"], loc="center", cellLoc="right")
        table.auto_set_font_size(False)
        table.set_fontsize(8)
        note = "" if predicted else (" (AISimulate: " + str(e2e.get("predict_error") or
                                                             "not run") + ")")[:120]
        ax.set_title(f"{run['label']}{note}", fontsize=9)
    fig.suptitle(title, fontsize=10)
    return fig


def draw(figures: dict, rows: Sequence[StepRow]) -> dict[str, bytes]:
    """The three PNGs, by file name."""
    from .report import FIGURES
    name = figures["profile"]["model"]
    return {FIGURES[0]: png_bytes(steps_figure(rows, f"{name}: each step, predicted vs "
                                                     "measured")),
            FIGURES[1]: png_bytes(errors_figure(rows, f"{name}: step errors")),
            FIGURES[2]: png_bytes(e2e_figure(figures, f"{name}: end to end"))}
