"""Facts about the engine as it executes: execution identity, the settings that shape a
step, and KV capacity. Each identity fact is resolved (a value and where it was read) or
unresolved (why not); never guessed, never looked up on a network."""

from __future__ import annotations

from dataclasses import dataclass

from .contract import IDENTITY_RESOLVED, IDENTITY_UNRESOLVED, IdentityStatus

IdentityValue = str | int | float | bool | tuple[int, ...] | None


@dataclass(frozen=True)
class IdentityField:
    """Resolved (value and source) or unresolved (reason)."""
    status: IdentityStatus
    value: IdentityValue = None
    source: str | None = None
    reason: str | None = None

    @classmethod
    def of(cls, value: IdentityValue, source: str) -> IdentityField:
        return cls(IDENTITY_RESOLVED, value=value, source=source)

    @classmethod
    def unknown(cls, reason: str) -> IdentityField:
        return cls(IDENTITY_UNRESOLVED, reason=reason)

    @property
    def resolved(self) -> bool:
        return self.status == IDENTITY_RESOLVED


@dataclass(frozen=True)
class ModelIdentity:
    """One model as executed (target or draft)."""
    model: IdentityField
    revision: IdentityField
    config_digest: IdentityField
    architecture: IdentityField
    dtype: IdentityField
    quantization: IdentityField
    load_format: IdentityField


@dataclass(frozen=True)
class EngineSettings:
    """Every effective engine setting that shapes a step, as the started engine holds it."""
    max_num_seqs: IdentityField
    max_num_batched_tokens: IdentityField
    max_model_len: IdentityField
    gpu_memory_utilization: IdentityField
    kv_cache_memory_bytes: IdentityField
    kv_cache_dtype: IdentityField
    block_size: IdentityField
    cudagraph_capture_sizes: IdentityField
    enable_chunked_prefill: IdentityField
    enable_prefix_caching: IdentityField
    enforce_eager: IdentityField
    # The engine arguments the user gave (--sdbench-engine-arg, engine config file), by
    # vLLM's name, each value as JSON text: what was asked, beside what took effect.
    user_engine_args: dict[str, str]


@dataclass(frozen=True)
class ExecutionIdentity:
    """Target and draft as executed, and how the engine ran them."""
    target: ModelIdentity
    draft: ModelIdentity
    method: IdentityField
    draft_depth: IdentityField
    engine: IdentityField
    engine_version: IdentityField
    attention_backend: IdentityField
    tensor_parallel_size: IdentityField
    pipeline_parallel_size: IdentityField
    distributed_executor_backend: IdentityField
    communication: IdentityField   # the collective backend between ranks, and its version
    device: IdentityField
    device_name: IdentityField
    async_scheduling: IdentityField
    cudagraph_mode: IdentityField
    acceptance_control: IdentityField
    settings: EngineSettings


@dataclass(frozen=True)
class KVCacheGroup:
    """One KV cache group as the worker allocated it."""
    layer_names: tuple[str, ...]
    block_size: int
    spec_type: str
    draft_layers: tuple[str, ...]


@dataclass(frozen=True)
class KVCapacity:
    """KV capacity as the engine reported it after start-up; never estimated."""
    num_blocks: int
    block_size: int
    tokens: int
    groups: tuple[KVCacheGroup, ...]
    draft_layer_names: tuple[str, ...]
    source: str
    bytes_per_token: IdentityField       # KV bytes one token takes over all layers of a rank
    rank_num_blocks: tuple[int, ...]     # blocks each rank allocated, by rank


__all__ = ["IDENTITY_RESOLVED", "IDENTITY_UNRESOLVED", "EngineSettings", "ExecutionIdentity",
           "IdentityField", "IdentityValue", "KVCacheGroup", "KVCapacity", "ModelIdentity"]
