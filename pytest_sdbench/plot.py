"""Pictures of artifacts, for a person: PNG files and one self-contained HTML page (the PNGs
embedded as base64, with a table of every point).

- decode: the step time against the batch, one line per context (and acceptance length);
- prefill: the step time against the new tokens, one line per batch and cached prefix;
- compare: the per-point change of a candidate's step time against a baseline's, each bar
  coloured by the verdict `sdbench compare` gives the point (compare.py).

Each marker is a point's median retained step; its shape says how the step ran (graph
mode); where a point was measured more than once (repeats) a bar spans its min..max.

matplotlib is an optional dependency (``pip install 'pytest-sdbench[plot]'``), imported
only here and only when drawing; it draws with its Agg backend through the object API, so
no global pyplot state is touched."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .compare import IMPROVED, OK, REGRESSED, Comparison, PointChange, compare, coordinates
from .files import atomic_write_text
from .wire.contract import GRAPH_EAGER, GRAPH_FULL, GRAPH_PIECEWISE, PHASE_DECODE, PHASE_PREFILL
from .wire.model import Artifact, PointSummary, summarize

MARKERS = {GRAPH_EAGER: "o", GRAPH_PIECEWISE: "s", GRAPH_FULL: "^"}
MIXED_MARKER = "X"   # a point whose repeats ran in more than one graph mode
PAGE_NAME = "sdbench-plots.html"
LEFT = ' class="l"'   # a left-aligned table cell (text); numbers align right


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def require_matplotlib():
    """The matplotlib module, or PlotUnavailable with the one line to act on."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable("drawing needs matplotlib, which is not installed: "
                              "pip install 'pytest-sdbench[plot]'") from None
    return matplotlib


# ---- the points, as the pictures and the table read them ----------------------------------

@dataclass(frozen=True)
class PlotPoint:
    phase: str
    point_index: int
    point: Any                     # PrefillPoint | DecodePoint
    summary: PointSummary
    graph_modes: tuple[str, ...]   # every mode its retained steps ran in, in order

    @property
    def label(self) -> str:
        p = self.point
        if self.phase == PHASE_PREFILL:
            return f"B={p.batch_size} new={p.new_tokens} prefix={p.cached_prefix_tokens}"
        al = "natural" if p.acceptance_length is None else f"{p.acceptance_length:g}"
        return f"B={p.batch_size} ctx={p.context_tokens} K={p.draft_depth} AL={al}"

    @property
    def marker(self) -> str:
        return MARKERS.get(self.graph_modes[0], MIXED_MARKER) if len(self.graph_modes) == 1 \
            else MIXED_MARKER


def plot_points(artifact: Artifact) -> list[PlotPoint]:
    """Every measured point with its summary (the artifact's, or one computed from its
    observations when it carries none)."""
    summaries = {(s.phase, s.point_index): s for s in artifact.summaries}
    points = []
    for phase, observations in ((PHASE_PREFILL, artifact.prefill),
                                (PHASE_DECODE, artifact.decode)):
        by_index: dict[int, list] = {}
        for o in observations:
            by_index.setdefault(o.point_index, []).append(o)
        for index, obs in sorted(by_index.items()):
            summary = summaries.get((phase, index)) or summarize(
                phase, index, [o.timing.seconds for o in obs])
            points.append(PlotPoint(phase, index, obs[0].point, summary,
                                    tuple(dict.fromkeys(o.graph_mode for o in obs))))
    return points


def _series(points: Sequence[PlotPoint], phase: str) -> dict[str, list[PlotPoint]]:
    """The points of one phase as lines: decode by context (and AL), prefill by batch and
    cached prefix; each line ordered along its x axis."""
    lines: dict[str, list[PlotPoint]] = {}
    for p in points:
        if p.phase != phase:
            continue
        q = p.point
        if phase == PHASE_DECODE:
            al = "" if q.acceptance_length is None else f", AL {q.acceptance_length:g}"
            name = f"ctx {q.context_tokens}{al}"
        else:
            name = f"B={q.batch_size}, prefix {q.cached_prefix_tokens}"
        lines.setdefault(name, []).append(p)
    x = _x_of(phase)
    return {name: sorted(line, key=x) for name, line in lines.items()}


def _x_of(phase: str):
    if phase == PHASE_DECODE:
        return lambda p: p.point.batch_size
    return lambda p: p.point.new_tokens


# ---- figures ------------------------------------------------------------------------------

def _figure(width: float = 9.0, height: float = 5.0):
    require_matplotlib()
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


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


def _colors(n: int) -> list:
    """n distinct colours: matplotlib's default cycle repeats after 10, and two series of
    one colour cannot be told apart in the legend."""
    from matplotlib import colormaps
    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["turbo"](i / (n - 1)) for i in range(n)]


def phase_figure(points: Sequence[PlotPoint], phase: str, title: str):
    """Step time (ms) against batch (decode) or new tokens (prefill), one line per series;
    None when the artifact has no point of that phase."""
    lines = _series(points, phase)
    if not lines:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    x_of = _x_of(phase)
    xs: list[float] = []
    for (name, line), color in zip(lines.items(), _colors(len(lines)), strict=True):
        x = [x_of(p) for p in line]
        y = [1e3 * p.summary.median_seconds for p in line]
        xs.extend(x)
        ax.plot(x, y, "-", linewidth=1.2, alpha=0.8, label=name, color=color)
        for p, px, py in zip(line, x, y, strict=True):
            ax.plot([px], [py], p.marker, color=color, markersize=7,
                    markeredgecolor="black", markeredgewidth=0.5)
            if p.summary.samples > 1:   # dispersion of the repeats: min..max
                ax.errorbar([px], [py], yerr=[[py - 1e3 * p.summary.min_seconds],
                                              [1e3 * p.summary.max_seconds - py]],
                            fmt="none", ecolor=color, capsize=4, linewidth=1)
    _x_axis(ax, xs)
    ax.set_xlabel("batch (requests)" if phase == PHASE_DECODE else "new tokens a request")
    ax.set_ylabel("step time, median of the retained steps (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(title, fontsize=10)
    # both legends outside the axes, on the right: no point is ever hidden under one
    fig.legend(*ax.get_legend_handles_labels(), title="line", fontsize=8, title_fontsize=8,
               loc="outside right upper")
    fig.legend(handles=_mode_handles(points, phase), title="marker: graph mode", fontsize=8,
               title_fontsize=8, loc="outside right lower")
    return fig


def _mode_handles(points: Sequence[PlotPoint], phase: str):
    from matplotlib.lines import Line2D
    shown = dict.fromkeys(p.marker for p in points if p.phase == phase)
    names = {marker: mode for mode, marker in MARKERS.items()} | {MIXED_MARKER: "mixed"}
    handles = [Line2D([], [], linestyle="none", marker=m, color="grey", markeredgecolor="black",
                      label=names[m]) for m in shown]
    if any(p.summary.samples > 1 for p in points if p.phase == phase):
        handles.append(Line2D([], [], color="grey", marker="|", markersize=10,
                              label="bar: min..max of repeats"))
    return handles


@dataclass(frozen=True)
class Change:
    """One point measured in both artifacts."""
    base: PlotPoint
    cand: PlotPoint

    @property
    def change(self) -> float:
        return self.cand.summary.median_seconds / self.base.summary.median_seconds - 1


def changes(base: Artifact, cand: Artifact) -> list[Change]:
    """The points of the same grid measured in both, matched by phase and index."""
    if base.integrity.grid_digest != cand.integrity.grid_digest:
        raise ValueError("the two artifacts were collected on different grids "
                         f"({base.integrity.grid_digest} vs {cand.integrity.grid_digest})")
    later = {(p.phase, p.point_index): p for p in plot_points(cand)}
    return [Change(p, later[(p.phase, p.point_index)]) for p in plot_points(base)
            if (p.phase, p.point_index) in later]


# The gate's verdicts (compare.py), as the comparison figure colours them.
VERDICT_COLORS = {REGRESSED: "#c0392b", IMPROVED: "#2e86c1", OK: "#b3b3b3"}
VERDICT_LABELS = {REGRESSED: "regressed (slower beyond its noise)",
                  IMPROVED: "improved (faster beyond its noise)", OK: "within its noise"}


@dataclass(frozen=True)
class Judged:
    """A point measured in both artifacts, with the gate's own verdict on it."""
    row: Change
    verdict: PointChange


def judged(rows: Sequence[Change], gate: Comparison) -> list[Judged]:
    """Each row with `sdbench compare`'s verdict on its point (matched by coordinates, as
    the gate matches them)."""
    by_point = {(p.phase, p.coordinates): p for p in gate.points}
    return [Judged(r, by_point[(r.base.phase, coordinates(r.base.phase, r.base.point))])
            for r in rows]


def compare_figure(rows: Sequence[Judged], title: str):
    """Per-point change of the candidate's median step time against the baseline's, each
    bar coloured by the gate's verdict on the point (not by its sign: a +3% point within
    its noise is no regression), with the point's noise as a whisker around zero."""
    from matplotlib.patches import Patch
    fig = _figure(8.0, max(3.0, 0.28 * len(rows) + 2.0))
    ax = fig.add_subplot()
    values = [100 * j.row.change for j in rows]
    y = list(range(len(rows)))
    ax.barh(y, values, color=[VERDICT_COLORS[j.verdict.verdict] for j in rows])
    noise = [j.verdict.noise_pct or 0.0 for j in rows]
    ax.errorbar([0.0] * len(rows), y, xerr=noise, fmt="none", ecolor="black", alpha=0.35,
                capsize=2, linewidth=0.8)
    ax.set_yticks(y, [f"{j.row.base.phase}[{j.row.base.point_index}] {j.row.base.label}"
                      for j in rows], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("median step time, candidate vs baseline (% change; right: slower)\n"
                  "whisker: the point's noise, as the gate judges it", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(title, fontsize=10)
    shown = dict.fromkeys(j.verdict.verdict for j in rows)
    fig.legend(handles=[Patch(color=VERDICT_COLORS[v], label=VERDICT_LABELS[v]) for v in shown],
               title="the gate's verdict (sdbench compare)", fontsize=8, title_fontsize=8,
               loc="outside lower center")
    return fig


def png_bytes(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    canvas.print_png(buffer)
    return buffer.getvalue()


# ---- files --------------------------------------------------------------------------------

@dataclass
class Page:
    """The HTML page being assembled: sections of a heading, images and a table."""
    parts: list[str]

    def section(self, heading: str, text: str, images: Sequence[tuple[str, bytes]],
                table: str) -> None:
        self.parts.append(f"<h2>{html.escape(heading)}</h2><p>{html.escape(text)}</p>")
        for name, data in images:
            encoded = base64.b64encode(data).decode("ascii")
            self.parts.append(f'<figure><img alt="{html.escape(name)}" '
                              f'src="data:image/png;base64,{encoded}">'
                              f"<figcaption>{html.escape(name)}</figcaption></figure>")
        self.parts.append(table)

    def render(self) -> str:
        style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;"
                 "font-size:0.85em}td,th{border:1px solid #ccc;padding:2px 6px;"
                 "text-align:right}td.l,th.l{text-align:left}img{max-width:100%}")
        return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>sdbench plots"
                f"</title><style>{style}</style></head><body><h1>sdbench plots</h1>"
                + "".join(self.parts) + "</body></html>\n")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 2) -> str:
    def cells(tag, values):
        return "".join(f"<{tag}{LEFT if i < left else ''}>{html.escape(v)}</{tag}>"
                       for i, v in enumerate(values))
    body = "".join(f"<tr>{cells('td', r)}</tr>" for r in rows)
    return f"<table><tr>{cells('th', header)}</tr>{body}</table>"


def _describe(artifact: Artifact) -> str:
    ident = artifact.identity
    return (f"mode {artifact.mode}, status {artifact.status}, {artifact.coverage.completed}/"
            f"{artifact.coverage.expected} points, device {artifact.device} "
            f"({ident.device_name.value}), vLLM {ident.engine_version.value}, "
            f"K={artifact.speculative.draft_depth}, repeats "
            f"{artifact.measurement_policy.repeats}, schema v{artifact.schema_version}, run "
            f"{artifact.run_id}")


def _points_table(points: Sequence[PlotPoint]) -> str:
    rows = [(f"{p.phase}[{p.point_index}]", p.label, "/".join(p.graph_modes),
             f"{1e3 * p.summary.median_seconds:.3f}", f"{1e3 * p.summary.min_seconds:.3f}",
             f"{1e3 * p.summary.max_seconds:.3f}", f"{100 * p.summary.cv:.2f}",
             str(p.summary.samples)) for p in points]
    return _table(("point", "coordinates", "graph mode", "median ms", "min ms", "max ms",
                   "CV %", "samples"), rows, left=3)


def _unique_stems(paths: Sequence[str | Path]) -> list[str]:
    stems: list[str] = []
    for path in paths:
        stem = Path(path).name.removesuffix(".json")
        stems.append(stem if stem not in stems else f"{stem}-{len(stems)}")
    return stems


def write_plots(artifacts: Sequence[tuple[str | Path, Artifact]], out_dir: str | Path,
                pair: tuple[tuple[str | Path, Artifact], tuple[str | Path, Artifact]]
                | None = None, page_name: str = PAGE_NAME) -> list[Path]:
    """Draw each artifact (and the comparison of a (baseline, candidate) pair), write the
    PNGs and one HTML page into out_dir; the written paths, the page last."""
    require_matplotlib()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    page, written = Page([]), []

    def save(name: str, fig) -> tuple[str, bytes]:
        data = png_bytes(fig)
        path = out / name
        path.write_bytes(data)
        written.append(path)
        return name, data
    for stem, (path, artifact) in zip(_unique_stems([p for p, _ in artifacts]), artifacts,
                                      strict=True):
        points = plot_points(artifact)
        images = []
        for phase in (PHASE_DECODE, PHASE_PREFILL):
            fig = phase_figure(points, phase, f"{Path(path).name}: {phase} "
                               f"({artifact.device}, K={artifact.speculative.draft_depth})")
            if fig is not None:
                images.append(save(f"{stem}-{phase}.png", fig))
        page.section(str(path), _describe(artifact), images, _points_table(points))
    if pair is not None:
        (base_path, base), (cand_path, cand) = pair
        rows = changes(base, cand)
        gate = compare(base, cand, base_name=str(base_path), cand_name=str(cand_path))
        marked = judged(rows, gate)
        base_stem, cand_stem = _unique_stems([base_path, cand_path])
        # the candidate first in the title, the file name and the heading alike
        name = f"compare-{cand_stem}-vs-{base_stem}"
        fig = compare_figure(marked, f"{Path(cand_path).name} vs {Path(base_path).name} "
                             f"(baseline): gate {'FAIL' if gate.failed else 'PASS'}")
        table = _table(("point", "coordinates", "base ms", "cand ms", "change %", "noise %",
                        "verdict"),
                       [(f"{j.row.base.phase}[{j.row.base.point_index}]", j.row.base.label,
                         f"{1e3 * j.row.base.summary.median_seconds:.3f}",
                         f"{1e3 * j.row.cand.summary.median_seconds:.3f}",
                         f"{100 * j.row.change:+.1f}", f"{j.verdict.noise_pct or 0:.1f}",
                         j.verdict.verdict) for j in marked])
        page.section(f"compare: {cand_path} vs {base_path} (baseline)",
                     f"{len(rows)} points in both; per-point change of the median step time, "
                     f"coloured by the verdict of `sdbench compare` with its default rule "
                     f"({gate.verdict_line()})", [save(f"{name}.png", fig)], table)
    written.append(atomic_write_text(out / page_name, page.render()))
    return written


def plot_beside(path: str | Path, artifact: Artifact) -> list[Path]:
    """The plots of one artifact beside it: <stem>-decode.png, <stem>-prefill.png and
    <stem>.html in the artifact's folder."""
    path = Path(path)
    return write_plots([(path, artifact)], path.parent,
                       page_name=f"{path.name.removesuffix('.json')}.html")
