"""Start and stop the engine: an in-process vLLM LLM with an EAGLE3 draft."""

from __future__ import annotations

import gc
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

from ..host import EngineRegistration
from ..wire.contract import FIRST_PROMPT_TOKEN, GENERATION_SAMPLING
from ..wire.identity import ExecutionIdentity, KVCapacity
from . import compat, ranks
from .facts import resolve_identity, resolve_kv_capacity
from .spec import EngineSpec

PROBE_PROMPT_TOKENS, PROBE_MAX_TOKENS = 48, 16


@dataclass(frozen=True)
class ServingProbe:
    """An ordinary request's greedy output, which attributes the engine instances hold, and
    the synthetic acceptance rates: taken right after start-up and again after a benchmark,
    they must be equal (the tokens only under natural acceptance: synthetic acceptance
    accepts drafts at random)."""
    tokens: tuple[int, ...]
    scheduler_attrs: frozenset
    worker_attrs: frozenset
    dispatcher_attrs: frozenset     # the V2 runner's cudagraph_manager (empty without one)
    synthetic_rates: tuple[float, ...] | None


@dataclass
class SdbenchEngine:
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

    @property
    def block_size(self) -> int:
        return self.kv_capacity.block_size

    def _setting(self, name: str) -> int:
        field = getattr(self.identity.settings, name)
        if not field.resolved:
            raise RuntimeError(f"engine setting {name} is unresolved: {field.reason}")
        return int(field.value)

    @property
    def max_num_seqs(self) -> int:
        return self._setting("max_num_seqs")

    @property
    def max_num_batched_tokens(self) -> int:
        return self._setting("max_num_batched_tokens")

    @property
    def max_model_len(self) -> int:
        return self._setting("max_model_len")

    @property
    def vocab_size(self) -> int:
        return int(compat.vllm_config(self.llm).model_config.get_vocab_size())

    @property
    def acceptance_control(self) -> str:
        return self.spec.acceptance_control

    def fresh_tokens(self, n: int) -> list[int]:
        """n prompt token ids from one stream per engine, so prompts never repeat on it."""
        top = self.vocab_size
        return [self.prompt_rng.randrange(FIRST_PROMPT_TOKEN, top) for _ in range(n)]

    def generate(self, prompts: list[list[int]], sampling_params):
        if self.closed:
            raise RuntimeError("engine is shut down")
        return self.llm.generate([{"prompt_token_ids": p} for p in prompts], sampling_params,
                                 use_tqdm=False)

    def probe(self) -> ServingProbe:
        """Serve one ordinary greedy request and note the engine's installed attributes."""
        from vllm import SamplingParams
        span = self.vocab_size - FIRST_PROMPT_TOKEN
        prompt = [(7 * i) % span + FIRST_PROMPT_TOKEN for i in range(PROBE_PROMPT_TOKENS)]
        params = SamplingParams(max_tokens=PROBE_MAX_TOKENS, **GENERATION_SAMPLING)
        (output,) = self.generate([prompt], params)
        dispatcher = compat.graph_dispatcher(self.llm)
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
        """Stop the engine core and free its memory; idempotent."""
        if self.closed:
            return
        self.closed = True
        if self.registration is not None:
            self.registration.close()
        try:
            self.llm.llm_engine.engine_core.shutdown()
        finally:
            self.llm = None
            gc.collect()
            if self.device == "cuda":
                import torch
                torch.cuda.empty_cache()


def start_engine(spec: EngineSpec):
    """The started engine of `spec`: in this process, or, for tensor_parallel_size > 1, in
    that many rank processes behind a TensorParallelEngine (engine/tp.py). A rank process
    itself (RANK_SERVER_ENV set) starts its own rank's engine here."""
    from .tp import RANK_SERVER_ENV, TensorParallelEngine
    if spec.tensor_parallel_size > 1 and not os.environ.get(RANK_SERVER_ENV):
        return TensorParallelEngine.start(spec)
    return start_local_engine(spec)


def start_local_engine(spec: EngineSpec) -> SdbenchEngine:
    compat.prepare_environment()
    from vllm import LLM  # imported late: the environment above must be set first
    device = compat.device_type()
    kwargs = compat.engine_kwargs(spec, device)
    started = time.perf_counter()
    llm = LLM(**kwargs)
    seconds = time.perf_counter() - started
    engine = SdbenchEngine(spec=spec, llm=llm, device=device, prompt_rng=random.Random(spec.seed),
                           identity=resolve_identity(llm, spec),
                           kv_capacity=resolve_kv_capacity(llm), start_seconds=seconds)
    if ranks.rank() == 0:  # one registry entry per engine, however many ranks it has
        engine.registration = EngineRegistration()
    engine.baseline = engine.probe()
    return engine
