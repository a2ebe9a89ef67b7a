"""Where vLLM's internals are known, with the differences between its releases (0.26 on the
GPU host, 0.32 on CPU): the engine's environment, its start and shutdown, the LLM(...)
arguments a spec asks for, the engine's parts (engine core, scheduler, worker, config), the
facts it reports (KV groups, attention backends, communication) and the synthetic acceptance
override. Its siblings know the rest: engine_args.py (the engine arguments a user may give),
step_reading.py (a step's SchedulerOutput and ModelRunnerOutput, on the observer's hot path),
serving.py (serving step by step). Everything else asks these modules."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

# The engine core and the worker must live in this process: the observer wraps the
# scheduler and the worker of the running engine, and joins them through the very
# SchedulerOutput object that the scheduler hands to the worker. Nothing is fetched.
IN_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}
# Set unless the user set them: no usage report leaves the machine; the FlashInfer sampler
# is off (the GPU host's wheels lack it).
DEFAULT_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
               "VLLM_USE_FLASHINFER_SAMPLER": "0"}


# The smallest KV block each device's attention backend takes: cached prefixes are whole
# blocks, and small blocks keep small prefill points exact (the CPU backend wants multiples
# of 32).
BLOCK_SIZE = {"cpu": 32, "cuda": 16}


# Tensor parallel (external_launcher): the all-reduce paths known to work between ranks of
# one host; NVLink multicast (NVLS) and the torch symmetric-memory all-reduce are left off
# (set in every rank's environment by engine/tp.py, unless the user set them).
TENSOR_PARALLEL_ENV = {"VLLM_ALLREDUCE_USE_SYMM_MEM": "0", "NCCL_NVLS_ENABLE": "0"}
EXTERNAL_LAUNCHER = "external_launcher"


def prepare_environment() -> dict[str, str | None]:
    """Set the environment the engine needs while it starts and runs; return what each
    changed variable held before (None: unset), for restore_environment at shutdown, so
    that the rest of a pytest process runs in the user's own environment."""
    wanted = {**{k: v for k, v in DEFAULT_ENV.items() if k not in os.environ},
              **IN_PROCESS_ENV}
    saved = {k: os.environ.get(k) for k, v in wanted.items() if os.environ.get(k) != v}
    os.environ.update(wanted)
    return saved


def restore_environment(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def distributed_store_file(llm) -> str | None:
    """The file of the torch.distributed FileStore vLLM's single-process executor set up
    (``vllm_dist_*`` in the temp folder); vLLM removes it when the engine core shuts down,
    but a process that dies first leaves it behind."""
    method = str(getattr(worker(llm), "distributed_init_method", "") or "")
    return method.removeprefix("file://") if method.startswith("file://") else None


def llm_class():
    """vLLM's LLM, imported on first use (the engine's environment must be set first)."""
    from vllm import LLM
    return LLM


def shutdown_engine(llm) -> None:
    """Shut the engine core down (executor, worker, scheduler) and tear down the distributed
    state it set up in this process, so that another engine can start here."""
    try:
        llm.llm_engine.engine_core.shutdown()
    finally:
        release_distributed()


def release_distributed() -> None:
    """Tear down torch.distributed state an engine set up here (vLLM 0.32's engine core does
    it at shutdown; older releases, or a start that failed halfway, leave it set)."""
    dist = sys.modules.get("torch.distributed")   # never imported: nothing was set up
    if dist is not None and dist.is_available() and dist.is_initialized():
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        cleanup_dist_env_and_memory()


def computed_tokens(llm) -> int:
    """Tokens the scheduler's requests have computed so far: it grows whenever a step does
    work (chunked prefill steps return no output), so the step watchdog reads progress
    from it."""
    return sum(int(r.num_computed_tokens) for r in scheduler(llm).requests.values())


def vllm_version() -> str:
    import vllm
    return vllm.__version__


def device_type() -> str:
    from vllm.platforms import current_platform
    return "cuda" if current_platform.is_cuda() else current_platform.device_type


def device_name() -> str:
    if device_type() == "cuda":
        import torch
        return torch.cuda.get_device_name(torch.cuda.current_device())
    return platform.processor() or platform.machine()


def engine_core(llm) -> Any:
    client = llm.llm_engine.engine_core
    core = getattr(client, "engine_core", None)
    if core is None:
        raise RuntimeError("the vLLM engine core runs in another process; pytest-sdbench needs "
                           "VLLM_ENABLE_V1_MULTIPROCESSING=0 set before the engine starts")
    return core


def scheduler(llm) -> Any:
    return engine_core(llm).scheduler


def worker(llm) -> Any:
    executor = engine_core(llm).model_executor
    driver = getattr(executor, "driver_worker", None)
    if driver is None:
        raise RuntimeError(f"executor {type(executor).__name__} has no in-process worker; "
                           "pytest-sdbench supports the single-process executor")
    return getattr(driver, "worker", driver)


def vllm_config(llm) -> Any:
    return llm.llm_engine.vllm_config


# Engine settings the spec may ask for; None leaves vLLM's default.
SPEC_SETTINGS = ("max_model_len", "max_num_seqs", "max_num_batched_tokens",
                 "kv_cache_memory_bytes", "block_size", "enforce_eager", "async_scheduling",
                 "load_format")


def engine_kwargs(spec, device: str) -> dict:
    """LLM(...) keyword arguments for a spec on this device. Besides the spec's settings,
    only what the observer needs: no tokenizer (token-id prompts), stats on (acceptance),
    prefix caching on (real cached prefixes; decode seeding), and on CUDA per-step graph
    metrics (how each step ran)."""
    spec_cfg: dict = {"method": "eagle3", "model": spec.draft,
                      "num_speculative_tokens": spec.draft_depth}
    if spec.synthetic_acceptance_length is not None:
        if device != "cuda":
            raise ValueError("synthetic_acceptance_length: vLLM's synthetic rejection sampler "
                             f"runs on CUDA only; this device is {device!r}")
        spec_cfg.update(rejection_sample_method="synthetic",
                        synthetic_acceptance_length=spec.synthetic_acceptance_length)
    kwargs = dict(model=spec.target, skip_tokenizer_init=True, enable_prefix_caching=True,
                  speculative_config=spec_cfg, disable_log_stats=False, seed=spec.seed)
    if spec.tensor_parallel_size > 1:  # this process is one rank; its engine core runs here
        kwargs.update(tensor_parallel_size=spec.tensor_parallel_size,
                      distributed_executor_backend=EXTERNAL_LAUNCHER)
    kwargs.update({name: getattr(spec, name) for name in SPEC_SETTINGS
                   if getattr(spec, name) is not None})
    if spec.enforce_eager is False and spec.cudagraph_capture_sizes:
        kwargs["compilation_config"] = {
            "cudagraph_capture_sizes": list(spec.cudagraph_capture_sizes)}
    if device == "cuda":  # each step's output then says how it ran (graph mode, padding)
        kwargs["cudagraph_metrics"] = True
    kwargs.update(spec.extra)
    user = dict(spec.user_engine_args)
    if "speculative_config" in user:  # the user's speculative settings, over ours
        kwargs["speculative_config"] = {**spec_cfg, **user.pop("speculative_config")}
    kwargs.update(user)
    return kwargs


# ---- engine facts for identity and KV capacity ------------------------------------------

def draft_layer_names(llm) -> list[str]:
    runner = worker(llm).model_runner
    drafter = getattr(runner, "drafter", None)          # V1 model runner
    speculator = getattr(runner, "speculator", None)    # V2 model runner
    names = (getattr(drafter, "_draft_attn_layer_names", None)
             or getattr(speculator, "draft_attn_layer_names", None) or ())
    return sorted(names)


def kv_cache_groups(llm) -> list[dict]:
    config = worker(llm).model_runner.kv_cache_config
    groups = []
    for group in config.kv_cache_groups:
        spec = group.kv_cache_spec
        groups.append(dict(layer_names=list(group.layer_names),
                           block_size=int(spec.block_size),
                           spec_type=type(spec).__name__))
    return groups


def kv_num_blocks(llm) -> int:
    return int(worker(llm).model_runner.kv_cache_config.num_blocks)


def rank_kv_num_blocks(llm) -> list[int]:
    """Blocks each rank allocated, by rank. A single-rank engine has one; under tensor
    parallel every rank reports its own (gathered by the distributed seam)."""
    from .ranks import gather_from_ranks
    return gather_from_ranks(kv_num_blocks(llm))


def kv_bytes_per_token(llm):
    """KV bytes one token takes on a rank: the worker's KV tensors over its token slots."""
    from ..wire.identity import IdentityField
    config = worker(llm).model_runner.kv_cache_config
    tensors = getattr(config, "kv_cache_tensors", None)
    if not tensors:
        return IdentityField.unknown("the worker's kv_cache_config lists no kv_cache_tensors")
    block = int(config.kv_cache_groups[0].kv_cache_spec.block_size)
    total = sum(int(t.size) for t in tensors)
    return IdentityField.of(total // (int(config.num_blocks) * block),
                            "sum(kv_cache_config.kv_cache_tensors.size) / "
                            "(kv_cache_config.num_blocks * block_size)")


def communication(llm):
    """The collective backend between the engine's ranks, its version, whether the TP group
    runs vLLM's custom all-reduce, and the backend of the world CPU group (where the
    package gathers its per-rank records)."""
    from ..wire.identity import IdentityField
    parallel = vllm_config(llm).parallel_config
    if parallel.world_size <= 1:
        return IdentityField.unknown("a single rank: no collective communication")
    import torch.distributed as dist
    if not dist.is_initialized():
        return IdentityField.unknown("torch.distributed is not initialised in this process")
    from vllm.distributed import parallel_state
    backend = str(dist.get_backend())
    if backend == "nccl":
        import torch
        backend = "nccl " + ".".join(str(x) for x in torch.cuda.nccl.version())
    communicator = parallel_state.get_tp_group().device_communicator
    custom = getattr(communicator, "ca_comm", None)
    if custom is not None and not getattr(custom, "disabled", True):
        all_reduce = "custom all-reduce on"
    elif backend.startswith("nccl"):
        all_reduce = "custom all-reduce off"
    else:  # CPU: shared-memory all-reduce (_CPUSHMDistributed) or torch.distributed
        module = getattr(communicator, "dist_module", None)
        all_reduce = f"all-reduce {getattr(module, '__name__', type(module).__name__)}"
    cpu = dist.get_backend(parallel_state.get_world_group().cpu_group)
    return IdentityField.of(
        f"{backend}; {type(communicator).__name__}, {all_reduce}; world cpu group {cpu}",
        "torch.distributed.get_backend(), torch.cuda.nccl.version(), "
        "parallel_state.get_tp_group().device_communicator(.ca_comm.disabled), "
        "get_world_group().cpu_group")


def attention_backends(llm) -> list[str]:
    names = set()
    for groups in worker(llm).model_runner.attn_groups:
        for group in groups:
            names.add(group.backend.get_name())
    return sorted(names)


# ---- synthetic acceptance (CUDA): a sampling override, always restored ------------------

def _rejection_sampler(llm):
    return getattr(worker(llm).model_runner, "rejection_sampler", None)


def synthetic_rates(llm) -> tuple[float, ...] | None:
    """The conditional acceptance rates the rejection sampler applies, if synthetic."""
    sampler = _rejection_sampler(llm)
    rates = getattr(sampler, "synthetic_conditional_rates", None)
    return None if rates is None else tuple(float(x) for x in rates.tolist())


def acceptance_rates_for(acceptance_length: float,
                         draft_depth: int) -> tuple[list[float], list[float]]:
    """vLLM's own mapping: mean acceptance length -> per-position (unconditional,
    conditional) rates, as its synthetic rejection sampler resolves and draws them."""
    from vllm.config import SpeculativeConfig
    from vllm.v1.spec_decode.utils import unconditional_to_conditional_rates
    rates = SpeculativeConfig._acceptance_length_to_rates(acceptance_length, draft_depth)
    return rates, unconditional_to_conditional_rates(rates)


def conditional_rates_for(acceptance_length: float, draft_depth: int) -> list[float]:
    """vLLM's own mapping: mean acceptance length -> per-position conditional rates."""
    return acceptance_rates_for(acceptance_length, draft_depth)[1]


def set_synthetic_rates(llm, rates) -> None:
    """Overwrite the rates in place (the tensor the sampler kernel reads each step)."""
    import torch
    tensor = _rejection_sampler(llm).synthetic_conditional_rates
    tensor.copy_(torch.tensor(list(rates), dtype=tensor.dtype, device=tensor.device))
