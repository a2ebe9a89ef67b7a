"""Start and stop the engine: an in-process vLLM LLM with an EAGLE3 draft.

An engine that failed (an exception, a pytest-timeout or a KeyboardInterrupt out of a
request it was serving, or out of a collection on it) is never used again: it is marked
unusable with the cause and shut down at once. vLLM leaves the requests of an interrupted
step half-scheduled, and its next generate() then steps forever without progress (seen:
LLM._run_engine at 100% CPU for 10 minutes, memory growing). Every generate() also runs
under a step watchdog of our own: a step loop that makes no progress for the spec's
stall_seconds (--sdbench-stall-seconds / `sdbench collect --stall-seconds`; default
$SDBENCH_STALL_SECONDS, else 120) is aborted with EngineStalled.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..wire.contract import FIRST_PROMPT_TOKEN, GENERATION_SAMPLING
from ..wire.identity import ExecutionIdentity, KVCapacity
from ..wire.model import CpuPlacement
from ..wire.records import ObserverCost
from . import compat, placement, serving, step_reading
from .facts import resolve_identity, resolve_kv_capacity
from .host import EngineRegistration
from .spec import STALL_ENV, EngineSpec
from .surface import (
    EngineStalled,
    EngineSurface,
    InProcessEngine,
    ServingProbe,
)

if TYPE_CHECKING:   # the proxy's module is loaded only where a tensor-parallel engine starts
    from .tp import TensorParallelEngine

PROBE_PROMPT_TOKENS, PROBE_MAX_TOKENS = 48, 16


class StepWatchdog:
    """Bounds LLM._run_engine's loop: wraps llm_engine.step (an instance attribute, removed
    afterwards) and raises EngineStalled when no step has returned output or advanced the
    scheduler's computed tokens for `bound` seconds. It runs between steps, outside the
    timed model step."""

    def __init__(self, llm, bound: float):
        self.llm, self.bound = llm, bound

    def __enter__(self) -> StepWatchdog:
        engine = self.llm.llm_engine
        self._had = "step" in vars(engine)
        original = engine.step
        last = {"at": time.monotonic(), "tokens": compat.computed_tokens(self.llm)}

        def step(*args, **kwargs):
            outputs = original(*args, **kwargs)
            now, tokens = time.monotonic(), compat.computed_tokens(self.llm)
            if outputs or tokens != last["tokens"]:
                last.update(at=now, tokens=tokens)
            elif now - last["at"] > self.bound:
                raise EngineStalled(f"the engine's step loop made no progress for "
                                    f"{now - last['at']:.0f} s (bound {self.bound:g} s, "
                                    f"{STALL_ENV} or the stall-seconds option); the "
                                    "engine is shut down")
            return outputs
        self._original = original
        engine.step = step
        return self

    def __exit__(self, *exc) -> None:
        engine = self.llm.llm_engine
        if self._had:
            engine.step = self._original
        else:
            vars(engine).pop("step", None)


@dataclass
class SdbenchEngine(EngineSurface):
    """A started engine and the facts resolved right after start-up."""
    spec: EngineSpec
    llm: Any    # vllm.LLM (imported lazily; None once shut down)
    device: str
    identity: ExecutionIdentity
    kv_capacity: KVCapacity
    start_seconds: float
    baseline: ServingProbe | None = None
    closed: bool = False
    registration: EngineRegistration | None = field(default=None, repr=False)
    prompt_rng: random.Random = field(default_factory=random.Random, repr=False)
    failure: str | None = None     # why the engine is unusable (it is then shut down)
    restarts: int = 0              # fresh engines started in place of failed ones
    saved_env: dict = field(default_factory=dict, repr=False)   # restored at shutdown
    dist_file: str | None = None   # vLLM's FileStore file (vllm_dist_*), removed at shutdown
    cpu_placement: CpuPlacement | None = None   # the threads' CPUs, read after start-up
    observer_cost: ObserverCost | None = None   # measured before its first collection
    saved_affinity: tuple[int, ...] | None = field(default=None, repr=False)  # --cpus: undone

    def restart(self) -> None:
        """Start a fresh engine of the same spec in this object's place (the fixtures that
        hold it see the new one); counts the restart."""
        self.shutdown()
        self.restarts += 1     # counted before the start: a start that fails counts too
        fresh = start_engine(self.spec)
        restarts = self.restarts
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(fresh, f.name))
        self.restarts = restarts

    @property
    def vocab_size(self) -> int:
        return int(compat.vllm_config(self.llm).model_config.get_vocab_size())


    def fresh_tokens(self, n: int) -> list[int]:
        """n prompt token ids from one stream per engine, so prompts never repeat on it."""
        self.check_usable()
        top = self.vocab_size
        return self.prompt_rng.choices(range(FIRST_PROMPT_TOKEN, top), k=n)

    def generate(self, prompts: list[list[int]], sampling_params,
                 stop: Callable[[], bool] | None = None):
        """Serve the prompts under the step watchdog; anything raised out of the engine
        (including KeyboardInterrupt and pytest-timeout's) marks it unusable and shuts it
        down before the exception goes on. `stop`: asked after every engine step; once it
        holds, the requests still running are aborted (serving.generate_until) and only
        those that finished before have outputs."""
        self.check_usable()
        try:
            with StepWatchdog(self.llm, self.spec.stall_seconds):
                if stop is not None:
                    return serving.generate_until(self.llm, prompts, sampling_params, stop)
                return self.llm.generate([{"prompt_token_ids": p} for p in prompts],
                                         sampling_params, use_tqdm=False)
        except BaseException as exc:
            self.fail(exc)
            raise

    def generate_admitting(self, prompts: list[list[int]], sampling_params,
                           later: list[list[int]], later_params, admit: Callable[[], bool],
                           done: Callable[[list[str]], bool]) -> tuple[list[str], list[str]]:
        """A run of `prompts` into which `later` is added once admit() holds, stopped once
        done(later's ids) holds (serving.generate_admitting), under the step watchdog; a
        failure marks the engine unusable as generate()'s does. The internal ids of both."""
        self.check_usable()
        try:
            with StepWatchdog(self.llm, self.spec.stall_seconds):
                return serving.generate_admitting(self.llm, prompts, sampling_params, later,
                                                  later_params, admit, done)
        except BaseException as exc:
            self.fail(exc)
            raise

    def probe(self) -> ServingProbe:
        """Serve one ordinary greedy request and note the engine's installed attributes."""
        from vllm import SamplingParams
        self.check_usable()
        span = self.vocab_size - FIRST_PROMPT_TOKEN
        prompt = [(7 * i) % span + FIRST_PROMPT_TOKEN for i in range(PROBE_PROMPT_TOKENS)]
        params = SamplingParams(max_tokens=PROBE_MAX_TOKENS, **GENERATION_SAMPLING)
        (output,) = self.generate([prompt], params)
        dispatcher = step_reading.graph_dispatcher(self.llm)
        return ServingProbe(tokens=tuple(output.outputs[0].token_ids),
                            scheduler_attrs=frozenset(vars(compat.scheduler(self.llm))),
                            worker_attrs=frozenset(vars(compat.worker(self.llm))),
                            dispatcher_attrs=frozenset(vars(dispatcher)) if dispatcher
                            is not None else frozenset(),
                            synthetic_rates=compat.synthetic_rates(self.llm))

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """The CUDA devices this process's engine runs on (none on CPU)."""
        if self.device != "cuda":
            return ()
        import torch
        return (torch.cuda.current_device(),)

    def shutdown(self) -> None:
        """Stop the engine core (executor, worker, scheduler, distributed state), free its
        memory, remove its registry entry and FileStore file, and restore the environment
        variables the start changed; idempotent, and complete even when a step fails."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.llm is not None:
                compat.shutdown_engine(self.llm)
        finally:
            self.llm = None
            gc.collect()
            if self.device == "cuda":
                import torch
                torch.cuda.empty_cache()
            if self.dist_file:
                _remove(self.dist_file)
            if self.registration is not None:
                self.registration.close()
            if self.saved_affinity is not None:
                placement.unpin(self.saved_affinity)
            compat.restore_environment(self.saved_env)


if TYPE_CHECKING:   # mypy holds SdbenchEngine to the protocol the collector types it by
    def _conforms(engine: SdbenchEngine) -> InProcessEngine:
        return engine


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def start_engine(spec: EngineSpec) -> SdbenchEngine | TensorParallelEngine:
    """The started engine of `spec`: in this process, or, for tensor_parallel_size > 1, in
    that many rank processes behind a TensorParallelEngine (engine/tp.py). A rank process
    itself (RANK_SERVER_ENV set) starts its own rank's engine here."""
    from .tp import RANK_SERVER_ENV, TensorParallelEngine
    if spec.tensor_parallel_size > 1 and not os.environ.get(RANK_SERVER_ENV):
        return TensorParallelEngine.start(spec)
    return start_local_engine(spec)


def _launched_as_rank_0() -> bool:
    """This process is a single-rank engine's, or rank 0 of a tensor-parallel one. Asked
    before the engine starts, when torch.distributed is not up yet (ranks.rank() says 0 on
    every rank then): the launcher's RANK tells."""
    from .tp import RANK_SERVER_ENV
    return not os.environ.get(RANK_SERVER_ENV) or os.environ.get("RANK", "0") == "0"


def start_local_engine(spec: EngineSpec) -> SdbenchEngine:
    """Start the engine; the environment it needs is set for its lifetime. A start that
    fails leaves nothing behind (the environment restored, the registry entry removed)."""
    saved_env = compat.prepare_environment()
    # Before the start, so that a concurrent start sees it; one entry per engine, however
    # many ranks it has (rank 0's), or each rank would count its siblings as contention.
    registration = EngineRegistration() if _launched_as_rank_0() else None
    # Pinned before the start, so that every thread the engine creates inherits the mask.
    saved_affinity = placement.pin(spec.cpus) if spec.cpus else None
    try:
        # vLLM is imported late (the environment above must be set first) and here, not in
        # the frame that holds the LLM: its import keeps a traceback whose frames reach back
        # to the importer, and a frame kept alive keeps its locals (a shut-down engine).
        compat.llm_class()
        return _started_engine(spec, saved_env, registration, saved_affinity)
    except BaseException:
        try:
            compat.release_distributed()
        finally:
            if registration is not None:
                registration.close()
            if saved_affinity is not None:
                placement.unpin(saved_affinity)
            compat.restore_environment(saved_env)
        raise


def _started_engine(spec: EngineSpec, saved_env: dict,
                    registration: EngineRegistration | None,
                    saved_affinity: tuple[int, ...] | None = None) -> SdbenchEngine:
    device = compat.device_type()
    kwargs = compat.engine_kwargs(spec, device)
    started = time.perf_counter()
    llm = compat.llm_class()(**kwargs)
    seconds = time.perf_counter() - started
    engine = SdbenchEngine(spec=spec, llm=llm, device=device,
                           prompt_rng=random.Random(spec.seed),
                           identity=resolve_identity(llm, spec),
                           kv_capacity=resolve_kv_capacity(llm), start_seconds=seconds,
                           registration=registration, saved_env=saved_env,
                           dist_file=compat.distributed_store_file(llm),
                           cpu_placement=placement.read_placement(spec.cpus),
                           saved_affinity=saved_affinity)
    try:
        if registration is not None:
            registration.record(dist_file=engine.dist_file)
        engine.baseline = engine.probe()
    except BaseException:
        engine.shutdown()   # then the caller's clean-up finds nothing left to undo
        raise
    return engine
