"""`sdbench plot` and --sdbench-plots: the files written, a self-contained HTML page, the
markers and dispersion bars, the comparison, and one-line refusals (an invalid artifact,
two grids, no matplotlib). Drawn from a real CPU artifact; no engine starts."""

import json
import re
import shutil
import sys

import pytest

from pytest_sdbench.artifact import validate_data, validate_path
from pytest_sdbench.cli import main
from pytest_sdbench.plot import MIXED_MARKER, PlotPoint, phase_figure, plot_points
from pytest_sdbench.wire.model import summarize

from . import forge
from .conftest import FIXTURES

REAL = FIXTURES / "cpu-agg-v4.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def drawing():
    """Drawing tests need matplotlib (optional: the plot extra); the refusals do not."""
    pytest.importorskip("matplotlib")


def _self_contained(page: str) -> None:
    sources = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert sources
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    assert "<script" not in page
    assert "<link" not in page
    assert "http" not in page


def test_plot_writes_pngs_and_one_self_contained_page(drawing, tmp_path, capsys):
    out = tmp_path / "plots"
    assert main(["plot", str(REAL), "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["cpu-agg-v4-decode.png", "cpu-agg-v4-prefill.png", "sdbench-plots.html"]
    for name in names[:2]:
        assert (out / name).read_bytes().startswith(PNG_MAGIC)
    page = (out / "sdbench-plots.html").read_text()
    _self_contained(page)
    assert page.count("<img") == 2
    # the table: a row per point, with its median step time
    artifact = validate_path(REAL).artifact
    assert page.count("<tr>") == 1 + len(artifact.summaries)
    first = artifact.summaries[0]
    assert f"{1e3 * first.median_seconds:.3f}" in page
    assert f"wrote {out / 'sdbench-plots.html'}" in capsys.readouterr().out


def test_plot_refuses_an_invalid_artifact_in_one_line(tmp_path, capsys):
    broken = json.loads(REAL.read_text())
    broken["decode"][0]["timing"]["source"] = "cuda_event"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(broken))
    out = tmp_path / "plots"
    assert main(["plot", str(REAL), str(bad), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"sdbench: {bad} is not a valid artifact; run `sdbench validate {bad}`"]
    assert not out.exists()   # nothing drawn from a run that refused one of its inputs
    (tmp_path / "text.json").write_text("not json")
    assert main(["plot", str(tmp_path / "text.json"), "--out", str(out)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert main(["plot", "--out", str(out)]) == 2


def test_plot_without_matplotlib_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib raises
    assert main(["plot", str(REAL), "--out", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("sdbench plot: drawing needs matplotlib")
    assert "pytest-sdbench[plot]" in line


def test_compare_draws_the_per_point_change(drawing, tmp_path, capsys):
    data = json.loads(REAL.read_text())
    cand_path = tmp_path / "cand.json"
    shutil.copy(REAL, cand_path)
    out = tmp_path / "plots"
    assert main(["plot", "--compare", str(REAL), str(cand_path), "--out", str(out)]) == 0
    # the candidate first, in the file name as in the heading (and the figure's title)
    assert (out / "compare-cand-vs-cpu-agg-v4.png").read_bytes().startswith(PNG_MAGIC)
    page = (out / "sdbench-plots.html").read_text()
    _self_contained(page)
    assert f"<h2>compare: {cand_path} vs {REAL} (baseline)</h2>" in page
    points = len(data["prefill"]) + len(data["decode"])
    assert page.count("+0.0</td>") == points          # the same artifact: no change
    assert page.count("<td>within_noise</td>") == points
    other = json.loads(REAL.read_text())
    other["grid"]["decode"] = other["grid"]["decode"][:1]
    other_path = tmp_path / "other.json"
    other_path.write_text(json.dumps(other))
    code = main(["plot", "--compare", str(REAL), str(other_path), "--out", str(out)])
    assert code in (1, 2)     # another grid: refused (the edit also breaks the artifact)
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def _bar_colours(factor: float) -> set[str]:
    """The colours of the comparison's bars when every step of the candidate takes `factor`
    times the baseline's (single steps on CPU: the gate's noise floor is 35%)."""
    from matplotlib.colors import to_hex

    from pytest_sdbench.compare import compare
    from pytest_sdbench.plot import changes, compare_figure, judged
    base = validate_path(REAL).artifact
    data = json.loads(REAL.read_text())
    forge.scale_times(data, factor)
    cand = validate_data(forge.cohere(data)).artifact
    rows = judged(changes(base, cand), compare(base, cand))
    (ax,) = compare_figure(rows, "t").axes
    return {to_hex(bar.get_facecolor()) for bar in ax.patches}


def test_compare_bars_are_coloured_by_the_gates_verdict_not_by_their_sign(drawing):
    """+2.6% within a 35% noise floor is no regression and is not drawn as one; +76% is."""
    from pytest_sdbench.plot import VERDICT_COLORS
    assert _bar_colours(1.026) == {VERDICT_COLORS["within_noise"]}
    assert _bar_colours(1.76) == {VERDICT_COLORS["regressed"]}
    assert _bar_colours(0.5) == {VERDICT_COLORS["improved"]}


@pytest.mark.parametrize("where", ["proc", "file"])
def test_plot_refuses_an_unwritable_out_in_one_line(tmp_path, capsys, where):
    (tmp_path / "afile").write_text("")
    out, said = {"proc": ("/proc/plots", "/proc is not writable (to create /proc/plots)"),
                 "file": (str(tmp_path / "afile" / "e"),
                          f"{tmp_path / 'afile' / 'e'} cannot be created: "
                          f"{tmp_path / 'afile'} is not a directory")}[where]
    assert main(["plot", str(REAL), "--out", out]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"sdbench plot: --out: {said}"]
    assert captured.out == ""


def _point(index, batch, modes, seconds):
    from pytest_sdbench.wire.points import DecodePoint
    return PlotPoint("decode", index, DecodePoint(batch, 256, 3, None),
                     summarize("decode", index, seconds), tuple(modes))


def test_markers_show_the_graph_mode_and_bars_the_spread_of_repeats(drawing):
    points = [_point(0, 1, ["full"], [0.003, 0.0032, 0.0031]),
              _point(1, 4, ["full"], [0.004]),
              _point(2, 8, ["eager", "full"], [0.02, 0.004, 0.02])]
    assert [p.marker for p in points] == ["^", "^", MIXED_MARKER]
    assert plot_points(validate_path(REAL).artifact)[0].marker == "o"   # CPU: eager
    fig = phase_figure(points, "decode", "constructed")
    (ax,) = fig.axes
    bars = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(bars) == 2     # the two points with repeats
    (segment,) = bars[0].lines[2][0].get_segments()
    assert segment[:, 1].tolist() == pytest.approx([3.0, 3.2])   # min..max in ms
    assert ax.get_xlabel().startswith("batch")
    assert ax.get_ylabel().startswith("step time")
    assert phase_figure(points, "prefill", "none") is None


PLOTS_CONFTEST = """
import pathlib, shutil
from pytest_sdbench.artifact import validate_data, validate_path

def test_written(pytestconfig):
    path = pathlib.Path("out") / "sdbench-agg-x.json"
    path.parent.mkdir()
    shutil.copy({real!r}, path)
    pytestconfig.hook.pytest_sdbench_artifact_written(
        config=pytestconfig, path=path, artifact=validate_path(path).artifact)
"""


def test_the_plugin_draws_beside_each_artifact_with_sdbench_plots(drawing, pytester):
    pytester.makepyfile(test_hook=PLOTS_CONFTEST.format(real=str(REAL)))
    result = pytester.runpytest("-p", "no:cacheprovider", "--sdbench-plots")
    result.assert_outcomes(passed=1)
    out = pytester.path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "sdbench-agg-x-decode.png", "sdbench-agg-x-prefill.png", "sdbench-agg-x.html",
        "sdbench-agg-x.json"]
    result.stdout.fnmatch_lines(["artifact: plots: out/sdbench-agg-x.html"])
    shutil.rmtree(out)
    result = pytester.runpytest("-p", "no:cacheprovider")     # without the option: none
    result.assert_outcomes(passed=1)
    assert sorted(p.name for p in out.iterdir()) == ["sdbench-agg-x.json"]


def test_sdbench_plots_without_matplotlib_is_a_usage_error(pytester, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "--sdbench-plots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--sdbench-plots: drawing needs matplotlib*"])


def test_collect_plots_without_matplotlib_is_refused_before_an_engine(tmp_path, capsys,
                                                                      monkeypatch):
    from pytest_sdbench import session
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(session, "check_vllm_installed", lambda: None)
    assert main(["collect", "--plots", "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("sdbench collect: --plots: drawing needs matplotlib")
    assert not (tmp_path / "out").exists()


def test_every_series_has_a_colour_of_its_own_and_labels_do_not_run_together(drawing):
    """14 series (the production prefill figure) once reused the default cycle's 10 colours;
    on a log axis C and C+1 (16, 17) printed as one number."""
    from pytest_sdbench.plot import _colors, _tick_labels
    for n in (3, 14, 25):
        assert len(set(_colors(n))) == n
    assert _tick_labels([1, 2, 3, 4, 5, 8, 9, 16, 17, 64], log=True) == \
        ["1", "2", "3", "4", "5", "8", "", "16", "", "64"]
    assert _tick_labels([16, 17], log=False) == ["16", "17"]
