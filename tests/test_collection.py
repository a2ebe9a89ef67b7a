"""Collection on the real vLLM engine (CPU in CI): each mode, cached prefixes, restoration,
and the join failing closed when a timing sample is dropped or shifted."""

import copy
import itertools

import pytest

from pytest_sdbench.artifact.validate.report import validate_data
from pytest_sdbench.measure.timing import timer_for
from pytest_sdbench.plugin.testing import observation_violations, restoration_violations
from pytest_sdbench.wire import typed
from pytest_sdbench.wire.contract import (
    PHASE_DECODE,
    SETTLED_STEPS,
    STATUS_COMPLETE,
    STATUS_PARTIAL,
    WARMUP_BY_SHAPE_SEEDED,
    WARMUP_MIN_PASSES,
    WARMUP_SEEDED_PASSES,
)
from pytest_sdbench.wire.points import parse_grid

pytestmark = pytest.mark.sdbench_engine


@pytest.fixture(scope="module")
def small_grid(sdbench_engine):
    block, k = sdbench_engine.block_size, sdbench_engine.spec.draft_depth
    al = sdbench_engine.spec.synthetic_acceptance_length
    return parse_grid({
        "prefill": [{"batch_size": 2, "new_tokens": 48, "cached_prefix_tokens": 0},
                    {"batch_size": 2, "new_tokens": 2 * block, "cached_prefix_tokens": block}],
        "decode": [{"batch_size": 1, "context_tokens": 96, "draft_depth": k,
                    "acceptance_length": al},
                   {"batch_size": 3, "context_tokens": 64, "draft_depth": k,
                    "acceptance_length": al}]})


@pytest.mark.parametrize("mode, prefill, decode", [("prefill", 2, 0), ("decode", 0, 2),
                                                   ("agg", 2, 2)])   # decode: points
def test_each_mode_collects_exact_observations(sdbench_collect, small_grid, mode, prefill,
                                               decode):
    run = sdbench_collect(mode, small_grid)
    a = run.artifact
    assert (len(a.prefill), len({o.point_index for o in a.decode})) == (prefill, decode)
    assert a.status == STATUS_COMPLETE
    assert a.mode == mode
    assert observation_violations(a) == []
    assert run.path.is_file()
    assert validate_data(typed.encode(a)).ok


def test_cached_prefix_point_is_a_verified_hit(sdbench_collect, small_grid, sdbench_engine):
    run = sdbench_collect("prefill", small_grid)
    (cached,) = [o for o in run.artifact.prefill if o.point.cached_prefix_tokens]
    block = sdbench_engine.block_size
    assert cached.kv_seed_regime == "real_prefix"
    assert cached.cache_hit_tokens == (block, block)
    assert [r.kv_tokens for r in cached.snapshot.requests] == [block, block]
    assert [r.new_tokens for r in cached.snapshot.requests] == [2 * block, 2 * block]


def test_a_wrapper_left_behind_fails_the_collection(sdbench_collect, small_grid,
                                                    sdbench_engine, monkeypatch):
    """Every collection checks the engine's restoration after the observer's detach (so a
    test that collects need not check it again). An observer that leaves its scheduler
    wrapper in place fails the collection, naming the attribute."""
    from pytest_sdbench.engine import compat
    from pytest_sdbench.measure.observer import NativeObserver
    from pytest_sdbench.run.collect import EngineNotRestored
    sched = compat.scheduler(sdbench_engine.llm)
    detach = NativeObserver.detach

    def leaky_detach(self):
        wrapper = sched.schedule
        detach(self)
        sched.schedule = wrapper

    monkeypatch.setattr(NativeObserver, "detach", leaky_detach)
    try:
        with pytest.raises(EngineNotRestored, match=r"scheduler attributes differ: \['schedule'\]"):
            sdbench_collect("prefill", small_grid)
    finally:
        vars(sched).pop("schedule", None)
    monkeypatch.undo()
    assert restoration_violations(sdbench_engine) == []


class _Faulty:
    """A timer that drops, or re-labels with the next ID, the sample of one iteration."""

    def __init__(self, inner, victim: int, fault: str):
        self.inner, self.victim, self.fault, self.count = inner, victim, fault, 0
        self.source = inner.source

    def start(self, iid):
        self.inner.start(iid)

    def stop(self, iid):
        self.count += 1
        if self.count == self.victim and self.fault == "drop":
            self.inner._open.pop(iid)
            return
        if self.count == self.victim and self.fault == "shift":
            self.inner._open[iid + 1] = self.inner._open.pop(iid)
            iid += 1
        self.inner.stop(iid)

    def poll(self):
        return self.inner.poll()

    def drain(self):
        return self.inner.drain()


@pytest.mark.parametrize("fault", ["drop", "shift"])
def test_a_dropped_or_shifted_timing_sample_fails_its_point(sdbench_collect, small_grid,
                                                            monkeypatch, fault):
    import pytest_sdbench.measure.collector as collect_module
    # Every prefill point runs warm-up then measured; each run is one step. Hit the measured
    # step of the first point (its 2nd timed step).
    monkeypatch.setattr(collect_module, "timer_for",
                        lambda device: _Faulty(timer_for(device), victim=2, fault=fault))
    run = sdbench_collect("prefill", small_grid)
    a = run.artifact
    assert a.status == STATUS_PARTIAL
    (skipped,) = a.coverage.skipped_points
    assert skipped.point_index == 0
    assert "no timing sample arrived" in skipped.reason
    assert [o.point_index for o in a.prefill] == [1]
    assert observation_violations(a) == []


def test_real_observations_with_a_timing_removed_or_shifted_are_rejected(sdbench_collect,
                                                                         small_grid):
    data = typed.encode(sdbench_collect("decode", small_grid).artifact)
    assert validate_data(data).ok
    removed = copy.deepcopy(data)
    del removed["decode"][0]["timing"]
    assert "decode[0].timing: missing" in validate_data(removed).errors
    shifted = copy.deepcopy(data)
    first, second = shifted["decode"][0], shifted["decode"][1]
    first["timing"], second["timing"] = second["timing"], first["timing"]
    errors = "\n".join(validate_data(shifted).errors)
    assert "decode[0].timing.native_iteration_id" in errors
    assert "decode[1].timing.native_iteration_id" in errors


def test_repeated_collections_on_one_engine_stay_exact(sdbench_collect, sdbench_engine):
    """A second collection of the same grid must not replay the first one's prompts: a
    replayed prompt would be a larger cache hit than the point's prefix."""
    block = sdbench_engine.block_size
    grid = parse_grid({"prefill": [{"batch_size": 1, "new_tokens": 3 * block,
                                    "cached_prefix_tokens": block}]})
    runs = [sdbench_collect("prefill", grid) for _ in range(2)]
    for run in runs:
        assert run.artifact.status == STATUS_COMPLETE, run.artifact.coverage.skipped_points
        assert observation_violations(run.artifact) == []


def test_a_grid_the_engine_cannot_run_exactly_is_refused_naming_the_field(sdbench_collect,
                                                                          sdbench_engine):
    from pytest_sdbench.wire.points import GridError
    spec = sdbench_engine.spec
    grid = parse_grid({"decode": [
        {"batch_size": 1, "context_tokens": 64, "draft_depth": spec.draft_depth + 1,
         "acceptance_length": None},
        {"batch_size": sdbench_engine.max_num_seqs + 1, "context_tokens": 64,
         "draft_depth": spec.draft_depth, "acceptance_length": None}]})
    with pytest.raises(GridError) as excinfo:
        sdbench_collect("decode", grid)
    text = str(excinfo.value)
    assert f"decode[0].draft_depth: the engine verifies K={spec.draft_depth}" in text
    assert f"decode[1].batch_size: {sdbench_engine.max_num_seqs + 1} exceeds max_num_seqs" in text


def test_rounds_spread_a_points_samples_over_the_collection(sdbench_collect, small_grid):
    """Three rounds: each point's samples are taken in three different rounds, with other
    points' samples between them, each round in the order its seed draws (a fresh order);
    the canary brackets every round."""
    from pytest_sdbench.wire.rounds import PointRef, round_order
    run = sdbench_collect("agg", small_grid, repeats=3)
    a = run.artifact
    assert a.status == STATUS_COMPLETE, a.coverage.skipped_points
    assert a.measurement_policy.repeat_order == "rounds"
    assert [r.index for r in a.rounds] == [0, 1, 2]
    refs = {PointRef(p, i) for p in ("prefill", "decode") for i in range(2)}
    for r in a.rounds:
        assert set(r.order) == refs
        assert r.order == round_order(refs, a.measurement_policy.order_seed, r.index)
        assert r.canary_before.python_seconds > 0
        assert r.canary_after.python_seconds > 0
    assert len({r.order for r in a.rounds}) > 1   # not one order for every round
    # one sample a work item: a decode item's settled steps are one sample, taken together
    first = {}
    for p in ("prefill", "decode"):
        for o in getattr(a, p):
            key = (PointRef(p, o.point_index), o.round)
            first[key] = min(first.get(key, o.native_iteration_id), o.native_iteration_id)
    taken = sorted((iid, ref, round_) for (ref, round_), iid in first.items())
    for ref in refs:
        mine = [i for i, (_, r, _) in enumerate(taken) if r == ref]
        assert [taken[i][2] for i in mine] == [0, 1, 2]
        assert all(b - a > 1 for a, b in itertools.pairwise(mine)), \
            f"{ref}'s samples were taken back to back"
    assert {s.samples for s in a.summaries} == {3}
    assert all(s.stop == "fixed_rounds" and s.canary_spread is not None for s in a.summaries)
    assert a.host_canary.samples == 6
    assert observation_violations(a) == []


def test_back_to_back_repeats_stay_an_explicit_policy(sdbench_collect, small_grid):
    from pytest_sdbench.wire.rounds import RepeatPlan
    run = sdbench_collect("agg", small_grid, repeats=RepeatPlan(2, "back_to_back"))
    a = run.artifact
    assert a.status == STATUS_COMPLETE
    assert validate_data(typed.encode(a)).ok
    assert a.measurement_policy.repeat_order == "back_to_back"
    assert a.measurement_policy.order_seed is None
    (only,) = a.rounds
    assert [(r.phase, r.point_index) for r in only.order] == [
        ("prefill", 0), ("prefill", 1), ("decode", 0), ("decode", 1)]   # grid order
    first: dict[tuple, int] = {}   # a work item (its settled steps) is one sample
    for p in ("prefill", "decode"):
        for o in getattr(a, p):
            key = (p, o.point_index, o.repeat)
            first[key] = min(first.get(key, o.native_iteration_id), o.native_iteration_id)
    taken = sorted((iid, p, i) for (p, i, _), iid in first.items())
    assert [(p, i) for _, p, i in taken] == [   # each point's repeats together
        ("prefill", 0), ("prefill", 0), ("prefill", 1), ("prefill", 1),
        ("decode", 0), ("decode", 0), ("decode", 1), ("decode", 1)]


def test_until_pinned_takes_rounds_where_the_noise_is(sdbench_collect, small_grid):
    """Until pinned: after the fixed rounds a point takes more rounds until its median's CI
    is within the width or it reaches the cap; each point says why it stopped, and only the
    unpinned points are in the later rounds (the validator recomputes both)."""
    from pytest_sdbench.wire.contract import PINNED_CONFIDENCE
    from pytest_sdbench.wire.rounds import RepeatPlan, UntilPinned, is_pinned, samples_by_point
    plan = RepeatPlan(2, until_pinned=UntilPinned(0.05, PINNED_CONFIDENCE, 5))
    run = sdbench_collect("agg", small_grid, repeats=plan)
    a = run.artifact
    assert a.status == STATUS_COMPLETE, a.coverage.skipped_points
    assert validate_data(typed.encode(a)).ok
    assert 3 <= len(a.rounds) <= 5
    for s in a.summaries:
        times = [sample.seconds for sample in
                 samples_by_point(getattr(a, s.phase))[s.point_index]]
        assert s.stop in ("pinned", "round_cap")
        assert (s.stop == "pinned") == is_pinned(times, 0.05)
        assert s.samples == len(times) >= 3
        if s.stop == "round_cap":
            assert s.samples == 5
    later = [set(r.order) for r in a.rounds[3:]]
    pinned_at_3 = {(s.phase, s.point_index) for s in a.summaries if s.samples == 3}
    assert not any((ref.phase, ref.point_index) in pinned_at_3 for rs in later for ref in rs)


def test_retained_decode_steps_come_after_the_first_decode_step_of_their_run(
        sdbench_collect, small_grid, sdbench_engine, monkeypatch):
    """settled_steps, checked against vLLM's own scheduler outputs (not the collector's step
    count): every schedule() output of the collection is recorded beneath the observer, with
    vLLM's new-request list. A run starts with the output that admits its requests; each
    retained decode observation is its run's 3rd step or later (step 1 admits the batch,
    step 2 is the first decode step, the transient), and its context is then more than the
    point's (the first decode step reads exactly the point's context)."""
    from pytest_sdbench.engine import compat
    from pytest_sdbench.measure.observer import STAMP_ATTR
    from pytest_sdbench.wire.contract import SETTLED_FIRST_STEP, SETTLED_STEPS
    scheduler_cls = type(compat.scheduler(sdbench_engine.llm))
    schedule, outputs = scheduler_cls.schedule, []

    def recording(self, *args, **kwargs):
        out = schedule(self, *args, **kwargs)
        outputs.append(out)
        return out

    monkeypatch.setattr(scheduler_cls, "schedule", recording)
    run = sdbench_collect("decode", small_grid)
    monkeypatch.undo()
    position: dict[int, int] = {}   # native id -> 1-based step of its run
    step = 0
    for out in outputs:
        if not out.total_num_scheduled_tokens:
            continue
        step = 1 if out.scheduled_new_reqs else step + 1
        position[getattr(out, STAMP_ATTR, 0)] = step   # 0: outside the observer
    retained = run.artifact.decode
    assert len(retained) == SETTLED_STEPS * len(small_grid.decode)
    steps = sorted({position[o.native_iteration_id] for o in retained})
    assert steps == list(range(SETTLED_FIRST_STEP, SETTLED_FIRST_STEP + SETTLED_STEPS))
    assert all(o.step_index == position[o.native_iteration_id] for o in retained)
    assert all(r.kv_tokens > o.point.context_tokens for o in retained
               for r in o.snapshot.requests)


def test_a_decode_run_stops_after_its_last_retained_step(sdbench_collect, small_grid,
                                                         sdbench_engine, monkeypatch):
    """Counted from vLLM's own scheduler outputs: each run that a retained decode row comes
    from (from the step that admits its requests) schedules SETTLED_FIRST_STEP +
    SETTLED_STEPS - 1 steps, one more where async scheduling had queued it (at the
    synthetic acceptance length, max_tokens would run it several more); the engine is idle
    afterwards and serves."""
    from pytest_sdbench.engine import compat, serving
    from pytest_sdbench.measure.observer import STAMP_ATTR
    from pytest_sdbench.wire.contract import SETTLED_FIRST_STEP, SETTLED_STEPS
    scheduler_cls = type(compat.scheduler(sdbench_engine.llm))
    schedule, runs = scheduler_cls.schedule, []

    def recording(self, *args, **kwargs):
        out = schedule(self, *args, **kwargs)
        if out.scheduled_new_reqs:
            runs.append([])
        if out.total_num_scheduled_tokens:
            runs[-1].append(out)
        return out

    monkeypatch.setattr(scheduler_cls, "schedule", recording)
    run = sdbench_collect("decode", small_grid)
    monkeypatch.undo()
    run_of = {getattr(out, STAMP_ATTR, 0): len(steps) for steps in runs for out in steps}
    lengths = [run_of[o.native_iteration_id] for o in run.artifact.decode]
    last = SETTLED_FIRST_STEP + SETTLED_STEPS - 1
    assert run.artifact.status == STATUS_COMPLETE
    assert lengths
    assert all(last <= n <= last + 1 for n in lengths), lengths
    assert serving.core_idle(sdbench_engine.llm)
    assert sdbench_engine.probe().tokens


def test_a_decode_run_asked_for_its_tokens_is_not_stopped(sdbench_collect, small_grid):
    """decode_tokens (the GPU oracle's acceptance matrix: the run's acceptance estimated over
    that many tokens a request) runs each decode run to its end: every point's run
    acceptance counts more request-steps than the stopped run's."""
    def samples(run) -> dict[int, int]:
        assert run.artifact.status == STATUS_COMPLETE
        return {o.point_index: o.run_acceptance_samples for o in run.artifact.decode}
    stopped = samples(sdbench_collect("decode", small_grid))
    whole = samples(sdbench_collect("decode", small_grid, decode_tokens=48))
    assert stopped.keys() == whole.keys()
    assert all(whole[i] > stopped[i] for i in stopped), (stopped, whole)


def test_a_stopped_run_aborts_its_requests_and_leaves_the_engine_idle(sdbench_engine):
    """The engine's stop: asked after every engine step; once it holds, the requests still
    running are aborted (no outputs), the engine is left idle, and the next run serves in
    full."""
    from pytest_sdbench.engine import serving
    from pytest_sdbench.measure.runs import sampling_params
    prompts = [sdbench_engine.fresh_tokens(40) for _ in range(2)]
    asked = itertools.count(1)
    assert sdbench_engine.generate(prompts, sampling_params(30),
                                   stop=lambda: next(asked) >= 3) == []
    assert serving.core_idle(sdbench_engine.llm)
    outputs = sdbench_engine.generate(prompts, sampling_params(30))
    assert [len(o.outputs[0].token_ids) for o in outputs] == [30, 30]
    assert restoration_violations(sdbench_engine) == []


def _two_shapes(engine):
    """Decode points 0 and 1 are one compiled shape (batch 2, K, eager: the same tokens) at
    two contexts, point 2 another (batch 1)."""
    k, al = engine.spec.draft_depth, engine.spec.synthetic_acceptance_length
    return parse_grid({"decode": [
        {"batch_size": 2, "context_tokens": ctx, "draft_depth": k, "acceptance_length": al}
        for ctx in (64, 96)] + [{"batch_size": 1, "context_tokens": 64, "draft_depth": k,
                                 "acceptance_length": al}]})


def test_a_decode_point_of_a_shape_an_earlier_point_settled_is_warmed_by_its_seed(
        sdbench_collect, sdbench_engine):
    """The by_shape_seeded warm-up on the real engine (_two_shapes): point 1 takes no pass
    where point 0 settled (its seed warms it; else it warms up itself), point 2 warms up
    itself, and the artifact stating so is valid and exact."""
    a = sdbench_collect("decode", _two_shapes(sdbench_engine)).artifact
    assert a.measurement_policy.warmup.rule == WARMUP_BY_SHAPE_SEEDED
    warmup = {o.point_index: (o.warmup_passes, o.warmup_settled) for o in a.decode}
    assert warmup[0][0] >= WARMUP_MIN_PASSES
    if warmup[0][1]:
        assert warmup[1] == (WARMUP_SEEDED_PASSES[PHASE_DECODE], True)
    else:   # the first of the shape never settled: the next one warms up itself
        assert warmup[1][0] >= WARMUP_MIN_PASSES
    assert warmup[2][0] >= WARMUP_MIN_PASSES
    assert validate_data(typed.encode(a)).ok
    assert observation_violations(a) == []


def test_a_seeded_point_whose_first_run_ran_no_settled_shape_warms_up_and_runs_again(
        sdbench_collect, sdbench_engine, monkeypatch):
    """Each decode point is taken for one of a settled shape (the expectation the warm-up
    pass acts on, forced here), but no shape settled before point 0: its first run names its
    shape, unsettled, so that run is dropped, the point warms up until stable and is measured
    again; what it keeps is exact, and states its own passes."""
    from pytest_sdbench.measure.warmup import ShapeWarmup
    monkeypatch.setattr(ShapeWarmup, "seed_warms", lambda self, point: True)
    a = sdbench_collect("decode", _two_shapes(sdbench_engine)).artifact
    passes = {o.point_index: o.warmup_passes for o in a.decode}
    assert passes[0] >= WARMUP_MIN_PASSES
    kept = [o for o in a.decode if o.point_index == 0]
    assert len(kept) == SETTLED_STEPS * a.measurement_policy.repeats   # the dropped run's none
    assert validate_data(typed.encode(a)).ok
    assert observation_violations(a) == []
