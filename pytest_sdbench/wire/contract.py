"""One home for the facts that several modules share: names of modes, phases, policies,
timing sources and scopes, units, statuses, and the bounds the validator applies.
Everything else imports them from here.

Each closed set of names is a ``Literal`` type (so that schema.json carries its values)
and a tuple of its values read from that type, plus one constant per name. A constant
that a typed field receives is annotated with its ``Literal`` type, so that mypy checks it.
"""

from __future__ import annotations

from typing import Final, Literal, TypedDict, get_args

PACKAGE_NAME = "pytest-sdbench"
ARTIFACT_KIND = "pytest-sdbench/spec-decode-profile"
# The index of a K sweep (artifact/sweep.py), written beside its artifacts.
SWEEP_INDEX_KIND = "pytest-sdbench/k-sweep-index"
# Version 7 is the current artifact; 1 (autoregressive), 2 (phase-specific speculative),
# 3 (one observation per point, no engine settings), 4 (repeats taken back to back, no
# rounds, no host canary), 5 (decode retained the first decode step after admission, the
# transient `steady_step`; no GPU clock) and 6 (two phases: no mixed phase) are legacy
# formats that artifact.legacy still reads.
SCHEMA_VERSION = 7
LEGACY_SCHEMA_VERSIONS = {1: "v1-autoregressive", 2: "v2-phase-specific-speculative",
                          3: "v3-single-sample", 4: "v4-back-to-back-repeats",
                          5: "v5-first-decode-step", 6: "v6-two-phases"}

# Modes and phases. A mixed point is one engine step that prefills some requests while
# others decode with their drafts (what `vllm serve` runs most under load), asked for and
# measured as such. agg is the prefill and the decode phase (the consumer's two), and the
# mixed phase too where its grid holds mixed points (asked for: a manifest's, or --mixed):
# collected_phases; its prefill and decode points never share a measured batch.
Mode = Literal["prefill", "decode", "agg", "mixed"]
MODE_PREFILL, MODE_DECODE, MODE_AGG, MODE_MIXED = get_args(Mode)
MODES: tuple[str, ...] = get_args(Mode)
Phase = Literal["prefill", "decode", "mixed"]
PHASE_PREFILL, PHASE_DECODE, PHASE_MIXED = get_args(Phase)
PHASES: tuple[str, ...] = get_args(Phase)
# The phases the consumer (AISimulate) imports, one per file; a mixed phase it has none of.
TWO_PHASES = (PHASE_PREFILL, PHASE_DECODE)
SnapshotPhase = Literal["prefill", "decode", "mixed", "idle"]
PHASE_IDLE: Final = "idle"
PHASES_BY_MODE = {MODE_PREFILL: (PHASE_PREFILL,), MODE_DECODE: (PHASE_DECODE,),
                  MODE_AGG: TWO_PHASES, MODE_MIXED: (PHASE_MIXED,)}


def collected_phases(mode: str, mixed_points: bool) -> tuple[str, ...]:
    """The phases a collection of `mode` measures: the mode's own, and under agg the mixed
    phase too where the grid holds mixed points."""
    phases = PHASES_BY_MODE[mode]
    return (*phases, PHASE_MIXED) if mode == MODE_AGG and mixed_points else phases

# Measurement policies. Prefill keeps exactly one step whose shape equals the point
# (single_step). Decode keeps settled steps (settled_steps): a decode run's step 1 admits
# the seeded batch from the prefix cache, step 2 is its first decode step, a transient a
# request runs once in its life (vLLM alone on the H200, qwen3-8b B=1 x 1024, decode steps
# 1-4 after admission: 7.92, 6.88, 6.89, 6.88 ms; B=4: 7.61, 7.00, 7.00, 7.01; the CPU
# engine's and our own per-step figures in docs/evidence/h200/settled/), and the steps after
# it are what the engine runs while it serves. Each work item retains SETTLED_STEPS
# consecutive steps from SETTLED_FIRST_STEP on, each an exact observation with its own
# snapshot (its context grows by the tokens accepted before it) and native ID. Adjacent
# steps are not independent samples: one work item is one sample of its point (its steps'
# lower median), so rounds stay the unit of repetition. steady_step (legacy v5 and older)
# retained step 2, the transient.
# A mixed point is mixed_step: its decode batch is admitted and runs its transient first
# step as a decode point's does; the point's prefills are added so that the scheduler admits
# them beside the running decodes in run step MIXED_STEP_INDEX (the first settled step), and
# that one step, found by the requests it schedules, is retained.
Policy = Literal["single_step", "steady_step", "settled_steps", "mixed_step"]
POLICY_SINGLE_STEP, POLICY_STEADY_STEP, POLICY_SETTLED_STEPS, POLICY_MIXED_STEP = \
    get_args(Policy)
POLICY_BY_PHASE = {PHASE_PREFILL: POLICY_SINGLE_STEP, PHASE_DECODE: POLICY_SETTLED_STEPS,
                   PHASE_MIXED: POLICY_MIXED_STEP}


def policies_for(mode: str, mixed_points: bool) -> dict[str, str | None]:
    """The policy an artifact states for each phase: the mode's prefill and decode phases
    their policy; the mixed phase where the mode takes it and the grid holds mixed points
    (agg stays two-phase for the consumer unless mixed points were asked for)."""
    phases = collected_phases(mode, mixed_points)
    return {phase: POLICY_BY_PHASE[phase] if phase in phases
            and (phase != PHASE_MIXED or mixed_points) else None for phase in PHASES}
POLICY_DESCRIPTIONS = {
    POLICY_SINGLE_STEP: "one step whose shape equals the point",
    POLICY_STEADY_STEP: "the first decode step after admission (a transient a request runs "
                        "once; legacy, not the serving step)",
    POLICY_SETTLED_STEPS: "settled steps of a running batch (decode steps after the first)",
    POLICY_MIXED_STEP: "one step of a running decode batch that admits the point's prefills "
                       "beside its decodes (run step 3)",
}
STEADY_STEP_INDEX = 2    # steady_step (legacy): the 1-based run step that was retained
SETTLED_FIRST_STEP = 3   # settled_steps: the first retained run step (decode step 2)
SETTLED_STEPS = 4        # settled_steps: consecutive steps retained per work item
MIXED_STEP_INDEX = SETTLED_FIRST_STEP   # mixed_step: the run step that admits the prefills

# Warm-up: unbooked passes until a step time is stable: the last pass within
# WARMUP_TOLERANCE of the one before, after at least WARMUP_MIN_PASSES passes and at most
# WARMUP_MAX_PASSES (then the point is measured and says it did not settle).
# until_stable: every exact coordinate warms up so. by_shape: coordinates of one compiled
# shape (phase, graph mode, token count padded to the capture size it ran at) share warm
# state, so a point whose shape an earlier point of the warm-up settled takes
# WARMUP_SHAPE_PASSES pass, its coordinate's first run; the first point of a shape warms up
# until stable. Measured on the H200 (docs/evidence/h200/plan-grade): 78 of 79 qwen3-8b
# decode points whose graph size had run were warm at their first run, 7 of 17 of the first
# of a size. by_shape_seeded (what a collection writes): by_shape, except that a decode point
# whose shape settled takes WARMUP_SEEDED_PASSES[decode] = 0 passes: its seed (its prompts in
# the prefix cache) is its warm-up, and its first run, its first sample, is checked to run a
# settled shape (else it warms up then and runs again). Measured on an H100
# (scripts/first-run.py): such a point's first run read 1.006 of its next runs' median, 6% of
# them over 1.05 as 6% of second runs; a prefill point's, 33% over 1.05 against 10%, so it
# keeps its pass. single_pass: legacy (v1-v3) only.
WarmupRule = Literal["until_stable", "single_pass", "by_shape", "by_shape_seeded"]
WARMUP_UNTIL_STABLE, WARMUP_SINGLE_PASS, WARMUP_BY_SHAPE, WARMUP_BY_SHAPE_SEEDED = \
    get_args(WarmupRule)
WARMUP_MIN_PASSES, WARMUP_MAX_PASSES, WARMUP_TOLERANCE = 2, 8, 0.05
WARMUP_SHAPE_PASSES = 1
WARMUP_SEEDED_PASSES = {PHASE_PREFILL: WARMUP_SHAPE_PASSES, PHASE_DECODE: 0,
                        PHASE_MIXED: WARMUP_SHAPE_PASSES}
WARMUP_RULE = WARMUP_BY_SHAPE_SEEDED   # the rule a collection writes
WARMUP_SHAPE_RULES = (WARMUP_BY_SHAPE, WARMUP_BY_SHAPE_SEEDED)
# by_shape: v6 since 12-05; by_shape_seeded: v6 since 12-05 night
WARMUP_RULES_SINCE_V4 = (WARMUP_UNTIL_STABLE, *WARMUP_SHAPE_RULES)
# (min_passes, max_passes, tolerance) that each rule states
WARMUP_BOUNDS: dict[str, tuple[int, int, float]] = {
    WARMUP_UNTIL_STABLE: (WARMUP_MIN_PASSES, WARMUP_MAX_PASSES, WARMUP_TOLERANCE),
    WARMUP_BY_SHAPE: (WARMUP_SHAPE_PASSES, WARMUP_MAX_PASSES, WARMUP_TOLERANCE),
    WARMUP_BY_SHAPE_SEEDED: (min(WARMUP_SEEDED_PASSES.values()), WARMUP_MAX_PASSES,
                             WARMUP_TOLERANCE),
    WARMUP_SINGLE_PASS: (1, 1, 0.0)}
DEFAULT_REPEATS = 1

# Repeats. "rounds": each round measures every point once, in a fresh seeded order, so that
# a point's samples are spread over the whole collection and their dispersion is the
# host's true noise (repeats taken back to back share the host's speed of that moment and
# understate it). "back_to_back": a point's repeats one after the other (the v4 policy),
# kept as an explicit, recorded choice.
RepeatOrder = Literal["rounds", "back_to_back"]
REPEAT_ROUNDS, REPEAT_BACK_TO_BACK = get_args(RepeatOrder)
REPEAT_ORDERS: tuple[str, ...] = get_args(RepeatOrder)
DEFAULT_ORDER_SEED = 0
# Why a point has the samples it has: a fixed number of rounds; until pinned: its median was
# pinned, or it reached the cap of rounds unpinned; a collection that ended early (a partial
# artifact) leaves its points not finished.
StopRule = Literal["fixed_rounds", "pinned", "round_cap", "not_finished"]
STOP_FIXED, STOP_PINNED, STOP_ROUND_CAP, STOP_NOT_FINISHED = get_args(StopRule)
STOP_RULES: tuple[str, ...] = get_args(StopRule)
# The median is pinned when the half width of its confidence interval, relative to it, is
# at most the stated width. The interval of a median of n samples is
# q * sqrt(pi/2) * stdev / sqrt(n) (the median's standard error is sqrt(pi/2) ~ 1.2533
# times the mean's for normal noise), q the two-sided PINNED_CONFIDENCE quantile of
# Student's t with n-1 degrees of freedom (student_t, since v6: the stdev is estimated from
# the same few samples; q = 4.30 at n = 3, 2.78 at n = 5) or of the normal (normal_z, v5
# and older: 1.96 at every n, about 2.2x too narrow at n = 3).
MedianInterval = Literal["normal_z", "student_t"]
MEDIAN_NORMAL_Z, MEDIAN_STUDENT_T = get_args(MedianInterval)
MEDIAN_INTERVAL: MedianInterval = MEDIAN_STUDENT_T   # what a collection now states
PINNED_CONFIDENCE, PINNED_Z = 0.95, 1.959963984540054
# t quantiles, two-sided 95%, for 1..30 degrees of freedom (past 30: z + (z^3+z)/(4 df),
# within 0.2% of the exact quantile there).
STUDENT_T_95 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624,
                2.306004, 2.262157, 2.228139, 2.200985, 2.178813, 2.160369, 2.144787,
                2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963, 2.079614,
                2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407,
                2.045230, 2.042272)
MEDIAN_SE_FACTOR = 1.2533141373155001
MIN_PINNED_ROUNDS = 3       # fewer samples do not estimate a spread
DEFAULT_MAX_ROUNDS = 20
# compare judges noise from the dispersion across rounds; fewer rounds cannot tell it.
MIN_ROUNDS_FOR_NOISE = 3

# The host-speed canary, measured before and after every round: a fixed pure-Python
# workload (the host's speed for the Python side of a step), and on CUDA the host time to
# launch CANARY_KERNELS tiny kernels (what a step's launches cost). Each value is the
# median of CANARY_REPS runs.
CANARY_LOOP_ITERATIONS, CANARY_KERNELS, CANARY_REPS = 20_000, 300, 5
CANARY_WORKLOAD = (f"python: median of {CANARY_REPS} runs of a fixed {CANARY_LOOP_ITERATIONS}-"
                   f"iteration pure-Python loop; launch (cuda): median of {CANARY_REPS} host "
                   f"times to enqueue {CANARY_KERNELS} tiny kernels on the engine's device")

# Booking of an iteration: warm-up runs are never retained.
Booking = Literal["measured", "warmup", "unbooked"]
BOOKING_MEASURED, BOOKING_WARMUP, BOOKING_UNBOOKED = get_args(Booking)
BOOKINGS: tuple[str, ...] = get_args(Booking)

# Timing samples.
TimeUnit = Literal["s"]
TIME_UNIT: TimeUnit = get_args(TimeUnit)[0]
Device = Literal["cpu", "cuda"]
DEVICE_CPU, DEVICE_CUDA = get_args(Device)
DEVICES: tuple[str, ...] = get_args(Device)
TimingSource = Literal["host_perf_counter", "cuda_event"]
SOURCE_HOST_TIMER, SOURCE_CUDA_EVENT = get_args(TimingSource)  # CPU: perf_counter_ns; CUDA
TIMING_SOURCES: tuple[str, ...] = get_args(TimingSource)
SOURCE_FOR_DEVICE = {DEVICE_CPU: SOURCE_HOST_TIMER, DEVICE_CUDA: SOURCE_CUDA_EVENT}
TIMER_FOR_SOURCE = {SOURCE_HOST_TIMER: "time.perf_counter_ns",
                    SOURCE_CUDA_EVENT: "torch.cuda.Event(enable_timing=True)"}
# From the start of the worker's execute_model to the end of sample_tokens: target forward,
# sampling, rejection and the EAGLE3 draft proposal of one iteration.
TimingScope = Literal["worker_model_step"]
SCOPE_MODEL_STEP: TimingScope = get_args(TimingScope)[0]
TIMING_SCOPES: tuple[str, ...] = get_args(TimingScope)

# The time of one step of a tensor-parallel engine: every rank times its own step; the
# point's time is the slowest rank's (the step is done when every rank is).
StepTimeRule = Literal["single_rank", "slowest_rank"]
STEP_TIME_SINGLE_RANK, STEP_TIME_SLOWEST_RANK = get_args(StepTimeRule)

# Bounds no real step crosses (a forged or corrupted time does): a step's time lies in
# [STEP_SECONDS_MIN, STEP_SECONDS_MAX[device]], and per scheduled token it is at most
# STEP_SECONDS_PER_TOKEN_MAX[device]. The slowest real steps seen: about 62 ms (H200,
# 8k-token prefill) and 0.5 s (2-core CPU, tiny preset); the bounds leave 100x room.
STEP_SECONDS_MIN = 1e-6
STEP_SECONDS_MAX = {DEVICE_CPU: 60.0, DEVICE_CUDA: 10.0}
STEP_SECONDS_PER_TOKEN_MAX = {DEVICE_CPU: 0.25, DEVICE_CUDA: 0.02}
# ... on top of a fixed allowance per step: a step of a few tokens reads every weight once
# whatever its tokens (the H200 eager decode of a 0.6B model already takes 5 ms a token at
# 4 tokens; a 70B model's would cross 0.02 s a token). Bound of a step of T scheduled
# tokens: STEP_SECONDS_BASE[device] + T * STEP_SECONDS_PER_TOKEN_MAX[device].
STEP_SECONDS_BASE = {DEVICE_CPU: 2.0, DEVICE_CUDA: 0.25}
# measured_seconds is the sum of the retained step times, to this relative tolerance (the
# order of a float sum); the collection's wall time fits between started_at and created_at
# give or take this much (clock steps, rounding of the timestamps).
MEASURED_SUM_REL_TOL = 1e-9
CLOCK_SLACK_SECONDS = 2.0

# KV seed regime of a prefill point's cached prefix.
KVSeedRegime = Literal["none", "real_prefix", "synthetic_prefix"]
KV_SEED_NONE, KV_SEED_REAL, KV_SEED_SYNTHETIC = get_args(KVSeedRegime)
KV_SEED_REGIMES: tuple[str, ...] = get_args(KVSeedRegime)
KV_SEED_UNVERIFIED: Final = "unverified"   # legacy (v1, v2) only: a prefix nobody verified

# Execution of a step as the engine reports it; CPU engines never capture graphs.
GraphMode = Literal["eager", "piecewise", "full"]
GRAPH_EAGER, GRAPH_PIECEWISE, GRAPH_FULL = get_args(GraphMode)
GRAPH_MODES: tuple[str, ...] = get_args(GraphMode)
GRAPH_MODES_BY_DEVICE = {DEVICE_CPU: (GRAPH_EAGER,), DEVICE_CUDA: GRAPH_MODES}
# identity.cudagraph_mode of an engine that captures no CUDA graph (every CPU engine): its
# steps all run eager.
CUDAGRAPH_NONE = "none"

# Attention backends known to belong to one device (vLLM's backend names); a backend of
# the other device betrays a relabelled artifact. Unknown names are not judged.
ATTENTION_BACKENDS_BY_DEVICE = {
    DEVICE_CPU: ("CPU_ATTN", "TORCH_SDPA", "CPU_FLASH_ATTN"),
    DEVICE_CUDA: ("FLASH_ATTN", "FLASH_ATTN_MLA", "FLASHINFER", "FLASHINFER_MLA",
                  "TRITON_ATTN", "TRITON_MLA", "FLEX_ATTENTION", "CUTLASS_MLA", "FLASHMLA",
                  "TREE_ATTN", "XFORMERS"),
}
# GPU names as torch.cuda.get_device_name gives them ("NVIDIA H200", "Tesla T4", "Tesla
# V100-SXM2-16GB", "Quadro RTX 6000", "AMD Instinct MI300X") begin with one of these words;
# a CPU run's name (platform.processor() or machine(): "x86_64", "aarch64") never does. The
# prefix is a whole word, so that Windows' "AMD64 Family 23 ..." processor is no GPU.
GPU_NAME_PREFIXES = ("NVIDIA", "Tesla", "Quadro", "GeForce", "TITAN", "AMD", "Radeon",
                     "AMD Instinct")

# The GPU's clock beside each work item (NVML, read right before and right after the
# measured run, between steps: never inside one, no synchronisation). NVML's clock event
# reasons, by name; a sample taken while one of CLOCK_CAP_REASONS was active is capped.
ClockReason = Literal["gpu_idle", "applications_clocks_setting", "sw_power_cap",
                      "hw_slowdown", "sync_boost", "sw_thermal_slowdown",
                      "hw_thermal_slowdown", "hw_power_brake_slowdown",
                      "display_clocks_setting"]
CLOCK_REASONS: tuple[str, ...] = get_args(ClockReason)
CLOCK_CAP_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown",
                     "hw_thermal_slowdown", "hw_power_brake_slowdown")
CLOCK_MHZ_MAX = 10_000   # no GPU clocks its SMs this fast; a larger reading is forged

# Acceptance control of decode points.
AcceptanceControl = Literal["natural", "synthetic"]
ACCEPTANCE_NATURAL, ACCEPTANCE_SYNTHETIC = get_args(AcceptanceControl)  # synthetic: CUDA only
ACCEPTANCE_CONTROLS: tuple[str, ...] = get_args(AcceptanceControl)
DEVICES_WITH_SYNTHETIC_ACCEPTANCE = (DEVICE_CUDA,)

# Artifact status.
Status = Literal["complete", "partial", "failed"]
STATUS_COMPLETE, STATUS_PARTIAL, STATUS_FAILED = get_args(Status)
STATUSES: tuple[str, ...] = get_args(Status)

# Every request the package sends (seeds, warm-ups, measured runs, the serving probe) uses
# these generation sampling parameters; only max_tokens varies. Typed, so that mypy checks
# them against vllm.SamplingParams where they are passed as keywords.
class GenerationSampling(TypedDict):
    temperature: float
    ignore_eos: bool
    detokenize: bool


GENERATION_SAMPLING: Final[GenerationSampling] = {"temperature": 0.0, "ignore_eos": True,
                                                  "detokenize": False}
# The first token ids are special (pad, bos, eos) in most vocabularies; prompts avoid them.
FIRST_PROMPT_TOKEN = 3

SpecMethod = Literal["eagle3"]
SPEC_METHOD_EAGLE3: SpecMethod = get_args(SpecMethod)[0]
SPEC_METHOD_NONE: Final = "none"   # legacy v1 (autoregressive) artifacts only
DEFAULT_DRAFT_DEPTH = 3
# The draft depths a consumer (AISimulate) imports; K outside is kept and flagged.
K_WINDOW = (1, 5)
# The consumer's repeatability policy (AISimulate): a coordinate is imported when its
# CONSUMER_REPEATS independent samples vary by a CV of at most CONSUMER_MAX_CV and their
# median agrees with the source's within CONSUMER_MAX_DISAGREEMENT (relative).
CONSUMER_REPEATS, CONSUMER_MAX_CV, CONSUMER_MAX_DISAGREEMENT = 5, 0.05, 0.05

# Identity fields are resolved (value + source) or unresolved (reason); never guessed.
IdentityStatus = Literal["resolved", "unresolved"]
IDENTITY_RESOLVED, IDENTITY_UNRESOLVED = get_args(IdentityStatus)
# A revision a consumer can pin: a full 40-hex git commit.
REVISION_PATTERN = r"^[0-9a-f]{40}$"
SOURCE_USER = "user"   # a fact the user gave on the command line

# Contention: what was running beside the engine while it was measured. Other processes
# using more than this many CPU cores on average over the collection count as contention,
# and so does any other sdbench engine on the host or other process on its GPUs.
CONTENTION_OTHER_CORES = 0.5

# Hostile input caps of the reader (docs/artifact.md states them). The consumer's own grid of
# qwen3-0.6b (957 points, settled steps) takes about 14 MB a round as written: 5 rounds went
# past the 64 MiB this cap was (70 MB, docs/evidence/h200/plan-grade), hence 192 MiB.
MAX_ARTIFACT_BYTES = 192 << 20
MAX_JSON_DEPTH = 32
MAX_REPORTED_VIOLATIONS = 50

# The observer's own host cost a step (observer.cost.measure): host seconds spent in the
# observer's wrappers of the engine's four methods, measured by a thin timing probe above
# the wrappers minus one beneath them, less the probes' own cost (the same two probes with
# nothing between them), over the real steps of a probe run.
ObserverCostMethod = Literal["wrapper_probes"]
OBSERVER_COST_METHOD: ObserverCostMethod = get_args(ObserverCostMethod)[0]
