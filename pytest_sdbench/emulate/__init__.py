"""`sdbench emulate` (issue 54): vLLM's own server with the forward pass replaced by the
profile's price of each step.

`vllm serve` runs unchanged (API server, tokenizer, scheduler, output processor, /metrics);
only the model executor is swapped, through vLLM's own seam (--distributed-executor-backend
takes an Executor's qualified name), for one that owns no model and touches no device. For
each SchedulerOutput it prices the step from a collected profile exactly as `sdbench
fidelity` prices a step (pricing.py over fidelity/predict.py), waits out that price on a
virtual device timeline without spinning a core (clock.py), and returns what an EAGLE3
worker returns: 1 + accepted drafts per verifying request, drawn at the profile's acceptance
length with vLLM's own rates (acceptance.py), and K new draft ids per request (worker.py).

    settings.py   what the engine core is told (--additional-config / $SDBENCH_EMULATE)
    executor.py   the seam: EmulatedExecutor (in-process, async scheduling, no device)
    worker.py     EmulatedWorker: every worker call vLLM makes; its KV-cache calls answered
                  from the profile's capacity (worker_kv_cache.py), its per-request state
                  and sampling (worker_sampling.py)
    step_shape.py a SchedulerOutput's step as the collector's snapshot reads it
    pricing.py    that step priced from the profile, clamped and counted where it falls
                  outside the measured ranges
    clock.py      the virtual device, the deadline sleeper, the step log
    server.py     `vllm serve` of the emulated engine (the command and the fixture)
    command.py    `sdbench emulate PROFILE ...`

The floor above fidelity: it imports wire, artifact, engine, run and fidelity; nothing below
imports it (plugin and cli, above, do). Import-light on purpose: vLLM imports the executor
class in the API server process too (VllmConfig.__post_init__ -> Executor.get_class), so
nothing here starts threads, touches a device or reads files at import time.
"""

from __future__ import annotations

# The qualified names vLLM is given (the one place they are spelled).
EXECUTOR_QUALNAME = "pytest_sdbench.emulate.executor.EmulatedExecutor"
WORKER_QUALNAME = "pytest_sdbench.emulate.worker.EmulatedWorker"
SETTINGS_KEY = "sdbench_emulate"     # key in VllmConfig.additional_config
SETTINGS_ENV = "SDBENCH_EMULATE"     # JSON, read when additional_config has no such key
