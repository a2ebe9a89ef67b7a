"""Start and stop the engine: an in-process vLLM LLM with an EAGLE3 draft."""

from __future__ import annotations

import gc
import random
import time
from dataclasses import dataclass, field

from ..contract import FIRST_PROMPT_TOKEN, GENERATION_SAMPLING
from . import compat
from .facts import ExecutionIdentity, KVCapacity, resolve_identity, resolve_kv_capacity
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
    synthetic_rates: tuple[float, ...] | None


@dataclass
class SdbenchEngine:
    """A started engine and the facts resolved right after start-up."""
    spec: EngineSpec
    llm: object
    device: str
    identity: ExecutionIdentity
    kv_capacity: KVCapacity
    start_seconds: float
    baseline: "ServingProbe | None" = None
    closed: bool = False
    prompt_rng: random.Random = field(default_factory=random.Random, repr=False)

    @property
    def block_size(self) -> int:
        return self.kv_capacity.block_size

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

    def probe(self) -> "ServingProbe":
        """Serve one ordinary greedy request and note the engine's installed attributes."""
        from vllm import SamplingParams
        span = self.vocab_size - FIRST_PROMPT_TOKEN
        prompt = [(7 * i) % span + FIRST_PROMPT_TOKEN for i in range(PROBE_PROMPT_TOKENS)]
        params = SamplingParams(max_tokens=PROBE_MAX_TOKENS, **GENERATION_SAMPLING)
        (output,) = self.generate([prompt], params)
        return ServingProbe(tokens=tuple(output.outputs[0].token_ids),
                            scheduler_attrs=frozenset(vars(compat.scheduler(self.llm))),
                            worker_attrs=frozenset(vars(compat.worker(self.llm))),
                            synthetic_rates=compat.synthetic_rates(self.llm))

    def shutdown(self) -> None:
        """Stop the engine core and free its memory; idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            self.llm.llm_engine.engine_core.shutdown()
        finally:
            self.llm = None
            gc.collect()
            if self.device == "cuda":
                import torch
                torch.cuda.empty_cache()


def start_engine(spec: EngineSpec) -> SdbenchEngine:
    compat.prepare_environment()
    from vllm import LLM  # imported late: the environment above must be set first
    device = compat.device_type()
    kwargs = compat.engine_kwargs(spec, device)
    started = time.perf_counter()
    llm = LLM(**kwargs)
    seconds = time.perf_counter() - started
    engine = SdbenchEngine(spec=spec, llm=llm, device=device, prompt_rng=random.Random(spec.seed),
                           identity=resolve_identity(llm, spec.acceptance_control),
                           kv_capacity=resolve_kv_capacity(llm), start_seconds=seconds)
    engine.baseline = engine.probe()
    return engine
