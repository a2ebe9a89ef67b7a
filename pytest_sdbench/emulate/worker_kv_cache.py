"""The KV cache of the emulated worker, which allocates none: vLLM plans the cache from the
specs and the memory a worker reports, here exactly the profile's capacity (or the settings'
num_gpu_blocks), and hands back the planned config, which is only kept.

EmulatedWorker (worker.py) is a KVCacheWorker; these are its answers to vLLM's KV-cache calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheSpec
from vllm.v1.worker.worker_base import WorkerBase

if TYPE_CHECKING:
    from vllm.v1.kv_cache_interface import KVCacheConfig

    from .pricing import ProfilePrice
    from .settings import EmulationSettings


class KVCacheWorker(WorkerBase):
    """A worker's KV-cache calls, answered from the profile's capacity; allocates nothing."""

    settings: EmulationSettings
    price: ProfilePrice
    kv_cache_config: KVCacheConfig | None

    def get_kv_cache_spec(self) -> dict[str, KVCacheSpec]:
        """One full-attention spec per attention layer of target and draft, as the GPU
        runner reports them for a dense model (same shape: one KV cache group)."""
        return dict(self._kv_layer_specs())

    def get_supported_kv_cache_layouts(self) -> list[str]:
        """0.32 only (EngineCore._initialize_kv_caches): no backend, any plain layout."""
        return ["LBNHC", "LBHNC"]

    def set_kv_cache_layout(self, kv_cache_layout: str) -> None:
        """0.32 only: nothing is allocated, so the layout is only noted."""
        self._kv_cache_layout = kv_cache_layout

    def determine_available_memory(self) -> int:
        """Exactly the bytes of the profile's number of blocks, never a measurement."""
        return self.num_gpu_blocks() * self.bytes_per_block()

    def initialize_from_config(self, kv_cache_config: KVCacheConfig | list[KVCacheConfig]
                               ) -> None:
        """Keep the planned config (num_blocks, groups); allocate nothing. The executor
        sends one config per worker (a list); vLLM's WorkerWrapperBase picks this rank's
        before calling a worker, the in-process EmulatedExecutor does not."""
        if isinstance(kv_cache_config, list):
            kv_cache_config = kv_cache_config[self.rank]
        self.kv_cache_config = kv_cache_config
        want = self.num_gpu_blocks()
        if kv_cache_config.num_blocks != want:
            raise RuntimeError(f"sdbench emulate: vLLM planned {kv_cache_config.num_blocks} "
                               f"KV blocks, the emulation asked for {want}")

    # ------------------------------------------------------------- capacity -------
    def num_gpu_blocks(self) -> int:
        """The settings' num_gpu_blocks, else the profile's kv_capacity.num_blocks."""
        blocks = self.settings.num_gpu_blocks
        return int(blocks if blocks is not None else self.price.kv_capacity.num_blocks)

    def bytes_per_block(self) -> int:
        return sum(spec.page_size_bytes for _, spec in self._kv_layer_specs())

    def _kv_layer_specs(self) -> list[tuple[str, KVCacheSpec]]:
        from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype

        specs: list[tuple[str, KVCacheSpec]] = []
        block_size = int(self.cache_config.block_size)
        configs = [self.model_config]
        if self.speculative_config is not None and getattr(
                self.speculative_config, "draft_model_config", None) is not None:
            configs.append(self.speculative_config.draft_model_config)
        index = 0
        for config in configs:
            dtype = kv_cache_dtype_str_to_dtype(self.cache_config.cache_dtype, config)
            spec = FullAttentionSpec(
                block_size=block_size,
                num_kv_heads=config.get_num_kv_heads(self.parallel_config),
                head_size=config.get_head_size(),
                dtype=dtype,
            )
            for _ in range(config.get_num_layers(self.parallel_config)):
                specs.append((f"model.layers.{index}.self_attn.attn", spec))
                index += 1
        return specs

    def get_cache_block_size_bytes(self) -> int:
        return self.bytes_per_block()
