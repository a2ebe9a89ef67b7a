"""What every picture of the package draws with: matplotlib found (or the one line to act
on), a figure, n colours that can be told apart, the PNG bytes. Below both the artifact's
pictures (plot.py) and the fidelity report's (fidelity/plots.py).

matplotlib is an optional dependency (``pip install 'pytest-sdbench[plot]'``), imported
only here and only when drawing; it draws with its Agg backend through the object API, so
no global pyplot state is touched."""

from __future__ import annotations

import io


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


def figure(width: float = 9.0, height: float = 5.0):
    require_matplotlib()
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def distinct_colors(n: int) -> list:
    """n distinct colours: matplotlib's default cycle repeats after 10, and two series of
    one colour cannot be told apart in the legend."""
    from matplotlib import colormaps
    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["turbo"](i / (n - 1)) for i in range(n)]


def png_bytes(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    canvas.print_png(buffer)
    return buffer.getvalue()
