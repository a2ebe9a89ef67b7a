"""EmulatedWorker: vLLM's worker interface with no model, no KV tensors and no device.

It answers every call vLLM's engine makes of a worker (vllm/v1/executor/abstract.py routes
them by name through collective_rpc; the same list in vLLM 0.26 and 0.32, the prototype's
notes of issue 54 have it with line numbers) and, per SchedulerOutput, returns what an
EAGLE3 GPU worker returns:

- a request that finishes its prompt in the step (or was already past it) samples
  1 + accepted tokens, the accepted drafts drawn at the profile's acceptance length with
  vLLM's own rates (acceptance.py); a prefill chunk that does not finish its prompt samples
  nothing (its sampled_token_ids entry is [], as the GPU runner's discard mask leaves it);
- every request that sampled gets K new draft ids for its next step. Under sync scheduling
  vLLM fetches them with take_draft_token_ids() after the step (EngineCore.post_step);
  under async scheduling the scheduler sends -1 placeholders and the worker keeps its own
  drafts (AsyncScheduler._update_after_schedule), as here.

Accepted drafts are the draft ids themselves and the bonus token is random, so a client
sees random ids of the model's vocabulary (never an EOS id).

The step is priced (pricing.ProfilePrice) from its shape as the collector's snapshot reads
it: each request's KV is the scheduler's num_computed_tokens less the drafts that a step
still in flight (launched, its output not yet taken) rejected, the rejection-corrected
snapshot; the worker knows those exactly, having drawn them.

The step's output is an AsyncModelRunnerOutput whose get_output() sleeps until the step's
deadline on the VirtualDevice, so the same class serves vLLM's executors (UniProcExecutor
wraps it in AsyncOutputFuture, MultiprocExecutor calls get_output in its output path) and
the in-process EmulatedExecutor.

Its parts: the KV-cache calls, answered from the profile's capacity (worker_kv_cache.py);
the requests' states and what is sampled for them (worker_sampling.py).
"""

from __future__ import annotations

import logging
import random
import threading
from typing import TYPE_CHECKING, Any

from vllm.v1.outputs import (
    EMPTY_MODEL_RUNNER_OUTPUT,
    AsyncModelRunnerOutput,
    DraftTokenIds,
    ModelRunnerOutput,
)
from vllm.v1.worker.worker_base import CompilationTimes

from .acceptance import AcceptanceSampler, expected_acceptance_length
from .clock import VirtualDevice, now
from .pricing import ProfilePrice
from .settings import EmulationSettings
from .step_shape import shape_of
from .steplog import EmulatedStep, StepLog
from .worker_kv_cache import KVCacheWorker
from .worker_sampling import RequestSampling

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.sched.output import GrammarOutput, SchedulerOutput

# Under "vllm." so that vLLM's log configuration (format, level) applies.
logger = logging.getLogger("vllm.sdbench_emulate")


class DeadlineOutput(AsyncModelRunnerOutput):
    """A step's output that becomes available at the step's deadline (virtual time)."""

    def __init__(self, worker: EmulatedWorker, output: ModelRunnerOutput,
                 record: EmulatedStep, deadline: float) -> None:
        self._worker = worker
        self._output = output
        self._record = record
        self._deadline = deadline
        self.taken = False
        self._lock = threading.Lock()

    def ready(self) -> bool:
        return now() >= self._deadline

    def get_output(self) -> ModelRunnerOutput:
        with self._lock:
            if not self.taken:
                self.taken = True
                self._worker._finish_step(self._record, self._deadline)
        return self._output


class EmulatedWorker(RequestSampling, KVCacheWorker):
    """A model-less worker. Constructed by EmulatedExecutor (or vLLM, --worker-cls). Its
    KV-cache calls: KVCacheWorker; its requests and sampling: RequestSampling."""

    def __init__(self, vllm_config: VllmConfig, local_rank: int = 0, rank: int = 0,
                 distributed_init_method: str = "", is_driver_worker: bool = True,
                 **_ignored: Any) -> None:
        # WorkerBase.__init__ is not called: besides setting these attributes it sets IR
        # op priorities (0.26, 0.32), which a worker without kernels has no use for.
        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.cache_config = vllm_config.cache_config
        self.lora_config = vllm_config.lora_config
        self.load_config = vllm_config.load_config
        self.parallel_config = vllm_config.parallel_config
        self.scheduler_config = vllm_config.scheduler_config
        self.device_config = vllm_config.device_config
        self.speculative_config = vllm_config.speculative_config
        self.observability_config = vllm_config.observability_config
        self.kv_transfer_config = getattr(vllm_config, "kv_transfer_config", None)
        self.compilation_config = vllm_config.compilation_config
        self.local_rank = local_rank
        self.rank = rank
        self.distributed_init_method = distributed_init_method
        self.is_driver_worker = is_driver_worker
        self.device = None          # no device, ever
        self.model_runner = None

        self.settings = EmulationSettings.from_vllm_config(vllm_config)
        self.price = ProfilePrice.from_path(self.settings.profile)
        # Whether the scheduler sends -1 draft placeholders (async scheduling). Fixed at
        # start-up: the engine core picks its scheduler once, while the config's flag can
        # change later (EngineCoreProc re-runs VllmConfig.__post_init__ after its
        # handshake, core.py 0.32 l.1311, 0.26 l.1173, and the CPU platform then forces it
        # off again). EmulatedExecutor sets it when it turns async scheduling on.
        self.async_scheduling = bool(self.scheduler_config.async_scheduling)
        self.async_scheduling_turned_on = False
        self.num_spec_tokens = (0 if self.speculative_config is None
                                else int(self.speculative_config.num_speculative_tokens))
        self.acceptance_length = self._check_profile()
        from ..engine.compat import acceptance_rates_for
        self.unconditional_rates, conditional = acceptance_rates_for(
            self.acceptance_length, self.num_spec_tokens)
        self._rng = random.Random(self.settings.seed)
        self._acceptance = AcceptanceSampler(conditional, self._rng)
        self._vocab_size = int(self.model_config.get_vocab_size())
        self._eos_ids = self._eos_token_ids()
        self._requests = {}
        self._draft_ids: DraftTokenIds | None = None
        self._pending: DeadlineOutput | None = None
        # steps launched whose output was not yet taken, each with its requests' rejected
        # drafts: the scheduler counted those drafts as computed when it scheduled later
        self._in_flight: list[tuple[DeadlineOutput, dict[str, int]]] = []
        self._step = 0
        self.kv_cache_config = None
        self.device_clock = VirtualDevice(self.settings.wake_lead)
        self.step_log = StepLog(self.settings.step_log, self._header)

    def _check_profile(self) -> float:
        """The engine must draft as the profile's rows were measured; the acceptance length
        drawn at is the profile's."""
        price = self.price
        if self.num_spec_tokens != price.draft_depth:
            raise ValueError(f"sdbench emulate: the engine drafts K={self.num_spec_tokens}; "
                             f"the profile's decode rows are at K={price.draft_depth}")
        length = self.settings.acceptance_length
        if length is not None and length != price.acceptance_length:
            raise ValueError(f"sdbench emulate: acceptance length {length}; the profile's "
                             f"decode rows are at {price.acceptance_length}")
        assert price.acceptance_length is not None   # check_priceable
        block = price.kv_capacity.block_size
        if int(self.cache_config.block_size) != block:
            logger.warning("sdbench emulate: KV block size %s; the profiled engine's was %d "
                           "(pass --block-size %d)", self.cache_config.block_size, block,
                           block)
        return float(price.acceptance_length)

    # ---------------------------------------------------------------- start-up ----
    def init_device(self) -> None:
        """No device and no torch.distributed group: nothing to initialise."""

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """No model: config.json is all vLLM reads (in the front end)."""

    def compile_or_warm_up_model(self) -> CompilationTimes:
        return CompilationTimes(language_model=0.0, encoder=0.0)

    def update_max_model_len(self, max_model_len: int) -> None:
        self.model_config.max_model_len = max_model_len

    # --------------------------------------------------------------- stepping -----
    def execute_model(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput | None:
        """Price the step and launch it on the emulated device; the output comes from
        sample_tokens.

        An empty step returns EMPTY_MODEL_RUNNER_OUTPUT at once, as the GPU runner does;
        the batch-queue path of EngineCore then uses this very result (core.py, 0.32
        l.733-735, 0.26 l.653-656) and a None there would be taken for a failure.
        """
        so = scheduler_output
        self._forget(so)
        if so.total_num_scheduled_tokens == 0:
            return EMPTY_MODEL_RUNNER_OUTPUT
        computed = self._admit(so)
        self._in_flight = [(p, r) for p, r in self._in_flight if not p.taken]
        rejected: dict[str, int] = {}
        for _, by_request in self._in_flight:
            for req_id, n in by_request.items():
                rejected[req_id] = rejected.get(req_id, 0) + n
        shape = shape_of(
            (self._requests[r].prompt_len, computed[r] - rejected.get(r, 0), int(n),
             len(so.scheduled_spec_decode_tokens.get(r, ())))
            for r, n in so.num_scheduled_tokens.items())
        output, drafts, counts, rejected_now = self._sample(so, computed)
        placeholders = sum(1 for ids in so.scheduled_spec_decode_tokens.values()
                           for d in ids if d < 0)
        priced = self.price(shape)
        overlapped = bool(self._in_flight)
        launched, start, deadline = self.device_clock.launch(priced.seconds)
        t0 = self.device_clock.t0
        self._step += 1
        record = EmulatedStep(
            step=self._step, kind=priced.kind, graph_mode=priced.graph_mode,
            num_reqs=shape.requests, prefill_requests=shape.prefill_requests,
            prefill_tokens=shape.prefill_tokens, prefill_kv_tokens=shape.prefill_kv_tokens,
            decode_requests=shape.decode_requests, decode_kv_tokens=shape.decode_kv_tokens,
            draft_tokens=shape.draft_tokens,
            total_scheduled_tokens=shape.total_scheduled_tokens,
            kv_correction=sum(rejected.get(r, 0) for r in so.num_scheduled_tokens),
            num_sampled_tokens=counts[2], num_accepted_tokens=counts[0],
            num_verified_drafts=counts[1], num_placeholder_drafts=placeholders,
            price_s=priced.seconds, basis=priced.basis, how=priced.how,
            outside=priced.outside, outside_detail=priced.outside_detail,
            priced_at=priced.priced_at, clamped=list(priced.clamped),
            launch_t=launched - t0, start_t=start - t0, deadline_t=deadline - t0,
            overlapped=overlapped)
        self._draft_ids = drafts
        self._pending = DeadlineOutput(self, output, record, deadline)
        self._in_flight.append((self._pending, rejected_now))
        return None

    def sample_tokens(self, grammar_output: GrammarOutput | None = None
                      ) -> AsyncModelRunnerOutput:
        """The launched step's output, available at its deadline (get_output sleeps)."""
        pending, self._pending = self._pending, None
        if pending is None:
            raise RuntimeError("sdbench emulate: sample_tokens without a launched step")
        return pending

    def take_draft_token_ids(self) -> DraftTokenIds | None:
        drafts, self._draft_ids = self._draft_ids, None
        return drafts

    def _finish_step(self, record: EmulatedStep, deadline: float) -> None:
        log = self.step_log
        requested, waited, woke, slept = self.device_clock.wait_until(
            deadline, log.flush if log.pending else None)
        t0 = self.device_clock.t0
        record.request_t = requested - t0
        record.waited = waited
        record.woke_t = woke - t0
        record.sleep_s = slept
        end = woke if waited else deadline
        record.measured_s = end - t0 - record.start_t
        record.error_s = record.measured_s - record.price_s
        record.consumer_delay_s = max(0.0, requested - deadline)
        log.add(record)
        if all(p.taken for p, _ in self._in_flight):
            # nothing launched is left: the engine may go idle now, and a server stopped
            # later may be killed before its shutdown closes the log
            log.flush()

    def _eos_token_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.model_config.hf_config,
                       getattr(self.model_config, "hf_text_config", None)):
            eos = getattr(source, "eos_token_id", None)
            if isinstance(eos, int):
                ids.add(eos)
            elif isinstance(eos, (list, tuple)):
                ids.update(int(e) for e in eos)
        return ids

    def _header(self) -> dict[str, Any]:
        rates = self.unconditional_rates
        return {"t0_perf_counter": self.device_clock.t0, "settings": self.settings.to_json(),
                "settings_source": self.settings.source,
                "num_spec_tokens": self.num_spec_tokens,
                "acceptance_length": self.acceptance_length,
                "unconditional_rates": rates,
                "conditional_rates": self._acceptance.conditional_rates,
                "expected_acceptance_length": expected_acceptance_length(rates),
                "num_gpu_blocks": self.num_gpu_blocks(),
                "block_size": int(self.cache_config.block_size),
                "price": repr(self.price),
                "async_scheduling": self.async_scheduling,
                "async_scheduling_turned_on": self.async_scheduling_turned_on}

    # ------------------------------------------------------ the rest of the RPCs --
    def get_supported_tasks(self) -> tuple[str, ...]:
        return ("generate",)

    def check_health(self) -> None:
        return None

    def get_model(self) -> Any:
        raise RuntimeError("sdbench emulate: there is no model")

    def execute_dummy_batch(self) -> None:
        """Data parallel idles send dummy batches; nothing to run."""

    def profile(self, is_start: bool = True, *args: Any, **kwargs: Any) -> None:
        """The torch profiler has nothing to see here."""

    def reset_mm_cache(self) -> None:
        pass

    def reset_encoder_cache(self) -> None:
        pass

    def sleep(self, level: int = 1) -> None:
        pass

    def wake_up(self, tags: list[str] | None = None) -> None:
        pass

    def add_lora(self, lora_request: Any) -> bool:
        return False

    def remove_lora(self, lora_id: int) -> bool:
        return False

    def pin_lora(self, lora_id: int) -> bool:
        return False

    def list_loras(self) -> set[int]:
        return set()

    def get_kv_connector_handshake_metadata(self) -> dict:
        return {}

    def supports_draft_weight_updates(self) -> bool:
        return False

    def shutdown(self) -> None:
        self.step_log.close()
