"""The readers know the third phase, on the v7 fixture (8 prefill, 4 decode and 3 mixed
points, 3 rounds) and on a mixed-only artifact cut from it: the policy line names
mixed_step, `sdbench show` lists the mixed rows in aligned columns, `sdbench plot` draws the
mixed step time against the step's scheduled tokens by decode batch. Pure logic: no engine
starts (compare's mixed points: tests/test_compare.py)."""

import json

import pytest

from pytest_sdbench.artifact.validate.report import validate_data
from pytest_sdbench.cli import main
from pytest_sdbench.commands.show import table
from pytest_sdbench.readers.describe import policy_line
from pytest_sdbench.readers.plot_figures import phase_figure, plot_points
from pytest_sdbench.wire.contract import POLICY_DESCRIPTIONS
from pytest_sdbench.wire.model import Artifact
from pytest_sdbench.wire.points import point_label

from . import forge
from .conftest import FIXTURES

V7 = FIXTURES / "cpu-agg-v7.json"
MIXED_STEP = f"mixed: mixed_step ({POLICY_DESCRIPTIONS['mixed_step']})"


def _artifact(data: dict) -> Artifact:
    report = validate_data(data)
    assert report.ok, report.errors
    assert report.artifact is not None
    return report.artifact


def _mixed_only() -> Artifact:
    """A `--sdbench-mode mixed` artifact: the fixture's mixed phase alone."""
    return _artifact(forge.keep_phases(forge.load("cpu-v7"), "mixed", ("mixed",)))


def test_the_policy_line_names_each_phase_it_retains():
    line = policy_line(_artifact(forge.load("cpu-v7")))
    assert line == ("retained steps: prefill: single_step (one step whose shape equals the "
                    "point); decode: settled_steps (settled steps of a running batch (decode "
                    f"steps after the first)); {MIXED_STEP}")


def test_a_mixed_only_artifact_retains_mixed_steps_and_says_so():
    assert policy_line(_mixed_only()) == f"retained steps: {MIXED_STEP}"


def test_a_two_phase_artifact_names_no_mixed_policy():
    line = policy_line(_artifact(json.loads((FIXTURES / "cpu-agg-v6.json").read_text())))
    assert "mixed" not in line
    assert line.startswith("retained steps: prefill: single_step")


def test_show_lists_every_mixed_row_with_its_coordinates_in_aligned_columns(capsys):
    assert main(["show", str(V7)]) == 0
    out = capsys.readouterr().out
    assert f"{MIXED_STEP}\n" in out
    artifact = _artifact(forge.load("cpu-v7"))
    lines = table(artifact).splitlines()
    steps = lines[:lines.index("")]   # the retained steps; the summaries after a blank line
    rows = [line for line in steps if line.startswith("mixed[")]
    assert len(rows) == len(artifact.mixed) == 9
    header = lines[0]
    for o in artifact.mixed:
        (row,) = [r for r in rows if f" {o.native_iteration_id} " in r]
        assert row.startswith(f"mixed[{o.point_index}]")
        assert point_label(o.point) in row
        # the columns after the coordinates line up with the header's, however long the
        # mixed point's label
        assert row.index(f"{o.timing.seconds * 1e3:.3f}") + len(
            f"{o.timing.seconds * 1e3:.3f}") == header.index(" ms") + len(" ms")
    summaries = [line for line in lines[len(steps):] if line.startswith("mixed[")]
    assert len(summaries) == 3   # one summary a mixed point


def test_the_plot_points_hold_the_mixed_points():
    artifact = _artifact(forge.load("cpu-v7"))
    points = plot_points(artifact)
    assert [p.phase for p in points] == ["prefill"] * 8 + ["decode"] * 4 + ["mixed"] * 3
    mixed = [p for p in points if p.phase == "mixed"]
    assert [p.point for p in mixed] == list(artifact.grid.mixed)
    assert all(p.graph_modes == ("eager",) for p in mixed)


def test_the_mixed_figure_is_step_time_against_scheduled_tokens_by_decode_batch():
    pytest.importorskip("matplotlib")
    artifact = _artifact(forge.load("cpu-v7"))
    points = plot_points(artifact)
    fig = phase_figure(points, "mixed", "mixed")
    (ax,) = fig.axes
    assert ax.get_xlabel() == ("tokens the step scheduled: decode batch x (1+K) + the "
                               "prefills' new tokens")
    lines = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
    by_name = {line.get_label(): line for line in lines}
    assert sorted(by_name) == ["decode batch 1", "decode batch 2", "decode batch 4"]
    medians = {(s.phase, s.point_index): s.median_seconds for s in artifact.summaries}
    for i, point in enumerate(artifact.grid.mixed):
        line = by_name[f"decode batch {point.decode_batch_size}"]
        assert list(line.get_xdata()) == [point.scheduled_tokens]
        assert list(line.get_ydata()) == pytest.approx([1e3 * medians[("mixed", i)]])
    assert phase_figure(plot_points(_artifact(json.loads(
        (FIXTURES / "cpu-agg-v6.json").read_text()))), "mixed", "none") is None


def test_plot_writes_the_mixed_figure_where_there_are_mixed_points(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "plots"
    assert main(["plot", str(V7), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "cpu-agg-v7-canary.png", "cpu-agg-v7-decode.png", "cpu-agg-v7-mixed.png",
        "cpu-agg-v7-prefill.png", "sdbench-plots.html"]
    page = (out / "sdbench-plots.html").read_text()
    assert page.count("<img") == 4
    assert page.count("<tr>") == 1 + 15   # a row per point, the mixed ones included
    assert "Bd=4 ctx=256 K=3 AL=natural + Bp=2 new=96 prefix=64" in page
