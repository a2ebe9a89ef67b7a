"""Facts about the engine as it executes: execution identity and KV capacity. Resolved
once, right after start-up, from the engine's own configuration; frozen afterwards.
A field that cannot be resolved says why; nothing is guessed or looked up on a network."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..wire.contract import SOURCE_USER
from ..wire.identity import (
    EngineSettings,
    ExecutionIdentity,
    IdentityField,
    KVCacheGroup,
    KVCapacity,
    ModelIdentity,
)
from . import compat
from .model_files import snapshot_commit


def _config_digest(path: str) -> IdentityField:
    config = Path(path) / "config.json"
    if not config.is_file():
        return IdentityField.unknown(f"no config.json under {path}")
    digest = hashlib.sha256(config.read_bytes()).hexdigest()
    return IdentityField.of(f"sha256:{digest}", f"sha256 of {config}")


def _revision(model_config, where: str, user_revision: str | None) -> IdentityField:
    """The checkpoint's revision: the user's word, else the engine's, else the commit of
    the Hugging Face cache snapshot the checkpoint lies in; else unresolved."""
    if user_revision:
        return IdentityField.of(user_revision, SOURCE_USER)
    revision = getattr(model_config, "revision", None)
    if revision:
        return IdentityField.of(revision, f"{where}.revision")
    path = str(model_config.model)
    commit = snapshot_commit(path)
    if commit:
        return IdentityField.of(commit, f"hf cache snapshot folder name ({path})")
    return IdentityField.unknown("local checkpoint without a revision (no cache snapshot "
                                 "commit, none given); nothing is looked up on a network")


def _model_identity(model_config, load_format: str, where: str,
                    user_revision: str | None = None) -> ModelIdentity:
    archs = list(getattr(model_config, "architectures", None) or [])
    quant = getattr(model_config, "quantization", None)
    return ModelIdentity(
        model=IdentityField.of(str(model_config.model), f"{where}.model"),
        revision=_revision(model_config, where, user_revision),
        config_digest=_config_digest(model_config.model),
        architecture=(IdentityField.of(archs[0], f"{where}.architectures") if archs else
                      IdentityField.unknown(f"{where}.architectures is empty")),
        dtype=IdentityField.of(str(model_config.dtype).removeprefix("torch."), f"{where}.dtype"),
        quantization=IdentityField.of(quant or "none", f"{where}.quantization"),
        load_format=IdentityField.of(load_format, "vllm_config.load_config.load_format"),
    )


def resolve_identity(llm, spec) -> ExecutionIdentity:
    """The identity of the started engine of `spec` (an EngineSpec)."""
    acceptance_control, user_engine_args = spec.acceptance_control, spec.user_engine_args
    revisions = (spec.target_revision, spec.draft_revision)
    config = compat.vllm_config(llm)
    spec_config = config.speculative_config
    load_format = str(config.load_config.load_format)
    backends = compat.attention_backends(llm)
    graph_mode = getattr(config.compilation_config, "cudagraph_mode", None)
    return ExecutionIdentity(
        target=_model_identity(config.model_config, load_format, "vllm_config.model_config",
                               revisions[0]),
        draft=_model_identity(spec_config.draft_model_config, load_format,
                              "vllm_config.speculative_config.draft_model_config", revisions[1]),
        method=IdentityField.of(spec_config.method, "vllm_config.speculative_config.method"),
        draft_depth=IdentityField.of(int(spec_config.num_speculative_tokens),
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
        distributed_executor_backend=IdentityField.of(
            str(config.parallel_config.distributed_executor_backend or "uni"),
            "vllm_config.parallel_config.distributed_executor_backend"),
        communication=compat.communication(llm),
        device=IdentityField.of(compat.device_type(), "vllm.platforms.current_platform"),
        device_name=IdentityField.of(compat.device_name(), "torch.cuda / platform"),
        async_scheduling=IdentityField.of(bool(config.scheduler_config.async_scheduling),
                                          "vllm_config.scheduler_config.async_scheduling"),
        cudagraph_mode=IdentityField.of(str(getattr(graph_mode, "name", graph_mode)).lower(),
                                        "vllm_config.compilation_config.cudagraph_mode"),
        acceptance_control=IdentityField.of(acceptance_control,
                                            "vllm_config.speculative_config"),
        settings=resolve_settings(config, user_engine_args or {}),
    )


def _setting(config, section: str, name: str, cast=None) -> IdentityField:
    """One effective setting as the started engine's config holds it."""
    holder = getattr(config, section, None)
    if holder is None or not hasattr(holder, name):
        return IdentityField.unknown(f"vllm_config.{section} has no {name} in this vLLM")
    value = getattr(holder, name)
    if value is None:
        return IdentityField.unknown(f"vllm_config.{section}.{name} is not set (None)")
    return IdentityField.of(cast(value) if cast else value, f"vllm_config.{section}.{name}")


def _sizes(value) -> tuple[int, ...]:
    return tuple(sorted(int(x) for x in value))


def resolve_settings(config, user_engine_args: dict) -> EngineSettings:
    return EngineSettings(
        max_num_seqs=_setting(config, "scheduler_config", "max_num_seqs", int),
        max_num_batched_tokens=_setting(config, "scheduler_config", "max_num_batched_tokens",
                                        int),
        max_model_len=_setting(config, "model_config", "max_model_len", int),
        gpu_memory_utilization=_setting(config, "cache_config", "gpu_memory_utilization",
                                        float),
        kv_cache_memory_bytes=_setting(config, "cache_config", "kv_cache_memory_bytes", int),
        kv_cache_dtype=_setting(config, "cache_config", "cache_dtype", str),
        block_size=_setting(config, "cache_config", "block_size", int),
        cudagraph_capture_sizes=_setting(config, "compilation_config",
                                         "cudagraph_capture_sizes", _sizes),
        enable_chunked_prefill=_setting(config, "scheduler_config", "enable_chunked_prefill",
                                        bool),
        enable_prefix_caching=_setting(config, "cache_config", "enable_prefix_caching", bool),
        enforce_eager=_setting(config, "model_config", "enforce_eager", bool),
        user_engine_args={k: json.dumps(v, sort_keys=True) for k, v in
                          sorted(user_engine_args.items())},
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
        bytes_per_token=compat.kv_bytes_per_token(llm),
        rank_num_blocks=tuple(compat.rank_kv_num_blocks(llm)),
        source="vllm_config.cache_config (num_gpu_blocks, block_size, kv_cache_size_tokens) "
               "and worker kv_cache_config.kv_cache_groups")
