"""The step watchdog (launch.StepWatchdog) on a stand-in LLM whose step loop follows a plan,
by a fake clock: a loop that makes progress (output, or computed tokens) is never stopped,
one that makes none for longer than the bound raises EngineStalled, and the bound is the
spec's stall_seconds (by default SDBENCH_STALL_SECONDS when set). No engine starts."""

from types import SimpleNamespace

import pytest

from pytest_sdbench.engine import launch
from pytest_sdbench.engine.launch import SdbenchEngine, StepWatchdog
from pytest_sdbench.engine.spec import (
    DEFAULT_STALL_SECONDS,
    STALL_ENV,
    EngineSpec,
    default_stall_seconds,
)
from pytest_sdbench.engine.surface import EngineStalled

OUTPUT = ["a finished request"]


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class _LLMEngine:
    """vLLM's LLMEngine as the watchdog sees it: step() (a class attribute, as vLLM's) and,
    for compat.computed_tokens, the in-process engine core's scheduler requests."""

    def __init__(self, plan, clock: _Clock):
        self.plan, self.clock, self.steps = list(plan), clock, 0
        self.request = SimpleNamespace(num_computed_tokens=0)
        core = SimpleNamespace(scheduler=SimpleNamespace(requests={"r-0": self.request}))
        self.engine_core = SimpleNamespace(engine_core=core, shutdown=lambda: None)

    def step(self):
        outputs, tokens, seconds = self.plan.pop(0)
        self.steps += 1
        self.clock.now += seconds
        self.request.num_computed_tokens += tokens
        return outputs


class _LLM:
    """vLLM's LLM as SdbenchEngine.generate uses it: generate() steps until the plan is
    done, as LLM._run_engine loops on llm_engine.step()."""

    def __init__(self, plan, clock: _Clock):
        self.llm_engine = _LLMEngine(plan, clock)

    def generate(self, prompts, sampling_params, use_tqdm=False):
        outputs = []
        while self.llm_engine.plan:
            outputs += self.llm_engine.step()
        return outputs


@pytest.fixture
def clock(monkeypatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(launch, "time", SimpleNamespace(monotonic=fake.monotonic))
    return fake


def _run(plan, clock: _Clock, bound: float) -> _LLM:
    llm = _LLM(plan, clock)
    with StepWatchdog(llm, bound):
        llm.generate([], None)
    return llm


def test_a_loop_that_returns_output_is_never_stopped(clock):
    llm = _run([(OUTPUT, 0, 50.0)] * 10, clock, bound=10.0)
    assert llm.llm_engine.steps == 10


def test_steps_that_only_compute_tokens_are_progress(clock):
    # chunked prefill: no output for many steps, but the scheduler's tokens grow
    llm = _run([([], 16, 4.0)] * 10 + [(OUTPUT, 16, 4.0)], clock, bound=5.0)
    assert llm.llm_engine.steps == 11


def test_progress_restarts_the_bound(clock):
    quiet, progress = ([], 0, 2.0), ([], 8, 2.0)
    llm = _run([quiet, progress] * 5 + [quiet, (OUTPUT, 0, 2.0)], clock, bound=3.0)
    assert llm.llm_engine.steps == 12


def test_no_progress_for_longer_than_the_bound_raises_engine_stalled(clock):
    llm = _LLM([([], 0, 1.0)] * 10, clock)
    with pytest.raises(EngineStalled, match=rf"no progress for 4 s \(bound 3 s, {STALL_ENV} or "
                       r"the stall-seconds option\)"), \
            StepWatchdog(llm, 3.0):
        llm.generate([], None)
    assert llm.llm_engine.steps == 4    # stopped at the first step past the bound
    assert "step" not in vars(llm.llm_engine)    # the wrapper is gone, vLLM's step is back


def test_an_instance_step_is_put_back(clock):
    llm = _LLM([(OUTPUT, 0, 1.0)], clock)
    own = llm.llm_engine.step
    llm.llm_engine.step = own   # type: ignore[method-assign]
    with StepWatchdog(llm, 3.0):
        assert llm.llm_engine.step is not own
        llm.generate([], None)
    assert llm.llm_engine.step is own


@pytest.fixture
def own_process_state(monkeypatch):
    """A stand-in engine's shutdown must not tear down this process's torch.distributed
    state: it belongs to the session's real engine when the whole suite runs."""
    monkeypatch.setattr(launch.compat, "release_distributed", lambda: None)


def _engine(llm: _LLM, **spec) -> SdbenchEngine:
    """A stand-in LLM's engine, its spec built now (the default bound read now)."""
    return SdbenchEngine(spec=EngineSpec(target="target", draft="draft", **spec), llm=llm,
                         device="cpu", identity=None,  # type: ignore[arg-type]
                         kv_capacity=None, start_seconds=0.0)  # type: ignore[arg-type]


def test_generate_is_bounded_by_the_environments_bound_and_fails_the_engine(
        clock, monkeypatch, own_process_state):
    monkeypatch.setenv(STALL_ENV, "2.5")
    llm = _LLM([([], 0, 1.0)] * 10, clock)
    engine = _engine(llm)
    with pytest.raises(EngineStalled, match=rf"bound 2.5 s, {STALL_ENV}"):
        engine.generate([[5, 6]], None)
    assert llm.llm_engine.steps == 3
    assert (engine.failure or "").startswith("EngineStalled: the engine's step loop made no ")
    assert engine.closed


def test_the_specs_bound_wins_over_the_environment(clock, monkeypatch, own_process_state):
    monkeypatch.setenv(STALL_ENV, "100")
    llm = _LLM([([], 0, 1.0)] * 10, clock)
    with pytest.raises(EngineStalled, match=r"no progress for 2 s \(bound 1.5 s, "):
        _engine(llm, stall_seconds=1.5).generate([[5, 6]], None)
    assert llm.llm_engine.steps == 2


def test_the_default_bound(monkeypatch):
    monkeypatch.delenv(STALL_ENV, raising=False)
    assert default_stall_seconds() == DEFAULT_STALL_SECONDS
    assert EngineSpec(target="t", draft="d").stall_seconds == DEFAULT_STALL_SECONDS
    monkeypatch.setenv(STALL_ENV, "0.25")
    assert default_stall_seconds() == 0.25
    assert EngineSpec(target="t", draft="d").stall_seconds == 0.25


@pytest.mark.parametrize("text", ["soon", "", "0", "-3", "nan"])
def test_a_bad_bound_is_refused_naming_the_variable_and_value(monkeypatch, text):
    monkeypatch.setenv(STALL_ENV, text)
    with pytest.raises(ValueError, match=f"^{STALL_ENV}: .*got {text!r}$"):
        default_stall_seconds()
