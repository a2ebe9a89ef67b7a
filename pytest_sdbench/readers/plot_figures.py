"""The pictures of `sdbench plot`, one matplotlib figure each (plot.py writes them and the
page):

- decode: the step time against the batch, one line per context (and acceptance length);
- prefill: the step time against the new tokens, one line per batch and cached prefix;
- mixed: the step time against the tokens the step scheduled (decode batch x (1+K) plus the
  prefills' new tokens), one line per decode batch;
- canary: the host canary's readings over the collection, in time order (before and after
  each round), so that a slow stretch of the host is seen beside the numbers;
- compare: the per-point change of a candidate's step time against a baseline's, with the
  noise `sdbench compare` judged it by, coloured by the gate's own verdict.

Each marker is a point's median retained step; its shape says how the step ran (graph
mode); where a point has more than one sample a bar spans the 95% confidence interval of
its median from their dispersion (across rounds, or back-to-back repeats where that was the
policy)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..wire.contract import (
    GRAPH_EAGER,
    GRAPH_FULL,
    GRAPH_PIECEWISE,
    PHASE_DECODE,
    PHASE_MIXED,
    PHASE_PREFILL,
    PHASES,
    PINNED_CONFIDENCE,
    REPEAT_BACK_TO_BACK,
)
from ..wire.model import Artifact, PointSummary
from ..wire.points import point_label
from ..wire.rounds import canary_readings
from .compare import (
    HOST_SLOWER,
    IMPROVED,
    MISSING_IN_BASELINE,
    MISSING_IN_CANDIDATE,
    NOISE_UNKNOWN,
    OK,
    REGRESSED,
    VERDICTS,
    Comparison,
)
from .describe import is_legacy
from .figures import distinct_colors, figure

MARKERS = {GRAPH_EAGER: "o", GRAPH_PIECEWISE: "s", GRAPH_FULL: "^"}
MIXED_MARKER = "X"   # a point whose repeats ran in more than one graph mode
# The comparison's colours, one per verdict of the gate (compare.VERDICTS): the figure says
# what `sdbench compare` says.
VERDICT_COLORS = {OK: "#7f8c8d", REGRESSED: "#c0392b", IMPROVED: "#2e86c1",
                  HOST_SLOWER: "#e67e22", NOISE_UNKNOWN: "#8e44ad",
                  MISSING_IN_BASELINE: "#000000", MISSING_IN_CANDIDATE: "#000000"}
assert set(VERDICT_COLORS) == set(VERDICTS), "a verdict of the gate without its colour"


# ---- the points, as the pictures and the table read them ----------------------------------

@dataclass(frozen=True)
class PlotPoint:
    phase: str
    point_index: int
    point: Any                     # PrefillPoint | DecodePoint | MixedPoint
    summary: PointSummary
    graph_modes: tuple[str, ...]   # every mode its retained steps ran in, in order

    @property
    def label(self) -> str:
        return point_label(self.point)

    @property
    def marker(self) -> str:
        return MARKERS.get(self.graph_modes[0], MIXED_MARKER) if len(self.graph_modes) == 1 \
            else MIXED_MARKER


def plot_points(artifact: Artifact) -> list[PlotPoint]:
    """Every measured point with its summary (a valid artifact has one per observed point;
    legacy ones are given theirs on upgrade)."""
    summaries: dict[tuple[str, int], PointSummary] = {(s.phase, s.point_index): s
                                                      for s in artifact.summaries}
    points = []
    for phase in PHASES:
        by_index: dict[int, list] = {}
        for o in getattr(artifact, phase):
            by_index.setdefault(o.point_index, []).append(o)
        for index, obs in sorted(by_index.items()):
            summary = summaries[(phase, index)]
            points.append(PlotPoint(phase, index, obs[0].point, summary,
                                    tuple(dict.fromkeys(o.graph_mode for o in obs))))
    return points


def _series(points: Sequence[PlotPoint], phase: str) -> dict[str, list[PlotPoint]]:
    """The points of one phase as lines: decode by context (and AL), prefill by batch and
    cached prefix, mixed by decode batch; each line ordered along its x axis."""
    lines: dict[str, list[PlotPoint]] = {}
    for p in points:
        if p.phase != phase:
            continue
        q = p.point
        if phase == PHASE_DECODE:
            al = "" if q.acceptance_length is None else f", AL {q.acceptance_length:g}"
            name = f"ctx {q.context_tokens}{al}"
        elif phase == PHASE_MIXED:
            name = f"decode batch {q.decode_batch_size}"
        else:
            name = f"B={q.batch_size}, prefix {q.cached_prefix_tokens}"
        lines.setdefault(name, []).append(p)
    x = _x_of(phase)
    return {name: sorted(line, key=x) for name, line in lines.items()}


def _x_of(phase: str):
    if phase == PHASE_DECODE:
        return lambda p: p.point.batch_size
    if phase == PHASE_MIXED:   # the step's tokens: B_d * (1 + K) + B_p * new tokens
        return lambda p: p.point.scheduled_tokens
    return lambda p: p.point.new_tokens


X_LABELS = {PHASE_DECODE: "batch (requests)", PHASE_PREFILL: "new tokens a request",
            PHASE_MIXED: "tokens the step scheduled: decode batch x (1+K) + the prefills' "
                         "new tokens"}


# ---- figures ------------------------------------------------------------------------------

def _x_axis(ax, xs: Sequence[float]) -> None:
    """Ticks at the measured values (batches and token counts are integers); a log2 axis
    when they span 8x or more."""
    if xs and min(xs) > 0 and max(xs) / min(xs) >= 8:
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
    ticks = sorted(set(xs))
    ax.set_xticks(ticks, _tick_labels(ticks, log=ax.get_xscale() == "log"),
                  fontsize=8 if len(ticks) > 8 else None)


def _tick_labels(ticks: Sequence[float], log: bool) -> list[str]:
    """A label at each measured value, but none crowding the last one written: C+1 beside a
    captured batch C (16 and 17) would print as one number ("1617") on a log axis."""
    labels, last = [], None
    for t in ticks:
        crowded = log and last is not None and t / last < 1.15
        labels.append("" if crowded else f"{t:g}")
        last = last if crowded else t
    return labels


def ci_of_median(summary: PointSummary) -> tuple[float, float] | None:
    """The confidence interval of a point's median in ms, (low, high), from the
    dispersion of its samples (wire.rounds.median_half_width); None for one sample."""
    if summary.median_half_width is None:
        return None
    median, half = 1e3 * summary.median_seconds, summary.median_half_width
    return max(0.0, median * (1 - half)), median * (1 + half)


def bar_label(artifact: Artifact) -> str:
    """What a point's bar spans, for the legend: its dispersion across rounds, or across
    back-to-back repeats (which understate the host's noise)."""
    across = ("back-to-back repeats" if is_legacy(artifact) or
              artifact.measurement_policy.repeat_order == REPEAT_BACK_TO_BACK else "rounds")
    return f"bar: {PINNED_CONFIDENCE:.0%} CI of the median, across {across}"


def phase_figure(points: Sequence[PlotPoint], phase: str, title: str,
                 bars: str = "bar: CI of the median"):
    """Step time (ms) against batch (decode), new tokens (prefill) or the step's scheduled
    tokens (mixed), one line per series, each point's CI of the median a bar (`bars` names
    it in the legend); None when the artifact has no point of that phase."""
    lines = _series(points, phase)
    if not lines:
        return None
    fig = figure()
    ax = fig.add_subplot()
    x_of = _x_of(phase)
    xs: list[float] = []
    for (name, line), color in zip(lines.items(), distinct_colors(len(lines)), strict=True):
        x = [x_of(p) for p in line]
        y = [1e3 * p.summary.median_seconds for p in line]
        xs.extend(x)
        ax.plot(x, y, "-", linewidth=1.2, alpha=0.8, label=name, color=color)
        for p, px, py in zip(line, x, y, strict=True):
            ax.plot([px], [py], p.marker, color=color, markersize=7,
                    markeredgecolor="black", markeredgewidth=0.5)
            ci = ci_of_median(p.summary)
            if ci is not None:   # the dispersion of its samples: the CI of the median
                ax.errorbar([px], [py], yerr=[[py - ci[0]], [ci[1] - py]],
                            fmt="none", ecolor=color, capsize=4, linewidth=1)
    _x_axis(ax, xs)
    ax.set_xlabel(X_LABELS[phase])
    ax.set_ylabel("step time, median of the retained steps (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(title, fontsize=10)
    # both legends outside the axes, on the right: no point is ever hidden under one
    fig.legend(*ax.get_legend_handles_labels(), title="line", fontsize=8, title_fontsize=8,
               loc="outside right upper")
    fig.legend(handles=_mode_handles(points, phase, bars), title="marker: graph mode",
               fontsize=8, title_fontsize=8, loc="outside right lower")
    return fig


def _mode_handles(points: Sequence[PlotPoint], phase: str, bars: str):
    from matplotlib.lines import Line2D
    shown = dict.fromkeys(p.marker for p in points if p.phase == phase)
    names = {marker: mode for mode, marker in MARKERS.items()} | {MIXED_MARKER: "mixed"}
    handles = [Line2D([], [], linestyle="none", marker=m, color="grey", markeredgecolor="black",
                      label=names[m]) for m in shown]
    if any(ci_of_median(p.summary) for p in points if p.phase == phase):
        handles.append(Line2D([], [], color="grey", marker="|", markersize=10, label=bars))
    return handles


def canary_figure(artifact: Artifact, title: str):
    """The host canary's readings in time order (before and after each round), per
    workload, with the rounds marked; None without a reading (a legacy artifact)."""
    readings = [(r.index, when, sample) for r in artifact.rounds
                for when, sample in (("before", r.canary_before), ("after", r.canary_after))
                if sample is not None]
    if not readings:
        return None
    assert len(readings) == len(canary_readings(artifact.rounds))
    workloads = [("python loop", [1e3 * s.python_seconds for _, _, s in readings])]
    if all(s.launch_seconds is not None for _, _, s in readings):
        workloads.append(("kernel launches", [1e3 * (s.launch_seconds or 0.0)
                                              for _, _, s in readings]))
    fig = figure(9.0, 2.0 + 1.8 * len(workloads))
    axes = fig.subplots(len(workloads), 1, sharex=True, squeeze=False)[:, 0]
    x = list(range(len(readings)))
    for ax, (name, ms) in zip(axes, workloads, strict=True):
        ax.plot(x, ms, "o-", color="#34495e", markersize=4, linewidth=1)
        ax.set_ylabel(f"{name} (ms)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        for i, (index, when, _) in enumerate(readings):
            if when == "before" and index > 0:
                ax.axvline(i - 0.5, color="grey", linewidth=0.6, alpha=0.6)
    rounds = sorted({index for index, _, _ in readings})
    axes[-1].set_xticks([x[[i for i, _, _ in readings].index(r)] for r in rounds],
                        [f"round {r}" for r in rounds], fontsize=8 if len(rounds) > 8 else None)
    axes[-1].set_xlabel("canary readings in time order: before and after each round")
    axes[0].set_title(title, fontsize=10)
    return fig


def compare_figure(result: Comparison, title: str):
    """Per-point change of the candidate's median step time against the baseline's, a bar
    each, coloured by the gate's verdict; the whisker spans the change +- the noise the gate
    judged it by, stopped at -100% (a point whose whisker stays right of 0 is slower beyond
    its noise), and the candidate host's slowdown, when the canaries say it ran slower, is
    shaded; the legend is below the axes."""
    from matplotlib.patches import Patch
    rows = [p for p in result.points if p.change_pct is not None]
    fig = figure(8.0, max(3.0, 0.28 * len(rows) + 2.0))
    ax = fig.add_subplot()
    y = list(range(len(rows)))
    values = [p.change_pct or 0.0 for p in rows]
    ax.barh(y, values, color=[VERDICT_COLORS[p.verdict] for p in rows])
    for i, p in enumerate(rows):
        if p.noise_pct is not None:
            # a step time cannot fall by more than 100%: the whisker stops at -100%
            below = max(0.0, min(p.noise_pct, values[i] + 100.0))
            ax.errorbar([values[i]], [i], xerr=[[below], [p.noise_pct]], fmt="none",
                        ecolor="black", capsize=3, linewidth=0.8)
    slowdown = result.host.slowdown_pct
    if slowdown > 0:
        ax.axvspan(0, slowdown, color=VERDICT_COLORS[HOST_SLOWER], alpha=0.15)
    ax.set_yticks(y, [f"{p.phase} {p.coordinates}" for p in rows], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("change of the median step time, candidate vs baseline (%; right: slower; "
                  "whisker: +- the point's noise)", fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(title, fontsize=10)
    shown = dict.fromkeys(p.verdict for p in rows)
    handles = [Patch(color=VERDICT_COLORS[v], label=v) for v in shown]
    if slowdown > 0:
        handles.append(Patch(color=VERDICT_COLORS[HOST_SLOWER], alpha=0.15,
                             label=f"host slower {slowdown:+.1f}%"))
    # below the axes, in one row: clear of the title and of every bar
    fig.legend(handles=handles, title="verdict of sdbench compare", fontsize=8,
               title_fontsize=8, loc="outside lower center", ncols=len(handles))
    return fig
