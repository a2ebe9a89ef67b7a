"""The one place that knows vLLM's internals and how they differ between releases
(0.26 on the GPU host, 0.32 on CPU). Everything else asks these functions."""

from __future__ import annotations

import operator
import os
import platform
import sys
from typing import Any, NamedTuple

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


def engine_argument_names() -> frozenset[str] | None:
    """The keyword arguments LLM(...) takes: the fields of vLLM's EngineArgs dataclass (its
    **kwargs go there) and LLM.__init__'s own parameters. Read from vLLM's source, not
    imported: an import takes 10-18 s on a 2-core CPU, and before the engine's environment
    is set it would leak settings (HF_HUB_OFFLINE is read when huggingface_hub is imported)
    into the engine. None when vLLM is absent or its source does not hold them where
    expected (then the engine start says what is wrong)."""
    import importlib.util
    from pathlib import Path
    found = importlib.util.find_spec("vllm")
    if found is None or not found.submodule_search_locations:
        return None
    root = Path(next(iter(found.submodule_search_locations)))
    fields = _dataclass_fields(root / "engine" / "arg_utils.py", "EngineArgs")
    params = _init_parameters(root / "entrypoints" / "llm.py", "LLM")
    return frozenset(fields | params) if fields else None


def _classes(path) -> dict:
    import ast
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (OSError, SyntaxError, ValueError):
        return {}
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _dataclass_fields(path, name: str) -> set[str]:
    """The annotated class attributes of `name` and of its bases defined in the same file
    (ClassVar annotations are no fields)."""
    import ast
    classes, names, todo = _classes(path), set(), [name]
    while todo:
        node = classes.get(todo.pop())
        if node is None:
            continue
        todo += [base.id for base in node.bases if isinstance(base, ast.Name)]
        names |= {stmt.target.id for stmt in node.body if isinstance(stmt, ast.AnnAssign)
                  and isinstance(stmt.target, ast.Name)
                  and "ClassVar" not in ast.unparse(stmt.annotation)}
    return names


def _init_parameters(path, name: str) -> set[str]:
    import ast
    node = _classes(path).get(name)
    init = next((f for f in (node.body if node else ()) if isinstance(f, ast.FunctionDef)
                 and f.name == "__init__"), None)
    if init is None:
        return set()
    args = init.args
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} - {"self"}


# Config classes whose fields are not the engine arguments of the same name: the whole
# config, and the draft's (its model, revision, max_model_len are the draft's own).
_NOT_ARGUMENT_CONFIGS = ("VllmConfig", "SpeculativeConfig")


class RefusedValue(NamedTuple):
    name: str
    value: Any
    config_field: str     # e.g. SchedulerConfig.max_num_seqs
    reason: str           # pydantic's message, one line


def refused_engine_argument(args: dict[str, Any]) -> RefusedValue | None:
    """The first engine argument whose value vLLM's own config classes refuse: each value
    validated by the core schema (type, bounds, vLLM's field validators) of every config
    field of its name, without building a config (a ModelConfig would read the model).
    vLLM is imported under the engine's environment (prepare_environment), as the engine
    start will import it. None: every value accepted, or vLLM cannot say here (the engine
    start then says what is wrong). None values are vLLM's own defaults and not checked."""
    given = {k: v for k, v in args.items() if v is not None}
    if not given:
        return None
    validators = _config_field_validators(frozenset(given))
    for name, value in given.items():
        for config_field, validator in validators.get(name, ()):
            reason = _refusal(validator, value)
            if reason is not None:
                return RefusedValue(name, value, config_field, reason)
    return None


def _refusal(validator, value) -> str | None:
    from pydantic_core import ValidationError
    try:
        validator.validate_python(value)
    except ValidationError as exc:
        return " ".join(str(exc.errors()[0]["msg"]).split())
    except Exception:  # noqa: BLE001 (a validator that needs the whole config: not ours)
        return None
    return None


def _config_field_validators(names: frozenset[str]) -> dict[str, list]:
    """name -> [(Class.field, validator)] for the config fields named `names`."""
    saved = prepare_environment()
    try:
        import vllm.config as configs
        from pydantic_core import SchemaValidator
    except Exception:  # noqa: BLE001 (vLLM does not import here: the engine start says why)
        return {}
    finally:
        restore_environment(saved)
    found: dict[str, list] = {}
    for class_name in sorted(dir(configs)):
        cls = getattr(configs, class_name)
        if class_name in _NOT_ARGUMENT_CONFIGS or not isinstance(cls, type):
            continue
        try:
            core_schema = getattr(cls, "__pydantic_core_schema__", None)
        except Exception:  # noqa: BLE001 (a class pydantic cannot build yet)
            continue
        for name, schema in _field_schemas(core_schema):
            if name in names:
                try:
                    found.setdefault(name, []).append(
                        (f"{class_name}.{name}", SchemaValidator(schema)))
                except Exception:  # noqa: BLE001 (a schema that stands only in its class)
                    continue
    return found


def _field_schemas(schema) -> list[tuple[str, dict]]:
    """(field name, its core schema) of a pydantic dataclass's core schema: the fields of
    its dataclass-args, each with the definitions its schema may refer to."""
    definitions: list = []
    while isinstance(schema, dict) and schema.get("type") != "dataclass-args":
        definitions += schema.get("definitions", []) if schema.get("type") == "definitions" \
            else []
        schema = schema.get("schema")
    if not isinstance(schema, dict):
        return []
    return [(f["name"], {"type": "definitions", "schema": f["schema"],
                         "definitions": definitions} if definitions else f["schema"])
            for f in schema.get("fields", ())]


# ---- reading a SchedulerOutput (the producer side) --------------------------------------
# The observer's hot path: schedule() and update_from_output() run once a step, so what they
# read is copied as plain tuples with C-level loops only (tuple(), map()); the per-request
# rows, dicts and names are derived from those copies later, after the window.

class ScheduledRow(NamedTuple):
    """One scheduled request as schedule() emitted it: plain values, so that the observer's
    hot path builds no typed objects."""
    request_id: str
    prompt_tokens: int
    computed_tokens: int     # KV tokens already in the cache, read by this step
    scheduled_tokens: int    # new tokens this step, drafts included
    draft_tokens: int
    preemptions: int


class FrozenSchedule(NamedTuple):
    """A SchedulerOutput and the scheduler's state as they were when schedule() returned,
    copied without a Python-level loop over the requests (see scheduled_rows). The hot path
    builds it as a plain tuple in this order; FrozenSchedule(*frozen) names it later."""
    scheduled: dict[str, int]                        # new tokens a request, drafts included
    draft_ids: tuple[str, ...]                       # the requests that verify drafts
    draft_tokens: tuple[int, ...]                    # aligned with draft_ids
    new_computed: tuple[tuple[str, int], ...]        # (request id, computed) of new requests
    cached_ids: tuple[str, ...]
    cached_computed: tuple[int, ...]                 # aligned with cached_ids
    requests: tuple[Any, ...]                        # the scheduler's Request objects (or None)
    preemptions: tuple[Any, ...]                     # each request's count at schedule() time
    waiting: int
    running: int
    total_scheduled_tokens: int


_PREEMPTIONS = operator.attrgetter("num_preemptions")
_NEW_COMPUTED = operator.attrgetter("req_id", "num_computed_tokens")


def freeze_schedule(scheduler_output, sched) -> tuple:
    """Everything the snapshot needs, read at schedule() time before anything runs, as a
    plain tuple in FrozenSchedule's order. The engine may change the output's token counts,
    its draft lists and its requests afterwards, so the numbers are copied now (a dict copy,
    tuples, lengths; no live container is kept); what never changes (a request's prompt
    length) is read later from the request."""
    scheduled = scheduler_output.num_scheduled_tokens
    drafts = scheduler_output.scheduled_spec_decode_tokens
    cached = scheduler_output.scheduled_cached_reqs
    new = scheduler_output.scheduled_new_reqs
    requests = tuple(map(sched.requests.get, scheduled))
    try:
        preemptions = tuple(map(_PREEMPTIONS, requests))
    except AttributeError:  # a request unknown to the scheduler, or a release without it
        preemptions = tuple(getattr(r, "num_preemptions", 0) for r in requests)
    return (scheduled.copy(),
            tuple(drafts) if drafts else (), tuple(map(len, drafts.values())) if drafts else (),
            tuple(map(_NEW_COMPUTED, new)) if new else (),
            tuple(cached.req_ids), tuple(cached.num_computed_tokens), requests, preemptions,
            len(sched.waiting), len(sched.running), scheduler_output.total_num_scheduled_tokens)


def scheduled_rows(frozen: FrozenSchedule) -> tuple[ScheduledRow, ...]:
    """Every scheduled request of a frozen schedule, as rows (derived off the hot path)."""
    computed = dict(frozen.new_computed)
    computed.update(zip(frozen.cached_ids, frozen.cached_computed, strict=True))
    drafts = dict(zip(frozen.draft_ids, frozen.draft_tokens, strict=True))
    return tuple(
        ScheduledRow(req_id, request.num_prompt_tokens if request is not None else -1,
                     computed[req_id], scheduled, drafts.get(req_id, 0),
                     (preemptions or 0) if request is not None else 0)
        for (req_id, scheduled), request, preemptions in zip(
            frozen.scheduled.items(), frozen.requests, frozen.preemptions, strict=True))


class FrozenOutput(NamedTuple):
    """What update_from_output() needs of a step's ModelRunnerOutput, copied before the
    scheduler consumes it (it trims a stopping request's sampled tokens in place). Built
    as a plain tuple in this order on the hot path."""
    request_ids: tuple[str, ...]
    gained: tuple[int, ...]          # tokens each request gained, by position
    graph_stats: Any                 # the V1 runner's cudagraph_stats (None: not reported)


def freeze_output(model_runner_output) -> tuple:
    return (tuple(model_runner_output.req_ids),
            tuple(map(len, model_runner_output.sampled_token_ids or ())),
            getattr(model_runner_output, "cudagraph_stats", None))


def gained_tokens(frozen: FrozenOutput) -> dict[str, int]:
    """Tokens each request gained from one step, as the host-side output carried them."""
    gained = frozen.gained
    return {req_id: gained[i] if i < len(gained) else 0
            for i, req_id in enumerate(frozen.request_ids)}


def graph_mode_name(mode) -> str:
    """vLLM's CUDAGraphMode (enum or its str) as 'eager', 'piecewise' or 'full'."""
    name = str(getattr(mode, "name", mode)).rsplit(".", 1)[-1].lower()
    return "eager" if name == "none" else name


def graph_mode_of_stats(stats) -> str | None:
    """The graph mode a step's cudagraph_stats report; None without them."""
    mode = getattr(stats, "runtime_mode", None)
    return None if mode is None else graph_mode_name(mode)


def graph_dispatcher(llm):
    """The V2 model runner (vLLM 0.26's default on CUDA) reports no per-step graph mode in
    its output; it chooses one in cudagraph_manager.dispatch(), whose result the observer
    reads. None for the V1 runner, which reports it in the output."""
    manager = getattr(worker(llm).model_runner, "cudagraph_manager", None)
    return manager if manager is not None and hasattr(manager, "dispatch") else None


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


def conditional_rates_for(acceptance_length: float, draft_depth: int) -> list[float]:
    """vLLM's own mapping: mean acceptance length -> per-position conditional rates."""
    from vllm.config import SpeculativeConfig
    from vllm.v1.spec_decode.utils import unconditional_to_conditional_rates
    rates = SpeculativeConfig._acceptance_length_to_rates(acceptance_length, draft_depth)
    return unconditional_to_conditional_rates(rates)


def set_synthetic_rates(llm, rates) -> None:
    """Overwrite the rates in place (the tensor the sampler kernel reads each step)."""
    import torch
    tensor = _rejection_sampler(llm).synthetic_conditional_rates
    tensor.copy_(torch.tensor(list(rates), dtype=tensor.dtype, device=tensor.device))


# ---- serving step by step (the fidelity run): requests added at their arrival times ----

def streaming_params(max_tokens: int):
    """A served request's sampling parameters: the run's generation sampling, each step's
    new tokens only (as a streaming server sends them)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    from ..wire.contract import GENERATION_SAMPLING
    return SamplingParams(max_tokens=max_tokens, output_kind=RequestOutputKind.DELTA,
                          **GENERATION_SAMPLING)


def add_request(llm, request_id: str, token_ids: list[int], params) -> None:
    """Queue one token-id prompt on the engine (LLMEngine.add_request, V1)."""
    llm.llm_engine.add_request(request_id, {"prompt_token_ids": token_ids}, params)


def generate_until(llm, prompts: list[list[int]], params, stop) -> list:
    """LLM.generate's loop, stopped early: the requests are added as LLM.enqueue adds them
    and the engine is stepped (LLMEngine.step) until none is unfinished; after every step
    `stop()` is asked, and once it holds, every request still running is aborted. The
    engine is then stepped until its core runs no request and holds no batch (async
    scheduling queues the next step before the last one's output), so the next run starts
    on an idle engine. Returns the outputs of the requests that finished before the stop,
    in LLM.generate's order."""
    engine = llm.llm_engine
    ids = llm.enqueue([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    finished: list = []
    stopped = False
    while engine.has_unfinished_requests() or not core_idle(llm):
        finished.extend(o for o in engine.step() if o.finished)
        if not stopped and stop():
            engine.abort_request(ids, internal=True)   # enqueue returns internal ids
            stopped = True
    return sorted(finished, key=lambda o: int(o.request_id))


def core_idle(llm) -> bool:
    """The engine core holds no unfinished request and no batch in flight (the ids of
    finished ones may wait for its next schedule, as after LLM.generate)."""
    core = engine_core(llm)
    return (not core.scheduler.has_unfinished_requests()
            and not getattr(core, "batch_queue", None))


def engine_step(llm) -> list:
    """One engine step (LLMEngine.step): the RequestOutputs it returned."""
    return llm.llm_engine.step()


def delivered(output) -> tuple[str, int, bool]:
    """(the id the request was added under, tokens this step delivered, finished) of a
    streamed RequestOutput."""
    return output.request_id, len(output.outputs[0].token_ids), bool(output.finished)
