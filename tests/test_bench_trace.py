"""The benchmark's pure logic on constructed data: the profiler-trace parsers (fidelity),
the comparison of two collections (repeatability), the goals and the gate."""

import pytest

from benchmarks.sdbench_bench import __main__ as bench_main
from benchmarks.sdbench_bench.goals import (
    EXIT_ERROR,
    EXIT_MISSED,
    EXIT_OK,
    GOALS,
    HOST_TIME,
    SYNCS,
    THROUGHPUT,
    Table,
)
from benchmarks.sdbench_bench.repeatability import agreements, summarise, widest
from benchmarks.sdbench_bench.trace import (
    StepSpan,
    TraceEvent,
    kernel_seconds,
    step_id,
    step_intervals,
    step_range_name,
    step_spans,
)
from pytest_sdbench.wire.model import summarize


def cpu(iid, start, end=None):
    return TraceEvent(step_range_name(iid), "cpu", start, end if end is not None else start + 1)


def gpu(iid, start, end):
    return TraceEvent(step_range_name(iid), "cuda", start, end)


def test_step_ids_are_read_from_annotated_ranges_only():
    assert step_id(step_range_name(17)) == 17
    for name in ("sdbench_step_None", "sdbench_step_", "sdbench_step_-3", "aten::mm",
                 "xsdbench_step_4"):
        assert step_id(name) is None


def test_spans_take_the_host_entry_and_the_outer_bounds_of_device_pieces():
    events = [
        cpu(1, 100.0, 400.0), cpu(1, 90.0, 95.0),         # the earliest host start counts
        gpu(1, 150.0, 200.0), gpu(1, 300.0, 380.0), gpu(1, 120.0, 140.0),  # three pieces
        TraceEvent("aten::mm", "cuda", 0.0, 1e9),         # not a step
        TraceEvent("sdbench_step_None", "cpu", 0.0, 5.0),  # an unstamped step
        cpu(2, 500.0), gpu(2, 510.0, 600.0),
        cpu(3, 700.0),                                     # no device piece: left out
        gpu(4, 800.0, 900.0),                              # no host range: left out
    ]
    spans = step_spans(events)
    assert spans == {1: StepSpan(90.0, 120.0, 380.0), 2: StepSpan(500.0, 510.0, 600.0)}
    assert kernel_seconds(spans[1]) == pytest.approx(260e-6)


def test_an_interval_starts_at_host_entry_or_when_the_busy_stream_frees():
    spans = {
        3: StepSpan(1000.0, 1100.0, 1500.0),  # entered while step 2 still ran: starts 1200
        1: StepSpan(0.0, 50.0, 300.0),        # the first step starts when the host enters
        2: StepSpan(400.0, 450.0, 1200.0),    # idle stream: starts at host entry
    }
    intervals = step_intervals(spans)
    assert list(intervals) == [1, 2, 3]
    assert intervals[1] == pytest.approx(300e-6)
    assert intervals[2] == pytest.approx(800e-6)
    assert intervals[3] == pytest.approx(300e-6)
    assert step_intervals({}) == {}


def _summaries(phase, times_by_point):
    return [summarize(phase, i, times, "fixed_rounds", None)
            for i, times in enumerate(times_by_point)]


def test_two_collections_compare_by_point_median_and_the_consumer_policy():
    steady = [1.00, 1.01, 0.99, 1.00, 1.02]
    noisy = [1.0, 1.3, 0.8, 1.0, 1.1]
    first = _summaries("decode", [steady, steady, noisy]) + _summaries("prefill", [steady])
    second = (_summaries("decode", [[x * 1.03 for x in steady], [x * 1.10 for x in steady],
                                    noisy])
              + _summaries("prefill", [steady]))
    points = agreements(first, second[::-1])   # matched by key, not by position
    assert [p.key for p in points] == [("decode", 0), ("decode", 1), ("decode", 2),
                                       ("prefill", 0)]
    assert points[0].disagreement == pytest.approx(0.03)
    # within 5%, CV small: imported; 10% apart: not; CV above 5%: not
    assert [p.importable for p in points] == [True, False, False, True]
    figures = summarise(points)
    assert figures.points == 4
    assert figures.importable == 2
    assert figures.judged
    assert figures.importable_share == 0.5
    assert figures.median_disagreement == pytest.approx(0.015)
    assert figures.max_disagreement == pytest.approx(0.10)
    assert figures.cv[0][1] == pytest.approx(points[2].first.cv)
    assert [p.key for p in widest(points, 2)] == [("decode", 1), ("decode", 0)]


def test_fewer_repeats_than_the_policy_needs_are_never_importable():
    one = _summaries("decode", [[1.0]])
    points = agreements(one, one)
    assert points[0].disagreement == 0
    assert not points[0].importable
    figures = summarise(points)
    assert figures.repeats == 1
    assert not figures.judged
    assert agreements(one, _summaries("prefill", [[1.0]])) == []
    with pytest.raises(ValueError, match="no point was measured in both"):
        summarise([])


def test_goals_judge_values_and_the_gate_sets_the_exit_code(capsys):
    assert THROUGHPUT.met(99.5)
    assert not THROUGHPUT.met(99.4)
    assert HOST_TIME.met(30.0)
    assert not HOST_TIME.met(30.1)
    assert SYNCS.met(0.0)
    assert not SYNCS.met(0.001)
    assert str(HOST_TIME) == "<= 30 us"
    assert str(THROUGHPUT) == ">= 99.5%"
    assert len({g.name for g in GOALS}) == len(GOALS)
    table = Table()
    table.row("informational", "1 thing")
    assert table.exit_code(gate=True) == EXIT_OK
    table.row("syncs", "+0.000", (SYNCS, 0.0), valid=False)   # a control that saw nothing
    assert table.rows[-1].verdict == "MISSED"
    table.row("fast", "12 us", (HOST_TIME, 12.0))
    assert table.rows[-1].verdict == "met"
    assert table.exit_code(gate=False) == EXIT_OK
    assert table.exit_code(gate=True) == EXIT_MISSED
    assert [r.measure for r in table.missed()] == ["syncs"]
    table.error("fidelity", RuntimeError("no trace"))
    assert table.exit_code(gate=False) == EXIT_ERROR
    out = capsys.readouterr().out
    assert "fast: 12 us (goal <= 30 us) met" in out
    rendered = table.render()
    assert "fidelity" in rendered
    assert "ERROR RuntimeError: no trace" in rendered


def test_subcommands_replace_flags_and_refuse_a_k_sweep(capsys):
    p = bench_main.parser()
    args = p.parse_args(["repeatability", "--preset", "tiny", "--vllm-defaults",
                         "--engine-arg", "max_num_seqs=64", "--repeats", "5", "--starts",
                         "2", "--out", "d", "--gate"])
    assert (args.command, args.repeats, args.starts, args.out, args.gate) == \
        ("repeatability", 5, 2, "d", True)
    assert args.engine_arg == [("max_num_seqs", 64)]
    with pytest.raises(SystemExit):
        p.parse_args(["overhead", "--syncs"])          # the old overriding flags are gone
    with pytest.raises(SystemExit):
        p.parse_args(["overhead", "--suite", "pytest"])  # only cost and all time a suite
    assert p.parse_args(["all", "--suite", "pytest", "-q"]).suite == ["pytest", "-q"]
    with pytest.raises(SystemExit):
        bench_main.main(["overhead", "--preset", "tiny", "--k", "1-3"])
    assert "--k: the benchmark runs one draft depth" in capsys.readouterr().err
