"""What engine to start: the user's choices, validated, before vLLM is imported.

A field left None is not passed to vLLM, so vLLM's own default for the device applies.
The oracle presets set small limits of their own (presets.Preset.engine_limits) so that
the oracle fits a small VRAM mark; `vllm_defaults` drops them. The user's engine arguments
(`user_engine_args`) are applied last, over everything."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..wire.contract import ACCEPTANCE_NATURAL, ACCEPTANCE_SYNTHETIC, DEFAULT_DRAFT_DEPTH


@dataclass(frozen=True)
class EngineSpec:
    """Target + EAGLE3 draft and the engine settings asked for (None: vLLM's default)."""
    target: str
    draft: str
    preset: str | None = None           # the preset these paths were built from, if any
    oracle_limits: bool = False         # the preset's small oracle limits are applied
    draft_depth: int = DEFAULT_DRAFT_DEPTH
    load_format: str | None = None      # "dummy" for presets (no weights on disk)
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_memory_bytes: int | None = None
    block_size: int | None = None
    enforce_eager: bool | None = None
    cudagraph_capture_sizes: tuple[int, ...] = ()
    synthetic_acceptance_length: float | None = None  # CUDA only: vLLM's synthetic sampler
    async_scheduling: bool | None = None
    seed: int = 0
    # Tensor parallel: N rank processes, each running the engine in-process under vLLM's
    # external_launcher (engine/tp.py starts them); 1: the single-process executor.
    tensor_parallel_size: int = 1
    # --sdbench-cpus: every thread of the engine's process pinned to these CPUs (None: the
    # process's own mask, left alone); the placement read after start-up is recorded.
    cpus: tuple[int, ...] | None = None
    target_revision: str | None = None  # given by the user (recorded with source 'user')
    draft_revision: str | None = None
    extra: dict = field(default_factory=dict, hash=False)  # further LLM(...) arguments
    # The vLLM engine arguments the user gave, by vLLM's name; applied last, over the above.
    user_engine_args: dict = field(default_factory=dict, hash=False)

    @property
    def acceptance_control(self) -> str:
        return (ACCEPTANCE_NATURAL if self.synthetic_acceptance_length is None
                else ACCEPTANCE_SYNTHETIC)

    def __post_init__(self):
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size: must be >= 1, got "
                             f"{self.tensor_parallel_size}")
        if self.draft_depth < 1:
            raise ValueError(f"draft_depth: must be >= 1, got {self.draft_depth}")
        al = self.synthetic_acceptance_length
        if al is not None and not 1.0 <= al <= self.draft_depth + 1:
            raise ValueError(f"synthetic_acceptance_length: must lie in [1, "
                             f"{self.draft_depth + 1}], got {al}")
