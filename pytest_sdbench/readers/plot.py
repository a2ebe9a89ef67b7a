"""Pictures of artifacts, for a person: PNG files and one self-contained HTML page (the PNGs
embedded as base64, with a table of every point).

- decode: the step time against the batch, one line per context (and acceptance length);
- prefill: the step time against the new tokens, one line per batch and cached prefix;
- mixed: the step time against the tokens the step scheduled, one line per decode batch
  (only where the artifact holds mixed points);
- canary: the host canary's readings over the collection, in time order (before and after
  each round), so that a slow stretch of the host is seen beside the numbers;
- compare: the per-point change of a candidate's step time against a baseline's, with the
  noise `sdbench compare` judged it by, coloured by the gate's own verdict.

Each marker is a point's median retained step; its shape says how the step ran (graph
mode); where a point has more than one sample a bar spans the 95% confidence interval of
its median from their dispersion (across rounds, or back-to-back repeats where that was the
policy; the page states which).

The figures are plot_figures.py's; this module writes them and the page. matplotlib is an
optional dependency, imported only when drawing (figures.py)."""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..wire.contract import PHASE_DECODE, PHASE_MIXED, PHASE_PREFILL
from ..wire.files import atomic_write_bytes, atomic_write_text
from ..wire.model import Artifact
from .beside import reports_beside
from .compare import COLUMNS, Comparison
from .compare import compare as judge
from .compare_render import LABELS, cell, noise_rule
from .describe import (
    SUMMARY_COLUMNS,
    SUMMARY_NOTE,
    canary_line,
    placement_line,
    policy_line,
    repeat_policy,
)
from .figures import png_bytes, require_matplotlib
from .plot_figures import (
    PlotPoint,
    bar_label,
    canary_figure,
    compare_figure,
    phase_figure,
    plot_points,
)

PAGE_NAME = "sdbench-plots.html"
LEFT = ' class="l"'   # a left-aligned table cell (text); numbers align right


# ---- files --------------------------------------------------------------------------------

@dataclass
class Page:
    """The HTML page being assembled: sections of a heading, images and a table."""
    parts: list[str]

    def section(self, heading: str, text: str | Sequence[str],
                images: Sequence[tuple[str, bytes]], table: str) -> None:
        said = [text] if isinstance(text, str) else list(text)
        self.parts.append(f"<h2>{html.escape(heading)}</h2>" +
                          "".join(f"<p>{html.escape(t)}</p>" for t in said))
        for name, data in images:
            encoded = base64.b64encode(data).decode("ascii")
            self.parts.append(f'<figure><img alt="{html.escape(name)}" '
                              f'src="data:image/png;base64,{encoded}">'
                              f"<figcaption>{html.escape(name)}</figcaption></figure>")
        self.parts.append(table)

    def links(self, text: str, out: Path, targets: Sequence[Path]) -> None:
        """A line of links to files beside the page (relative to its folder)."""
        if targets:
            anchors = ", ".join(f'<a href="{html.escape(os.path.relpath(t, out))}">'
                                f"{html.escape(t.parent.name)}/{html.escape(t.name)}</a>"
                                for t in targets)
            self.parts.append(f"<p>{html.escape(text)}: {anchors}</p>")

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


def _describe(artifact: Artifact) -> list[str]:
    """What the page says of an artifact: what ran, how it repeated (the policy), which
    steps it retained and how many ran while the GPU's clock was capped, the host canary
    over the collection and where its threads ran."""
    ident = artifact.identity
    env = artifact.environment
    return [f"mode {artifact.mode}, status {artifact.status}, {artifact.coverage.completed}/"
            f"{artifact.coverage.expected} points, device {artifact.device} "
            f"({ident.device_name.value}), vLLM {ident.engine_version.value}, "
            f"K={artifact.speculative.draft_depth}, schema v{artifact.schema_version}, run "
            f"{artifact.run_id}",
            repeat_policy(artifact), policy_line(artifact), canary_line(artifact.host_canary),
            placement_line(None if env is None else env.cpu_placement)]


def _points_table(points: Sequence[PlotPoint]) -> str:
    rows = [(f"{p.phase}[{p.point_index}]", p.label, "/".join(p.graph_modes),
             *(c.cell(p.summary) for c in SUMMARY_COLUMNS)) for p in points]
    return _table(("point", "coordinates", "graph mode", *(c.label for c in SUMMARY_COLUMNS)),
                  rows, left=3) + f"<p>{html.escape(SUMMARY_NOTE)}</p>"


def _compare_table(result: Comparison) -> str:
    """The gate's rows, with the gate's own columns (compare.COLUMNS)."""
    return _table([LABELS[c] for c in COLUMNS],
                  [[cell(p, c) for c in COLUMNS] for p in result.points])


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
        path = atomic_write_bytes(out / name, data)   # a link at the name is replaced
        written.append(path)
        return name, data
    for stem, (path, artifact) in zip(_unique_stems([p for p, _ in artifacts]), artifacts,
                                      strict=True):
        points = plot_points(artifact)
        images = []
        for phase in (PHASE_DECODE, PHASE_PREFILL, PHASE_MIXED):
            fig = phase_figure(points, phase, f"{Path(path).name}: {phase} "
                               f"({artifact.device}, K={artifact.speculative.draft_depth})",
                               bar_label(artifact))
            if fig is not None:
                images.append(save(f"{stem}-{phase}.png", fig))
        fig = canary_figure(artifact, f"{Path(path).name}: host canary")
        if fig is not None:
            images.append(save(f"{stem}-canary.png", fig))
        page.section(str(path), _describe(artifact), images, _points_table(points))
        page.links("fidelity reports of this profile (`sdbench fidelity`)", out,
                   reports_beside(path))
    if pair is not None:
        (base_path, base), (cand_path, cand) = pair
        result = judge(base, cand, base_name=str(base_path), cand_name=str(cand_path))
        base_stem, cand_stem = _unique_stems([base_path, cand_path])
        # the candidate first in the title, the file name and the heading alike
        name = f"compare-{cand_stem}-vs-{base_stem}"
        fig = compare_figure(result, f"{Path(cand_path).name} vs {Path(base_path).name} "
                             f"(baseline): gate {'FAIL' if result.failed else 'PASS'}")
        page.section(f"compare: {cand_path} vs {base_path} (baseline)",
                     [result.host.line(), *noise_rule(result), *(
                         f"problem: {p}" for p in result.problems), result.verdict_line()],
                     [save(f"{name}.png", fig)], _compare_table(result))
    written.append(atomic_write_text(out / page_name, page.render()))
    return written


def plot_beside(path: str | Path, artifact: Artifact) -> list[Path]:
    """The plots of one artifact beside it: <stem>-decode.png, <stem>-prefill.png (and
    <stem>-mixed.png where it holds mixed points) and <stem>.html in the artifact's
    folder."""
    path = Path(path)
    return write_plots([(path, artifact)], path.parent,
                       page_name=f"{path.name.removesuffix('.json')}.html")
