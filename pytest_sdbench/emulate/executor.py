"""EmulatedExecutor: an in-process vLLM Executor around one EmulatedWorker.

Use: ``vllm serve TARGET --distributed-executor-backend
pytest_sdbench.emulate.executor.EmulatedExecutor`` (EXECUTOR_QUALNAME; vllm/v1/executor/
abstract.py Executor.get_class resolves the qualified name: 0.32 l.98-104, 0.26 l.81-87).

Why an executor rather than --worker-cls (measured by the prototype of issue 54):
- no worker process and no torch.distributed group: the CPU platform turns a world-size-1
  "uni" backend into "mp" (platforms/cpu.py, 0.32 l.334-341), so a --worker-cls worker
  runs in a separate process behind a shared-memory queue; a custom backend is left alone;
- it declares async-scheduling support, and it is constructed in EngineCore.__init__
  *before* the scheduler class and the batch queue are chosen (core.py 0.32 l.144 vs
  l.161 and l.220; 0.26 l.125 vs l.140 and l.199). So where a platform forced async
  scheduling off after VllmConfig had resolved it (CpuPlatform.check_and_update_config,
  0.32 l.330-331, 0.26 l.143-144), the executor can turn it back on in the engine core's
  copy of the config: the engine core then builds AsyncScheduler and a two-deep batch
  queue (VllmConfig.max_concurrent_batches) and runs step_with_batch_queue, as the
  profiled CUDA engine did;
- execute_model(non_block=True) returns a finished Future (the step is launched), and
  sample_tokens(non_block=True) returns a Future whose result() sleeps until the step's
  deadline: the same shape as UniProcExecutor + AsyncOutputFuture on CUDA, without a
  thread of our own and without the GIL hand-off such a thread would add;
- nothing touches a device: no CUDA context on a GPU host, no attention backend lookup
  (UniProcExecutor calls current_platform.update_block_size_for_backend, which selects an
  attention backend; here the block size is the one given, --block-size).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from vllm.v1.executor.abstract import Executor
from vllm.v1.outputs import AsyncModelRunnerOutput

from .worker import EmulatedWorker

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import GrammarOutput, SchedulerOutput
    from vllm.v1.outputs import DraftTokenIds

# Under "vllm." so that vLLM's log configuration (format, level) applies.
logger = logging.getLogger("vllm.sdbench_emulate")


class DeadlineFuture(Future):
    """A Future of a step's output: done at the deadline; result() sleeps until then."""

    def __init__(self, output: AsyncModelRunnerOutput, single_value: bool = True) -> None:
        super().__init__()
        self._async_output = output
        self._single_value = single_value

    def done(self) -> bool:
        if super().done():
            return True
        ready = getattr(self._async_output, "ready", None)
        return bool(ready()) if callable(ready) else False

    def result(self, timeout: float | None = None) -> Any:
        if not super().done():
            try:
                value = self._async_output.get_output()
                self.set_result(value if self._single_value else [value])
            except Exception as exc:  # noqa: BLE001 (the engine gets it as the step's failure)
                self.set_exception(exc)
        return super().result()


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class EmulatedExecutor(Executor):
    """One in-process EmulatedWorker; async scheduling supported."""

    uses_ray = False
    supports_pp = False

    def _init_executor(self) -> None:
        config = self.vllm_config
        worker = EmulatedWorker(vllm_config=config, local_rank=0, rank=0,
                                distributed_init_method="", is_driver_worker=True)
        self.driver_worker = worker
        # The KV capacity is the profile's, in blocks: make vLLM's planner land on it.
        blocks = worker.num_gpu_blocks()
        override = config.cache_config.num_gpu_blocks_override
        if override not in (None, blocks):
            raise ValueError(f"sdbench emulate: --num-gpu-blocks-override {override} "
                             f"disagrees with the emulation's {blocks} KV blocks")
        config.cache_config.num_gpu_blocks_override = blocks
        # Async scheduling as the profiled engine ran it (see the module docstring).
        wanted = worker.settings.async_scheduling
        current = bool(config.scheduler_config.async_scheduling)
        if wanted is not None and current != wanted:
            if wanted and config.parallel_config.pipeline_parallel_size > 1:
                raise ValueError("sdbench emulate: async scheduling with pipeline "
                                 "parallelism is not supported")
            config.scheduler_config.async_scheduling = wanted
            worker.async_scheduling = wanted
            worker.async_scheduling_turned_on = wanted
            logger.warning("sdbench emulate: async scheduling %s -> %s in the engine core "
                           "(the profiled engine's; the platform had decided %s)", current,
                           wanted, current)
        worker.init_device()
        worker.load_model()
        logger.info("sdbench emulate: executor up: %d KV blocks of %d tokens, K=%d at AL "
                    "%s (rates %s), %r, async scheduling %s", blocks,
                    config.cache_config.block_size, worker.num_spec_tokens,
                    worker.acceptance_length, worker.unconditional_rates, worker.price,
                    config.scheduler_config.async_scheduling)

    # collective_rpc: every Executor method not overridden below arrives here by name,
    # exactly as UniProcExecutor runs them (vllm.v1.serial_utils.run_method).
    def collective_rpc(self, method: str | Callable[..., Any], timeout: float | None = None,
                       args: tuple = (), kwargs: dict | None = None, non_block: bool = False,
                       single_value: bool = False) -> Any:
        kwargs = kwargs or {}
        try:
            if isinstance(method, str):
                result = getattr(self.driver_worker, method)(*args, **kwargs)
            else:
                result = method(self.driver_worker, *args, **kwargs)
        except Exception as exc:
            if not non_block:
                raise
            failed: Future = Future()
            failed.set_exception(exc)
            return failed
        if isinstance(result, AsyncModelRunnerOutput):
            if non_block:
                return DeadlineFuture(result, single_value)
            result = result.get_output()
        value = result if single_value else [result]
        return _done(value) if non_block else value

    def execute_model(self, scheduler_output: SchedulerOutput,
                      non_block: bool = False) -> Any:
        output = self.driver_worker.execute_model(scheduler_output)
        return _done(output) if non_block else output

    def sample_tokens(self, grammar_output: GrammarOutput | None,
                      non_block: bool = False) -> Any:
        pending = self.driver_worker.sample_tokens(grammar_output)
        return DeadlineFuture(pending) if non_block else pending.get_output()

    def take_draft_token_ids(self) -> DraftTokenIds | None:
        return self.driver_worker.take_draft_token_ids()

    def check_health(self) -> None:
        return None

    def shutdown(self) -> None:
        worker = getattr(self, "driver_worker", None)
        if worker is not None:
            worker.shutdown()

    @classmethod
    def supports_async_scheduling(cls) -> bool:
        return True
