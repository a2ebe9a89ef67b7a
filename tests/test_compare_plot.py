"""The compare plot (issue 38 item 6, small items): its legend clears the title and the
axes, and no whisker runs below -100% (a step time cannot fall by more than all of it)."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_sdbench.readers.compare import compare
from pytest_sdbench.readers.plot_figures import compare_figure

from .test_compare import _controlled

LONG_TITLE = ("sdbench-agg-k3-candidate-with-a-long-name.json vs "
              "sdbench-agg-k3-baseline-with-a-long-name.json (5 vs 5 rounds)")


def _drawn(result):
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    fig = compare_figure(result, LONG_TITLE)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return fig, canvas.get_renderer()


def _whisker_spans(ax) -> list[tuple[float, float]]:
    spans = []
    for container in ax.containers:
        if type(container).__name__ == "ErrorbarContainer":
            (segments,) = container.lines[2]
            (((x0, _), (x1, _)),) = segments.get_segments()
            spans.append((min(x0, x1), max(x0, x1)))
    return spans


def test_a_whisker_stops_at_minus_100_percent():
    result = compare(_controlled(), _controlled(scale=0.1, where=lambda phase, i: i == 0))
    first = result.points[0]
    assert first.change_pct == pytest.approx(-90.0, abs=0.5)
    result.points[0] = dataclasses.replace(first, noise_pct=40.0)   # noise beyond -100%
    fig, _ = _drawn(result)
    spans = _whisker_spans(fig.axes[0])
    assert len(spans) == len([p for p in result.points if p.noise_pct is not None])
    low, high = spans[0]
    assert low == pytest.approx(-100.0)                   # clipped, not -130
    assert high == pytest.approx(first.change_pct + 40.0)  # the other side as the noise says
    assert min(lo for lo, _ in spans) >= -100.0


def test_the_legend_clears_the_title_and_the_axes():
    result = compare(_controlled(), _controlled(scale=2.0, where=lambda phase, i: i == 0))
    fig, renderer = _drawn(result)
    (ax,) = fig.axes
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    title = ax.title.get_window_extent(renderer)
    assert not box.overlaps(title), (box, title)
    assert box.y1 <= ax.get_window_extent(renderer).y0    # below the axes
    assert box.x0 >= 0                                     # inside the figure
    assert box.x1 <= fig.bbox.x1
