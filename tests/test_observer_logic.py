"""The observer's bookkeeping on a constructed engine (pure logic, no vLLM): the stamp, the
frozen snapshot, the join by native ID, and the correction of in-flight snapshots under
async scheduling, which the CPU engine (synchronous scheduling) never exercises."""

from types import SimpleNamespace as NS
from typing import ClassVar

import pytest

from pytest_sdbench.measure.observer import STAMP_ATTR, NativeObserver, TimingMissing
from pytest_sdbench.measure.timing import HostTimer
from pytest_sdbench.wire.contract import BOOKING_MEASURED
from pytest_sdbench.wire.records import RejectionCorrection


def _request(prompt: int, preemptions: int = 0):
    return NS(num_prompt_tokens=prompt, num_preemptions=preemptions)


class FakeScheduler:
    def __init__(self):
        self.requests = {"a": _request(64), "b": _request(64), "c": _request(32)}
        self.waiting, self.running = [], []
        self.plan: list = []        # the SchedulerOutputs schedule() will emit, in order
        self.updates: list = []     # what update_from_output saw, as it saw it

    def schedule(self):
        output = self.plan.pop(0)
        self.running = list(output.num_scheduled_tokens)
        return output

    def update_from_output(self, scheduler_output, model_runner_output):
        # vLLM trims a stopping request's sampled tokens in place (del new_token_ids[n:])
        self.updates.append(getattr(scheduler_output, STAMP_ATTR))
        for tokens in model_runner_output.sampled_token_ids:
            del tokens[1:]
        return "engine core outputs"


class FakeWorker:
    def __init__(self):
        self.model_runner = NS()   # no cudagraph_manager: the V1 runner

    def execute_model(self, scheduler_output):
        return None                # sampling follows in sample_tokens

    def sample_tokens(self, grammar=None):
        return "sampled"


def _engine():
    sched, worker = FakeScheduler(), FakeWorker()
    core = NS(scheduler=sched, model_executor=NS(driver_worker=NS(worker=worker)))
    return NS(llm_engine=NS(engine_core=NS(engine_core=core))), sched, worker


def _output(scheduled: dict, computed: dict, drafts: dict, new: tuple = ()):
    cached = [r for r in scheduled if r not in new]
    return NS(num_scheduled_tokens=dict(scheduled),
              scheduled_spec_decode_tokens={r: [-1] * n for r, n in drafts.items()},
              scheduled_new_reqs=[NS(req_id=r, num_computed_tokens=computed[r]) for r in new],
              scheduled_cached_reqs=NS(req_ids=cached,
                                       num_computed_tokens=[computed[r] for r in cached]),
              total_num_scheduled_tokens=sum(scheduled.values()))


def _model_output(gained: dict):
    return NS(req_ids=list(gained), sampled_token_ids=[[7] * n for n in gained.values()],
              cudagraph_stats=None)


def test_async_steps_are_frozen_joined_and_corrected_for_rejected_drafts():
    llm, sched, worker = _engine()
    # N=1: a and b verify 3 drafts each; N=2 is scheduled before N=1's output is known and
    # assumed every draft accepted; c was preempted once in between.
    first = _output({"a": 4, "b": 4, "c": 4}, {"a": 70, "b": 70, "c": 40},
                    {"a": 3, "b": 3, "c": 3})
    second = _output({"a": 4, "b": 4, "c": 4}, {"a": 74, "b": 74, "c": 0},
                     {"a": 3, "b": 3, "c": 3})
    sched.plan = [first, second]
    observer = NativeObserver(llm, HostTimer()).attach()
    try:
        with observer.window(BOOKING_MEASURED) as window:
            s1 = sched.schedule()
            # the engine replaces the placeholder drafts after schedule(): the frozen
            # snapshot keeps what was scheduled
            s1.scheduled_spec_decode_tokens["a"][:] = [5]
            assert worker.execute_model(s1) is None
            worker.sample_tokens()
            sched.requests["c"].num_preemptions = 1   # c is preempted: a new life
            s2 = sched.schedule()
            sched.requests["c"].num_preemptions = 2   # after schedule(): not this step's
            worker.execute_model(s2)
            worker.sample_tokens()
            # a: 2 tokens (1 draft accepted, 2 rejected); b: all 3 accepted; c: none
            # accepted, but its correction belongs to its life before the preemption
            sched.update_from_output(s1, _model_output({"a": 2, "b": 4, "c": 1}))
            sched.update_from_output(s2, _model_output({"a": 4, "b": 1, "c": 1}))
    finally:
        observer.detach()
    assert sched.updates == [1, 2]
    assert getattr(s2, STAMP_ATTR) == 2
    one, two = window.records
    assert [r.native_iteration_id for r in window.records] == [1, 2]
    assert all(r.timing is not None and r.timing.native_iteration_id == r.native_iteration_id
               for r in window.records)
    # the gained tokens as the output carried them before the scheduler trimmed them
    assert one.accepted == {"a": 2, "b": 4, "c": 1}
    assert two.accepted == {"a": 4, "b": 1, "c": 1}
    snap = one.corrected_snapshot()
    assert snap.corrections == ()
    assert [(r.request_id, r.prompt_tokens, r.new_tokens, r.kv_tokens, r.draft_tokens,
             r.preemptions) for r in snap.requests] == [
        ("a", 64, 1, 70, 3, 0), ("b", 64, 1, 70, 3, 0), ("c", 32, 1, 40, 3, 0)]
    assert snap.queue.running == 3
    assert snap.total_scheduled_tokens == 12
    corrected = two.corrected_snapshot()
    assert corrected.corrections == (RejectionCorrection("a", 0, 1, 2),)
    assert [r.kv_tokens for r in corrected.requests] == [72, 74, 0]
    assert [r.preemptions for r in corrected.requests] == [0, 0, 1]
    assert [r.kv_tokens for r in two.snapshot.requests] == [74, 74, 0]  # the frozen original
    assert observer.attached is False


def test_steps_outside_a_window_are_stamped_only_and_detach_restores():
    llm, sched, worker = _engine()
    before = (set(vars(sched)), set(vars(worker)))
    sched.plan = [_output({"a": 64}, {"a": 0}, {}, new=("a",)),
                  _output({"a": 64}, {"a": 0}, {}, new=("a",))]
    observer = NativeObserver(llm, HostTimer()).attach()
    try:
        s1 = sched.schedule()
        worker.execute_model(s1)
        worker.sample_tokens()
        sched.update_from_output(s1, _model_output({"a": 1}))
        with observer.window(BOOKING_MEASURED) as window:
            s2 = sched.schedule()
            worker.execute_model(s2)
            worker.sample_tokens()
            sched.update_from_output(s2, _model_output({"a": 1}))
    finally:
        observer.detach()
    assert getattr(s1, STAMP_ATTR) == 1
    (record,) = window.records
    assert record.native_iteration_id == 2
    assert record.snapshot.phase == "prefill"
    assert record.snapshot.requests[0].new_tokens == 64
    assert (set(vars(sched)), set(vars(worker))) == before  # no wrapper left


def test_a_step_whose_timing_never_arrives_fails_the_window():
    llm, sched, _worker = _engine()
    sched.plan = [_output({"a": 64}, {"a": 0}, {}, new=("a",))]
    observer = NativeObserver(llm, HostTimer()).attach()
    try:
        with pytest.raises(TimingMissing, match=r"native iteration ids \[1\]"):
            with observer.window(BOOKING_MEASURED):
                sched.schedule()   # scheduled, never executed
    finally:
        observer.detach()


def test_a_window_that_raised_leaves_nothing_to_the_next():
    llm, sched, worker = _engine()
    sched.plan = [_output({"a": 64}, {"a": 0}, {}, new=("a",)),
                  _output({"b": 64}, {"b": 0}, {}, new=("b",))]
    observer = NativeObserver(llm, HostTimer()).attach()
    try:
        def dies_mid_step():
            with observer.window(BOOKING_MEASURED):
                worker.execute_model(sched.schedule())
                raise KeyboardInterrupt   # the window never settles
        with pytest.raises(KeyboardInterrupt):
            dies_mid_step()
        with observer.window(BOOKING_MEASURED) as window:
            s2 = sched.schedule()
            worker.execute_model(s2)
            worker.sample_tokens()
            sched.update_from_output(s2, _model_output({"b": 1}))
    finally:
        observer.detach()
    assert window.ids == [2]
    assert [r.request_id for r in window.records[0].snapshot.requests] == ["b"]


class _FakeEventBase:
    """A CUDA event on a fake device clock (torch's C event): complete once the clock
    passes it. `cuda_event` is its handle, as the driver knows it."""
    clock: ClassVar[dict] = {"now": 0.0, "done_until": 0.0}
    created: ClassVar[list] = []

    def __init__(self, enable_timing=False):
        self.at = None
        self.stream = None
        self.created.append(self)
        self.cuda_event = 1000 + len(self.created)

    def record(self, stream):
        self.stream = stream.name
        self.at = self.clock["now"]

    def query(self):
        return self.at is not None and self.at <= self.clock["done_until"]

    def synchronize(self):
        self.clock["done_until"] = max(self.clock["done_until"], self.at)

    def elapsed_time(self, end):
        return 1e3 * (end.at - self.at)   # milliseconds


class _FakeEvent(_FakeEventBase):
    def record(self, stream=None):   # torch's Python wrapper: the timer goes beneath it
        raise AssertionError("torch.cuda.Event.record (the Python wrapper) was called")


class _FakeDriver:
    """cuEventRecord(event handle, stream handle) on the fake device: 0 is success. `lag`
    records that many seconds early (as if on another, idle stream)."""

    def __init__(self, code: int = 0, fail_after: int | None = None, lag: float = 0.0):
        self.code, self.fail_after, self.lag, self.calls = code, fail_after, lag, 0

    def __call__(self, event, stream):
        self.calls += 1
        if self.code or (self.fail_after is not None and self.calls > self.fail_after):
            return self.code or 700
        (found,) = [e for e in _FakeEventBase.created if e.cuda_event == event.value]
        found.stream = f"stream {stream.value}"
        found.at = found.clock["now"] - self.lag
        return 0


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch's CUDA surface the timer uses, on a fake device: the C stream lookups (counted),
    Stream objects (counted), and events."""
    torch = pytest.importorskip("torch")
    fake = NS(current=(11, 0, 1), lookups=0, streams=[])   # (stream id, device, type)

    def get_stream(device):
        assert device == 0
        fake.lookups += 1
        return fake.current

    def make_stream(stream_id, device_index, device_type):
        fake.streams.append(stream_id)
        return NS(name=f"stream {stream_id}", cuda_stream=stream_id)
    monkeypatch.setattr(_FakeEventBase, "clock", {"now": 0.0, "done_until": 0.0})
    monkeypatch.setattr(_FakeEventBase, "created", [])
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "Stream", make_stream)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentStream", get_stream, raising=False)
    # a kernel spinning `cycles` on the fake device (1 GHz): the clock moves on
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: _FakeEventBase.clock.update(
        now=_FakeEventBase.clock["now"] + cycles / 1e9), raising=False)
    return fake


def _five_steps(timer, fake):
    """5 steps on a pool of 4 events (it runs dry on the 3rd); the engine moves to another
    stream before the 4th; the device finishes the first two steps after the 2nd."""
    clock = _FakeEventBase.clock
    for iid in range(1, 6):
        if iid == 4:
            fake.current = (12, 0, 1)
        clock["now"] = float(iid)
        timer.start(iid)
        clock["now"] = iid + 0.25
        timer.stop(iid)
        if iid == 2:
            clock["done_until"] = 2.5


@pytest.mark.parametrize("driver", [None, _FakeDriver()], ids=["torch record", "driver record"])
def test_cuda_timer_records_on_the_step_stream_and_keeps_samples_when_its_pool_runs_dry(
        fake_cuda, driver):
    from pytest_sdbench.measure.timing import CudaEventTimer
    timer = CudaEventTimer(pool_size=2, driver=driver)
    assert timer.recorder == (CudaEventTimer.TORCH_RECORD if driver is None
                              else CudaEventTimer.DRIVER_RECORD)
    # the pool's CUDA events are made now (torch makes one at its first record)
    assert len(_FakeEventBase.created) == 4
    lookups_made = fake_cuda.lookups
    _five_steps(timer, fake_cuda)
    assert fake_cuda.lookups == lookups_made + 5   # the stream is looked up once a step
    assert fake_cuda.streams[-2:] == [11, 12]     # a Stream object only when it changed
    assert timer.pending() == 3
    # each pair on the stream current at its start: step 3 before the move, step 4 after
    pairs = {(e.stream, e.at) for e in _FakeEventBase.created}
    assert {("stream 11", 3.0), ("stream 11", 3.25)} <= pairs
    assert {("stream 12", 4.0), ("stream 12", 4.25)} <= pairs
    samples = timer.drain()    # at idle: waits for the last, reads everything
    assert [(s.native_iteration_id, s.seconds) for s in samples] == [
        (i, pytest.approx(0.25)) for i in range(1, 6)]
    assert all(s.source == "cuda_event" for s in samples)
    assert timer.pending() == 0
    assert timer.poll() == []
    # the two completed pairs' events were reused for steps 3 and 4; step 5 found the pool
    # dry with nothing completed, and made two more
    assert len(_FakeEventBase.created) == 4 + 2
    if driver is not None:   # every step's record went through the driver, GIL held
        assert driver.calls == 1 + 2 * 5   # the self-test's, then two a step


@pytest.mark.parametrize("driver, note", [
    (_FakeDriver(code=201), "cuEventRecord returned 201"),
    (_FakeDriver(lag=0.002), "-1.0000 ms read across a 1000000-cycle kernel, expected >= 0.1"),
], ids=["refused", "records elsewhere"])
def test_cuda_timer_keeps_torchs_record_when_the_driver_fails_its_self_test(fake_cuda, driver,
                                                                          note):
    from pytest_sdbench.measure.timing import CudaEventTimer
    timer = CudaEventTimer(pool_size=2, driver=driver)
    assert timer.recorder == CudaEventTimer.TORCH_RECORD
    assert note in timer.recorder_note
    _five_steps(timer, fake_cuda)
    assert [s.native_iteration_id for s in timer.drain()] == [1, 2, 3, 4, 5]


def test_a_driver_record_failing_on_the_hot_path_fails_the_step(fake_cuda):
    from pytest_sdbench.measure.timing import CudaEventRecordError, CudaEventTimer
    timer = CudaEventTimer(pool_size=2, driver=_FakeDriver(fail_after=2))
    timer.start(1)   # the self-test's record, then this one
    with pytest.raises(CudaEventRecordError, match="iteration 1"):
        timer.stop(1)
