"""What engine to start: the user's choices, validated, before vLLM is imported."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..contract import ACCEPTANCE_NATURAL, ACCEPTANCE_SYNTHETIC, DEFAULT_DRAFT_DEPTH


@dataclass(frozen=True)
class EngineSpec:
    """Target + EAGLE3 draft and the engine limits the collection relies on."""
    target: str
    draft: str
    preset: str | None = None           # the preset these paths were built from, if any
    draft_depth: int = DEFAULT_DRAFT_DEPTH
    max_model_len: int = 4096
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 4096
    kv_cache_memory_bytes: int = 1 << 30
    block_size: int | None = None       # KV block; None: the device's (compat.BLOCK_SIZE)
    enforce_eager: bool = True          # CPU never captures graphs; CUDA may opt in
    cudagraph_capture_sizes: tuple[int, ...] = ()
    synthetic_acceptance_length: float | None = None  # CUDA only: vLLM's synthetic sampler
    async_scheduling: bool | None = None  # None: vLLM's own default for the platform
    seed: int = 0
    extra: dict = field(default_factory=dict, hash=False)

    @property
    def acceptance_control(self) -> str:
        return (ACCEPTANCE_NATURAL if self.synthetic_acceptance_length is None
                else ACCEPTANCE_SYNTHETIC)

    def __post_init__(self):
        if self.draft_depth < 1:
            raise ValueError(f"draft_depth: must be >= 1, got {self.draft_depth}")
        al = self.synthetic_acceptance_length
        if al is not None and not 1.0 <= al <= self.draft_depth + 1:
            raise ValueError(f"synthetic_acceptance_length: must lie in [1, "
                             f"{self.draft_depth + 1}], got {al}")
