"""Rank agreement and the step-time rule of a tensor-parallel engine, on constructed data:
the windows of two ranks joined by native iteration ID."""

from types import SimpleNamespace

import pytest

from pytest_sdbench.engine import ranks, step_reading
from pytest_sdbench.engine.ranks import (
    RankDisagreement,
    RankTimingMissing,
    external_id,
    join_ranks,
    rank_window,
    record_digest,
    step_seconds,
)
from pytest_sdbench.measure.iteration import IterationRecord
from pytest_sdbench.measure.observer import TimingMissing
from pytest_sdbench.measure.result import PointFailed
from pytest_sdbench.measure.runs import EngineRuns
from pytest_sdbench.wire.records import TimingSample

PROMPTS = [[5, 6, 7], [8, 9]]


def record(iid: int, seconds: float | None, suffix: str = "0a1b2c3d", tokens: int = 64,
           accepted: int = 2) -> IterationRecord:
    rid = f"{iid}-{suffix}"
    # the plain tuples the observer freezes on its hot path: one new request of a 64-token
    # prompt, nothing cached, no drafts, queue (0 waiting, 1 running); its output gained
    # `accepted` tokens
    request = SimpleNamespace(num_prompt_tokens=64, num_preemptions=0)
    rec = IterationRecord(iid, "measured", tuple(step_reading.FrozenSchedule(
        scheduled={rid: tokens}, draft_ids=(), draft_tokens=(),
        new_computed=((rid, 0),), cached_ids=(), cached_computed=(), requests=(request,),
        preemptions=(0,), waiting=0, running=1, total_scheduled_tokens=tokens)))
    rec.raw_output = tuple(step_reading.FrozenOutput(request_ids=(rid,), gained=(accepted,),
                                               graph_stats=None))
    assert rec.rows == (step_reading.ScheduledRow(rid, 64, 0, tokens, 0, 0),)
    assert rec.queue == (0, 1)
    assert rec.accepted == {rid: accepted}
    if seconds is not None:
        rec.timing = TimingSample(iid, seconds, "worker_model_step", "host_perf_counter")
    return rec


def test_external_id_strips_only_vllms_random_suffix():
    assert external_id("12-0a1b2c3d") == "12"
    assert external_id("req-12") == "req-12"       # not 8 hex characters: kept
    assert external_id("12") == "12"


def test_digest_ignores_the_suffix_and_sees_the_schedule():
    assert record_digest(record(3, 0.1, "0a1b2c3d")) == record_digest(record(3, 0.2, "ffff0000"))
    assert record_digest(record(3, 0.1)) != record_digest(record(3, 0.1, tokens=65))
    assert record_digest(record(3, 0.1)) != record_digest(record(3, 0.1, accepted=1))


def test_agreeing_ranks_join_by_native_id_with_every_ranks_time():
    r0 = rank_window([record(1, 0.010), record(2, 0.030)], PROMPTS)
    r1 = rank_window([record(1, 0.012, "deadbeef"), record(2, 0.020, "deadbeef")], PROMPTS)
    assert join_ranks([r0, r1]) == {1: (0.010, 0.012), 2: (0.030, 0.020)}


def test_the_step_time_is_the_slowest_ranks():
    assert step_seconds((0.010, 0.012)) == 0.012
    assert step_seconds((0.030, 0.020, 0.025)) == 0.030
    with pytest.raises(ValueError, match="rank_seconds"):
        step_seconds(())


@pytest.mark.parametrize("rank1, message", [
    (rank_window([record(1, 0.01, tokens=63)], PROMPTS),
     "ranks 0 and 1 disagree on the snapshot of native iteration 1"),
    (rank_window([record(1, 0.01), record(2, 0.01)], PROMPTS),
     r"ranks 0 and 1 recorded different iterations: \[1\] vs \[1, 2\]"),
    (rank_window([record(1, 0.01)], [[5, 6, 7], [8, 10]]), "ranks 0 and 1 ran different prompts"),
])
def test_a_disagreement_names_the_ranks_and_the_iteration(rank1, message):
    rank0 = rank_window([record(1, 0.01)], PROMPTS)
    with pytest.raises(RankDisagreement, match=message):
        join_ranks([rank0, rank1])


def test_a_missing_sample_on_any_rank_is_missing_on_all():
    rank0 = rank_window([record(1, 0.01)], PROMPTS)
    with pytest.raises(RankTimingMissing, match=r"native iteration 1: .*rank\(s\) \[1\]"):
        join_ranks([rank0, rank_window([record(1, None)], PROMPTS)])
    with pytest.raises(RankTimingMissing, match="rank 1: no timing sample"):
        join_ranks([rank0, rank_window([], PROMPTS, missing="no timing sample")])


def _two_ranks(monkeypatch, other):
    """This process plays rank 0 of two; `other` is what rank 1 hands in."""
    monkeypatch.setattr(ranks, "world_size", lambda: 2)
    monkeypatch.setattr(ranks, "gather_from_ranks", lambda mine: [mine, other])


def test_the_collector_keeps_every_ranks_time_and_retains_the_slowest(monkeypatch):
    mine = [record(1, 0.010), record(2, 0.030)]
    _two_ranks(monkeypatch, rank_window([record(1, 0.012, "deadbeef"),
                                         record(2, 0.020, "deadbeef")], PROMPTS))
    EngineRuns._agree(mine, PROMPTS, None)
    assert [r.timing.rank_seconds for r in mine] == [(0.010, 0.012), (0.030, 0.020)]
    assert [r.timing.seconds for r in mine] == [0.012, 0.030]


def test_the_collector_fails_the_point_when_the_ranks_disagree(monkeypatch):
    _two_ranks(monkeypatch, rank_window([record(1, 0.01, accepted=1)], PROMPTS))
    with pytest.raises(PointFailed, match="native iteration 1"):
        EngineRuns._agree([record(1, 0.01)], PROMPTS, None)


def test_the_collector_raises_timing_missing_on_every_rank(monkeypatch):
    _two_ranks(monkeypatch, rank_window([record(1, 0.01)], PROMPTS, missing="lost"))
    with pytest.raises(TimingMissing, match="rank 1: lost"):
        EngineRuns._agree([record(1, 0.01)], PROMPTS, None)


def test_a_single_rank_is_left_as_it_was():
    mine = [record(1, 0.010)]
    EngineRuns._agree(mine, PROMPTS, None)
    assert mine[0].timing.rank_seconds == ()  # step_time_rule single_rank: no per-rank list
