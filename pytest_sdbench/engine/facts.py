"""Facts about the engine as it executes: execution identity and KV capacity. Resolved
once, right after start-up, from the engine's own configuration; frozen afterwards.
A field that cannot be resolved says why; nothing is guessed or looked up on a network."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..contract import IDENTITY_RESOLVED, IDENTITY_UNRESOLVED
from . import compat


@dataclass(frozen=True)
class IdentityField:
    """Resolved (value and source) or unresolved (reason)."""
    status: Literal["resolved", "unresolved"]
    value: str | int | float | bool | None = None
    source: str | None = None
    reason: str | None = None

    @classmethod
    def of(cls, value, source: str) -> "IdentityField":
        return cls(IDENTITY_RESOLVED, value=value, source=source)

    @classmethod
    def unknown(cls, reason: str) -> "IdentityField":
        return cls(IDENTITY_UNRESOLVED, reason=reason)


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
    device: IdentityField
    device_name: IdentityField
    async_scheduling: IdentityField
    cudagraph_mode: IdentityField
    acceptance_control: IdentityField


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


def _config_digest(path: str) -> IdentityField:
    config = Path(path) / "config.json"
    if not config.is_file():
        return IdentityField.unknown(f"no config.json under {path}")
    digest = hashlib.sha256(config.read_bytes()).hexdigest()
    return IdentityField.of(f"sha256:{digest}", f"sha256 of {config}")


def _model_identity(model_config, load_format: str, where: str) -> ModelIdentity:
    revision = getattr(model_config, "revision", None)
    archs = list(getattr(model_config, "architectures", None) or [])
    quant = getattr(model_config, "quantization", None)
    return ModelIdentity(
        model=IdentityField.of(str(model_config.model), f"{where}.model"),
        revision=(IdentityField.of(revision, f"{where}.revision") if revision else
                  IdentityField.unknown("local checkpoint without a revision; nothing is "
                                        "looked up on a network")),
        config_digest=_config_digest(model_config.model),
        architecture=(IdentityField.of(archs[0], f"{where}.architectures") if archs else
                      IdentityField.unknown(f"{where}.architectures is empty")),
        dtype=IdentityField.of(str(model_config.dtype).removeprefix("torch."), f"{where}.dtype"),
        quantization=IdentityField.of(quant or "none", f"{where}.quantization"),
        load_format=IdentityField.of(load_format, "vllm_config.load_config.load_format"),
    )


def resolve_identity(llm, acceptance_control: str) -> ExecutionIdentity:
    config = compat.vllm_config(llm)
    spec = config.speculative_config
    load_format = str(config.load_config.load_format)
    backends = compat.attention_backends(llm)
    graph_mode = getattr(config.compilation_config, "cudagraph_mode", None)
    return ExecutionIdentity(
        target=_model_identity(config.model_config, load_format, "vllm_config.model_config"),
        draft=_model_identity(spec.draft_model_config, load_format,
                              "vllm_config.speculative_config.draft_model_config"),
        method=IdentityField.of(spec.method, "vllm_config.speculative_config.method"),
        draft_depth=IdentityField.of(int(spec.num_speculative_tokens),
                                     "vllm_config.speculative_config.num_speculative_tokens"),
        engine=IdentityField.of("vllm", "import vllm"),
        engine_version=IdentityField.of(compat.vllm_version(), "vllm.__version__"),
        attention_backend=(IdentityField.of(",".join(backends), "model_runner.attn_groups")
                           if backends else IdentityField.unknown("no attention group")),
        tensor_parallel_size=IdentityField.of(
            int(config.parallel_config.tensor_parallel_size),
            "vllm_config.parallel_config.tensor_parallel_size"),
        pipeline_parallel_size=IdentityField.of(
            int(config.parallel_config.pipeline_parallel_size),
            "vllm_config.parallel_config.pipeline_parallel_size"),
        device=IdentityField.of(compat.device_type(), "vllm.platforms.current_platform"),
        device_name=IdentityField.of(compat.device_name(), "torch.cuda / platform"),
        async_scheduling=IdentityField.of(bool(config.scheduler_config.async_scheduling),
                                          "vllm_config.scheduler_config.async_scheduling"),
        cudagraph_mode=IdentityField.of(str(getattr(graph_mode, "name", graph_mode)).lower(),
                                        "vllm_config.compilation_config.cudagraph_mode"),
        acceptance_control=IdentityField.of(acceptance_control,
                                            "vllm_config.speculative_config"),
    )


def resolve_kv_capacity(llm) -> KVCapacity:
    cache = compat.vllm_config(llm).cache_config
    draft_layers = tuple(compat.draft_layer_names(llm))
    groups = tuple(KVCacheGroup(
        layer_names=tuple(g["layer_names"]), block_size=g["block_size"],
        spec_type=g["spec_type"],
        draft_layers=tuple(n for n in g["layer_names"] if n in draft_layers))
        for g in compat.kv_cache_groups(llm))
    num_blocks = int(cache.num_gpu_blocks or compat.kv_num_blocks(llm))
    tokens = getattr(cache, "kv_cache_size_tokens", None)
    return KVCapacity(
        num_blocks=num_blocks, block_size=int(cache.block_size),
        tokens=int(tokens) if tokens else num_blocks * int(cache.block_size),
        groups=groups, draft_layer_names=draft_layers,
        source="vllm_config.cache_config (num_gpu_blocks, block_size, kv_cache_size_tokens) "
               "and worker kv_cache_config.kv_cache_groups")
