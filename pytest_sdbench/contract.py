"""One home for the facts that several modules share: names of modes, phases, policies,
timing sources and scopes, units, statuses. Everything else imports them from here."""

from __future__ import annotations

PACKAGE_NAME = "pytest-sdbench"
ARTIFACT_KIND = "pytest-sdbench/spec-decode-profile"
# Version 3 is the current artifact; 1 (autoregressive) and 2 (phase-specific speculative)
# are legacy formats that artifact.legacy still reads.
SCHEMA_VERSION = 3
LEGACY_SCHEMA_VERSIONS = {1: "v1-autoregressive", 2: "v2-phase-specific-speculative"}

# Modes and phases.
MODE_PREFILL, MODE_DECODE, MODE_AGG = "prefill", "decode", "agg"
MODES = (MODE_PREFILL, MODE_DECODE, MODE_AGG)
PHASE_PREFILL, PHASE_DECODE, PHASE_MIXED, PHASE_IDLE = "prefill", "decode", "mixed", "idle"
PHASES = (PHASE_PREFILL, PHASE_DECODE)
PHASES_BY_MODE = {MODE_PREFILL: (PHASE_PREFILL,), MODE_DECODE: (PHASE_DECODE,),
                  MODE_AGG: (PHASE_PREFILL, PHASE_DECODE)}

# Measurement policies: prefill keeps exactly one step whose shape equals the point; decode
# keeps the steady step (the second step of the point, once every request is running).
POLICY_SINGLE_STEP = "single_step"
POLICY_STEADY_STEP = "steady_step"
POLICY_BY_PHASE = {PHASE_PREFILL: POLICY_SINGLE_STEP, PHASE_DECODE: POLICY_STEADY_STEP}
STEADY_STEP_INDEX = 2  # 1-based step of a decode point that is retained

# Booking of an iteration: warm-up runs are never retained.
BOOKING_MEASURED, BOOKING_WARMUP, BOOKING_UNBOOKED = "measured", "warmup", "unbooked"
BOOKINGS = (BOOKING_MEASURED, BOOKING_WARMUP, BOOKING_UNBOOKED)

# Timing samples.
TIME_UNIT = "s"
DEVICE_CPU, DEVICE_CUDA = "cpu", "cuda"
DEVICES = (DEVICE_CPU, DEVICE_CUDA)
SOURCE_HOST_TIMER = "host_perf_counter"   # CPU: time.perf_counter_ns in the worker
SOURCE_CUDA_EVENT = "cuda_event"          # CUDA: events on the engine's stream
TIMING_SOURCES = (SOURCE_HOST_TIMER, SOURCE_CUDA_EVENT)
SOURCE_FOR_DEVICE = {DEVICE_CPU: SOURCE_HOST_TIMER, DEVICE_CUDA: SOURCE_CUDA_EVENT}
TIMER_FOR_SOURCE = {SOURCE_HOST_TIMER: "time.perf_counter_ns",
                    SOURCE_CUDA_EVENT: "torch.cuda.Event(enable_timing=True)"}
# From the start of the worker's execute_model to the end of sample_tokens: target forward,
# sampling, rejection and the EAGLE3 draft proposal of one iteration.
SCOPE_MODEL_STEP = "worker_model_step"
TIMING_SCOPES = (SCOPE_MODEL_STEP,)

# KV seed regime of a prefill point's cached prefix.
KV_SEED_NONE = "none"                 # no cached prefix (cached_prefix_tokens == 0)
KV_SEED_REAL = "real_prefix"          # computed by a real unbooked prefill, verified a hit
KV_SEED_SYNTHETIC = "synthetic_prefix"  # labelled; not qualified for strict import
KV_SEED_REGIMES = (KV_SEED_NONE, KV_SEED_REAL, KV_SEED_SYNTHETIC)

# Execution of a step as the engine reports it.
GRAPH_EAGER = "eager"
GRAPH_MODES = (GRAPH_EAGER, "piecewise", "full")

# Acceptance control of decode points.
ACCEPTANCE_NATURAL = "natural"      # whatever the draft achieves (CPU: dummy weights give AL 1)
ACCEPTANCE_SYNTHETIC = "synthetic"  # vLLM's synthetic rejection sampling (CUDA only)
ACCEPTANCE_CONTROLS = (ACCEPTANCE_NATURAL, ACCEPTANCE_SYNTHETIC)

# Artifact status.
STATUS_COMPLETE, STATUS_PARTIAL, STATUS_FAILED = "complete", "partial", "failed"
STATUSES = (STATUS_COMPLETE, STATUS_PARTIAL, STATUS_FAILED)

# Every request the package sends (seeds, warm-ups, measured runs, the serving probe) uses
# these generation sampling parameters; only max_tokens varies.
GENERATION_SAMPLING = {"temperature": 0.0, "ignore_eos": True, "detokenize": False}
# The first token ids are special (pad, bos, eos) in most vocabularies; prompts avoid them.
FIRST_PROMPT_TOKEN = 3

SPEC_METHOD_EAGLE3 = "eagle3"
DEFAULT_DRAFT_DEPTH = 3

# Identity fields are resolved (value + source) or unresolved (reason); never guessed.
IDENTITY_RESOLVED, IDENTITY_UNRESOLVED = "resolved", "unresolved"
