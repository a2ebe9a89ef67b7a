"""`sdbench plot` and --sdbench-plots: the files written, a self-contained HTML page, the
markers and dispersion bars, the comparison, and one-line refusals (an invalid artifact,
two grids, no matplotlib). Drawn from a real CPU artifact; no engine starts."""

import json
import re
import shutil
import sys

import pytest

from pytest_sdbench.artifact import validate_path
from pytest_sdbench.cli import main
from pytest_sdbench.readers.compare import HOST_SLOWER, OK, REGRESSED, VERDICTS, compare
from pytest_sdbench.readers.plot_figures import (
    MIXED_MARKER,
    VERDICT_COLORS,
    PlotPoint,
    canary_figure,
    compare_figure,
    phase_figure,
    plot_points,
)
from pytest_sdbench.wire.contract import STOP_FIXED
from pytest_sdbench.wire.model import summarize
from pytest_sdbench.wire.rounds import canary_readings

from .conftest import FIXTURES

REAL = FIXTURES / "cpu-agg-v4.json"      # legacy: back-to-back repeats, no canary
ROUNDS = FIXTURES / "cpu-agg-v6.json"    # 3 rounds, host canary
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
    assert main(["plot", str(ROUNDS), "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["cpu-agg-v6-canary.png", "cpu-agg-v6-decode.png", "cpu-agg-v6-prefill.png",
                     "sdbench-plots.html"]
    for name in names[:3]:
        assert (out / name).read_bytes().startswith(PNG_MAGIC)
    page = (out / "sdbench-plots.html").read_text()
    _self_contained(page)
    assert page.count("<img") == 3
    # the table: a row per point, with its median step time and the CI of its median
    artifact = validate_path(ROUNDS).artifact
    assert page.count("<tr>") == 1 + len(artifact.summaries)
    first = artifact.summaries[0]
    assert f"{1e3 * first.median_seconds:.3f}" in page
    assert f"<td>{100 * first.median_half_width:.2f}</td>" in page
    # the page states the repeat policy and the host canary
    assert "repeats: 3 round(s) of the grid, each in a fresh order drawn from seed 0" in page
    assert "host canary: python loop" in page
    assert f"wrote {out / 'sdbench-plots.html'}" in capsys.readouterr().out


def test_a_legacy_artifact_draws_no_canary_and_says_so(drawing, tmp_path):
    out = tmp_path / "plots"
    assert main(["plot", str(REAL), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "cpu-agg-v4-decode.png", "cpu-agg-v4-prefill.png", "sdbench-plots.html"]
    page = (out / "sdbench-plots.html").read_text()
    assert "taken back to back (legacy artifact: no rounds and no host canary recorded)" in page
    assert "host canary: none recorded" in page


def test_the_canary_figure_draws_every_reading_in_time_order(drawing):
    artifact = validate_path(ROUNDS).artifact
    fig = canary_figure(artifact, "canary")
    (ax,) = fig.axes                   # CPU: the python loop only
    line, *round_marks = ax.get_lines()
    assert len(round_marks) == len(artifact.rounds) - 1    # a mark between two rounds
    readings = canary_readings(artifact.rounds)
    assert list(line.get_ydata()) == pytest.approx([1e3 * r.python_seconds for r in readings])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["round 0", "round 1", "round 2"]
    assert canary_figure(validate_path(REAL).artifact, "legacy") is None


def test_links_at_the_plots_names_are_replaced_not_followed(drawing, tmp_path, capsys):
    """In a folder others can write, a link at a plot's name must not make the plot
    overwrite the file it names."""
    out, keep = tmp_path / "plots", tmp_path / "precious"
    out.mkdir()
    keep.write_text("x")
    for name in ("cpu-agg-v4-decode.png", "sdbench-plots.html"):
        (out / name).symlink_to(keep)
    assert main(["plot", str(REAL), "--out", str(out)]) == 0
    assert keep.read_text() == "x"
    assert not (out / "cpu-agg-v4-decode.png").is_symlink()
    assert (out / "cpu-agg-v4-decode.png").read_bytes().startswith(PNG_MAGIC)


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
    from .test_compare import _controlled, _write
    base = _write(tmp_path, "base.json", _controlled())
    cand = _write(tmp_path, "cand.json", _controlled(
        scale=2.0, where=lambda phase, i: phase == "decode" and i == 1))
    out = tmp_path / "plots"
    assert main(["plot", "--compare", str(base), str(cand), "--out", str(out)]) == 0
    assert (out / "compare-cand-vs-base.png").read_bytes().startswith(PNG_MAGIC)
    page = (out / "sdbench-plots.html").read_text()
    _self_contained(page)
    assert page.count("<td>+0.0%</td>") == 11           # the points that did not move
    assert page.count(f"<td>{REGRESSED}</td>") == 1
    assert "FAIL: 1 point(s) regressed (decode B=1 ctx=512 K=3 AL=natural +100.0%)" in page
    assert "noise rule:" in page
    assert "the hosts ran alike" in page
    other = json.loads(ROUNDS.read_text())
    other["grid"]["decode"] = other["grid"]["decode"][:1]
    other_path = tmp_path / "other.json"
    other_path.write_text(json.dumps(other))
    code = main(["plot", "--compare", str(ROUNDS), str(other_path), "--out", str(out)])
    assert code in (1, 2)     # another grid: refused (the edit also breaks the artifact)
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_the_comparison_is_coloured_by_the_gates_own_verdicts(drawing):
    from matplotlib.colors import to_rgba

    from .test_compare import _controlled
    assert set(VERDICT_COLORS) == set(VERDICTS)
    for cand, verdicts in ((_controlled(scale=1.25, canary_ms=1.3), {HOST_SLOWER}),
                           (_controlled(scale=2.0, where=lambda phase, i: i == 0),
                            {REGRESSED, OK})):
        result = compare(_controlled(), cand)
        assert {p.verdict for p in result.points} == verdicts
        fig = compare_figure(result, "constructed")
        ax = fig.axes[0]
        bars = [p for p in ax.patches if type(p).__name__ == "Rectangle"
                and p.get_height() < 1]   # the barh rectangles (the host band spans the axes)
        assert [b.get_facecolor() for b in bars] == [
            pytest.approx(to_rgba(VERDICT_COLORS[p.verdict])) for p in result.points]
        whiskers = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
        assert len(whiskers) == len(result.points)   # +- each point's noise


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
                     summarize("decode", index, seconds, STOP_FIXED, None), tuple(modes))


def test_markers_show_the_graph_mode_and_bars_the_ci_of_the_median(drawing):
    points = [_point(0, 1, ["full"], [0.003, 0.0032, 0.0031]),
              _point(1, 4, ["full"], [0.004]),
              _point(2, 8, ["eager", "full"], [0.02, 0.004, 0.02])]
    assert [p.marker for p in points] == ["^", "^", MIXED_MARKER]
    assert plot_points(validate_path(REAL).artifact)[0].marker == "o"   # CPU: eager
    fig = phase_figure(points, "decode", "constructed")
    (ax,) = fig.axes
    bars = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(bars) == 2     # the two points with more than one sample
    (segment,) = bars[0].lines[2][0].get_segments()
    half = points[0].summary.median_half_width   # t(2) 4.303 * 1.2533 * stdev / sqrt(3) / med
    assert half == pytest.approx(4.302653 * 1.2533141 * 0.0001 / 3 ** 0.5 / 0.0031, rel=1e-4)
    assert segment[:, 1].tolist() == pytest.approx([3.1 * (1 - half), 3.1 * (1 + half)])
    assert ax.get_xlabel().startswith("batch")
    assert ax.get_ylabel().startswith("step time")
    assert phase_figure(points, "prefill", "none") is None


PLOTS_CONFTEST = """
import pathlib, shutil
from pytest_sdbench.artifact import validate_path
from pytest_sdbench.artifact.validate.report import validate_data

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
    from pytest_sdbench.run import inputs
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(inputs, "check_vllm_installed", lambda: None)
    assert main(["collect", "--plots", "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("sdbench collect: --plots: drawing needs matplotlib")
    assert not (tmp_path / "out").exists()


def test_every_series_has_a_colour_of_its_own_and_labels_do_not_run_together(drawing):
    """14 series (the production prefill figure) once reused the default cycle's 10 colours;
    on a log axis C and C+1 (16, 17) printed as one number."""
    from pytest_sdbench.readers.figures import distinct_colors
    from pytest_sdbench.readers.plot_figures import _tick_labels
    for n in (3, 14, 25):
        assert len(set(distinct_colors(n))) == n
    assert _tick_labels([1, 2, 3, 4, 5, 8, 9, 16, 17, 64], log=True) == \
        ["1", "2", "3", "4", "5", "8", "", "16", "", "64"]
    assert _tick_labels([16, 17], log=False) == ["16", "17"]


SETTLED_8B = FIXTURES.parents[1] / "docs/evidence/h200/settled/qwen3-8b"


def test_plot_and_compare_say_how_many_samples_ran_while_the_gpu_was_capped(
        drawing, tmp_path, capsys):
    """The GPU clock beside each sample (issue 33): the page of `sdbench plot` and each side
    of `sdbench compare` count the observations taken while the clock was capped, as
    `sdbench show` does (two H200 profiles of qwen3-8b, almost all under the power cap)."""
    base, cand = (SETTLED_8B / f"sdbench-decode-k3-{run}.json.xz"
                  for run in ("635c0af72d36", "056a6da0b785"))
    said = {path: sum(o.gpu_clock.capped for o in validate_path(path).artifact.decode)
            for path in (base, cand)}
    assert all(0 < n < 420 for n in said.values())     # a count, not all or none
    assert main(["plot", str(base), "--out", str(tmp_path / "plots")]) == 0
    page = (tmp_path / "plots" / "sdbench-plots.html").read_text()
    assert f"{said[base]} of 420 observations taken while capped" in page
    capsys.readouterr()
    main(["compare", str(base), str(cand)])
    out = capsys.readouterr().out
    assert "baseline retained steps: decode: settled_steps" in out
    for side, path in (("baseline", base), ("candidate", cand)):
        line = next(li for li in out.splitlines() if li.startswith(f"{side} retained steps"))
        assert f"{said[path]} of 420 observations taken while capped" in line
