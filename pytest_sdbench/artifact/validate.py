"""The fail-closed validator. It reads an artifact's JSON, refuses what it cannot trust, and
names the field and the value of every violation, one message each; it never repairs or
guesses. docs/artifact.md lists every rule.

    report = validate_data(json.load(open(path)))
    report.ok, report.errors, report.flags, report.legacy

Digests are unkeyed sha256: anyone can recompute them, so they only prove that the parts
agree with each other. Each rule below therefore checks one fact against another the
artifact also states (the device against its name, backend and graph modes; the sums
against their steps; the grid against the KV capacity; ...), so that a forgery that
changes one fact coherently, digests recomputed, still contradicts another.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..wire import typed
from ..wire.contract import (
    ACCEPTANCE_SYNTHETIC,
    ARTIFACT_KIND,
    ATTENTION_BACKENDS_BY_DEVICE,
    BOOKING_MEASURED,
    CLOCK_SLACK_SECONDS,
    CONTENTION_OTHER_CORES,
    CUDAGRAPH_NONE,
    DEVICE_CPU,
    DEVICE_CUDA,
    DEVICES_WITH_SYNTHETIC_ACCEPTANCE,
    GENERATION_SAMPLING,
    GPU_NAME_PREFIXES,
    GRAPH_EAGER,
    GRAPH_MODES_BY_DEVICE,
    IDENTITY_RESOLVED,
    K_WINDOW,
    KV_SEED_NONE,
    KV_SEED_REAL,
    KV_SEED_REGIMES,
    LEGACY_SCHEMA_VERSIONS,
    MEASURED_SUM_REL_TOL,
    OBSERVER_COST_METHOD,
    PACKAGE_NAME,
    PHASE_DECODE,
    PHASE_PREFILL,
    PHASES_BY_MODE,
    POLICY_BY_PHASE,
    SCHEMA_VERSION,
    SOURCE_FOR_DEVICE,
    SPEC_METHOD_EAGLE3,
    SPEC_METHOD_NONE,
    STATUS_COMPLETE,
    STEADY_STEP_INDEX,
    STEP_SECONDS_BASE,
    STEP_SECONDS_MAX,
    STEP_SECONDS_MIN,
    STEP_SECONDS_PER_TOKEN_MAX,
    STEP_TIME_SINGLE_RANK,
    STEP_TIME_SLOWEST_RANK,
    TIMER_FOR_SOURCE,
    WARMUP_MAX_PASSES,
    WARMUP_MIN_PASSES,
    WARMUP_SINGLE_PASS,
    WARMUP_TOLERANCE,
    WARMUP_UNTIL_STABLE,
)
from ..wire.identity import IdentityField
from ..wire.model import Artifact, parse_utc, summarize
from ..wire.points import Grid, engine_limits, fit_errors, grid_digest, point_errors
from ..wire.records import Snapshot
from ..wire.rounds import point_canary_spread, samples_by_point, stop_rule
from ..wire.shape import decode_mismatch, prefill_mismatch
from ..wire.typed import digest
from .check_rounds import check_rounds, check_samples, unfinished

# A consumer's draft-depth import window; K outside it is flagged, never dropped.
DEFAULT_K_WINDOW = K_WINDOW
V1 = LEGACY_SCHEMA_VERSIONS[1]
Err = Callable[[str], None]
_LEGACY_VERSION = {marker: version for version, marker in LEGACY_SCHEMA_VERSIONS.items()}


def older_than(legacy: str | None, version: int) -> bool:
    """The artifact was written in a schema_version before `version` (then upgraded)."""
    return legacy is not None and _LEGACY_VERSION[legacy] < version


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    legacy: str | None = None
    artifact: Artifact | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


def validate_data(data: dict, k_window: tuple[int, int] = DEFAULT_K_WINDOW) -> Report:
    """Every violation in ``data``; an empty ``errors`` means the artifact can be trusted."""
    from .legacy import LegacyError, upgrade  # legacy formats are read by upgrading them
    report = Report()
    version = data.get("schema_version") if isinstance(data, dict) else None
    if type(version) is not int:   # a boolean is an int to Python; `true` is no version
        report.errors.append(f"schema_version: expected an integer 1..{SCHEMA_VERSION}, got "
                             f"{type(version).__name__} {version!r}")
        return report
    if version > SCHEMA_VERSION:
        report.errors.append(f"schema_version: {version} is newer than this reader "
                             f"(reads 1..{SCHEMA_VERSION}); upgrade pytest-sdbench")
        return report
    if version in LEGACY_SCHEMA_VERSIONS:
        try:
            data, report.legacy = upgrade(data)
        except LegacyError as exc:
            report.errors.extend(exc.errors)
            return report
        except ValueError as exc:
            report.errors.append(str(exc))
            return report
        except (TypeError, AttributeError, KeyError) as exc:
            report.errors.append(f"schema_version {version}: malformed legacy artifact "
                                 f"({type(exc).__name__}: {exc})")
            return report
    elif version != SCHEMA_VERSION:
        report.errors.append(f"schema_version: expected an integer 1..{SCHEMA_VERSION}, "
                             f"got {version!r}")
        return report
    try:
        artifact = typed.decode(Artifact, data)
    except typed.DecodeError as exc:
        report.errors.extend(exc.errors)
        return report
    report.artifact = artifact
    _check(artifact, report)
    _flag_k_window(artifact, k_window, report)
    return report


def _check(a: Artifact, report: Report) -> None:
    err, legacy = report.errors.append, report.legacy
    check_header(a, err, legacy)
    check_policy(a, err, legacy)
    check_speculative(a, err, legacy)
    check_identity(a, err, legacy)
    check_kv(a, err, legacy)
    check_grid(a, err, legacy)
    check_environment(a, err, report.flags, legacy)
    check_observations(a, err, legacy)
    check_samples(a, err)
    check_rounds(a, err, legacy)
    check_summaries(a, err)
    check_times(a, err, legacy)
    check_observer_cost(a, err, report.flags)
    check_coverage(a, err)


# ---- helpers ---------------------------------------------------------------------------

def resolved(f: IdentityField):
    """A resolved identity value, or None."""
    return f.value if f.status == IDENTITY_RESOLVED else None


def resolved_int(f: IdentityField) -> int | None:
    v = resolved(f)
    return v if type(v) is int else None


def is_gpu_name(name: str) -> bool:
    """A GPU's device name: it begins with one of the GPU name prefixes, as a whole word."""
    return any(name == p or name.startswith(p + " ") for p in GPU_NAME_PREFIXES)


def all_observations(a: Artifact):
    for phase in (PHASE_PREFILL, PHASE_DECODE):
        for i, obs in enumerate(getattr(a, phase)):
            yield phase, i, obs


def fsum_or_inf(values: Sequence[float]) -> float:
    try:
        return math.fsum(values)
    except OverflowError:
        return math.inf


def is_real_step(seconds: float, device: str) -> bool:
    return math.isfinite(seconds) and STEP_SECONDS_MIN <= seconds <= STEP_SECONDS_MAX[device]


# ---- header ----------------------------------------------------------------------------

def check_header(a: Artifact, err: Err, legacy) -> None:
    if a.kind != ARTIFACT_KIND:
        err(f"kind: expected {ARTIFACT_KIND!r}, got {a.kind!r}")
    if not a.run_id.strip():
        err(f"run_id: must be a non-empty ID, got {a.run_id!r}")
    if parse_utc(a.created_at) is None:
        err(f"created_at: must be an ISO 8601 UTC timestamp (e.g. 2026-11-30T20:07:00+00:00), "
            f"got {a.created_at!r}")
    if a.started_at is None:
        if not older_than(legacy, 4):
            err("started_at: null; required since schema_version 4 (null only in artifacts "
                "upgraded from schema_version 3 or older)")
    elif parse_utc(a.started_at) is None:
        err(f"started_at: must be an ISO 8601 UTC timestamp, got {a.started_at!r}")
    p, ident = a.producer, a.identity
    if p.package != PACKAGE_NAME:
        err(f"producer.package: expected {PACKAGE_NAME!r}, got {p.package!r}")
    if p.engine != resolved(ident.engine):
        err(f"producer.engine: {p.engine!r} differs from identity.engine "
            f"{resolved(ident.engine)!r}")
    if p.engine_version != resolved(ident.engine_version):
        err(f"producer.engine_version: {p.engine_version!r} differs from "
            f"identity.engine_version {resolved(ident.engine_version)!r}")
    sampling = typed.encode(a.sampling)
    if sampling != GENERATION_SAMPLING:
        err(f"sampling: {sampling} differs from the generation sampling every request of "
            f"the package uses, {GENERATION_SAMPLING}")


def check_policy(a: Artifact, err: Err, legacy) -> None:
    phases = PHASES_BY_MODE[a.mode]
    policy = a.measurement_policy
    for phase in (PHASE_PREFILL, PHASE_DECODE):
        want = POLICY_BY_PHASE[phase] if phase in phases else None
        if getattr(policy, phase) != want:
            err(f"measurement_policy.{phase}: expected {want!r} for mode {a.mode!r}, "
                f"got {getattr(policy, phase)!r}")
    if policy.repeats < 1:
        err(f"measurement_policy.repeats: must be >= 1, got {policy.repeats}")
    warmup = policy.warmup
    # Since schema v4 a point warms up until stable with the contract's passes and
    # tolerance; older artifacts warmed up once (the reader states it so).
    old = older_than(legacy, 4)
    want = ((WARMUP_SINGLE_PASS, 1, 1, 0.0) if old else
            (WARMUP_UNTIL_STABLE, WARMUP_MIN_PASSES, WARMUP_MAX_PASSES, WARMUP_TOLERANCE))
    names = ("rule", "min_passes", "max_passes", "tolerance")
    for name, expected in zip(names, want, strict=True):
        got = getattr(warmup, name)
        if got != expected or type(got) is not type(expected):
            err(f"measurement_policy.warmup.{name}: {got!r}, the "
                f"{'legacy reader' if old else 'contract'} states {expected!r}")
    tp = resolved_int(a.identity.tensor_parallel_size)
    if tp is None or tp < 1:
        err("identity.tensor_parallel_size: must be a resolved integer >= 1, got "
            f"{a.identity.tensor_parallel_size.value!r}")
    elif (policy.step_time_rule == STEP_TIME_SINGLE_RANK) != (tp == 1):
        err(f"measurement_policy.step_time_rule: {policy.step_time_rule!r} with "
            f"identity.tensor_parallel_size {tp}; {STEP_TIME_SINGLE_RANK!r} is the rule of one "
            f"rank, {STEP_TIME_SLOWEST_RANK!r} of several")


# ---- speculative decoding and the identity ---------------------------------------------

# The identity facts that say which draft an EAGLE3 run ran: always read from its config.
DRAFT_NAMED_BY = ("model", "architecture")


def check_speculative(a: Artifact, err: Err, legacy) -> None:
    spec, ident = a.speculative, a.identity
    if legacy == V1:
        if spec.method != SPEC_METHOD_NONE or spec.draft_depth != 0:
            err(f"speculative: method {spec.method!r}, K={spec.draft_depth} in an "
                f"autoregressive artifact ({V1})")
        return
    if spec.method != SPEC_METHOD_EAGLE3:
        err(f"speculative.method: {spec.method!r}; only {V1} artifacts measure no "
            f"speculative decoding, every other one measures {SPEC_METHOD_EAGLE3!r}")
    if resolved(ident.method) != spec.method:
        err(f"identity.method: {resolved(ident.method)!r} differs from speculative.method "
            f"{spec.method!r}")
    if spec.method == SPEC_METHOD_EAGLE3:
        for name in DRAFT_NAMED_BY:
            fact = getattr(ident.draft, name)
            if fact.status != IDENTITY_RESOLVED:
                err(f"identity.draft.{name}: unresolved ({fact.reason!r}); an "
                    f"{SPEC_METHOD_EAGLE3} run names the draft model it ran")
    if spec.draft_depth < 1:
        err(f"speculative.draft_depth: must be >= 1 under {SPEC_METHOD_EAGLE3}, got "
            f"{spec.draft_depth}")
    if resolved(ident.draft_depth) != spec.draft_depth or type(resolved(ident.draft_depth)) \
            is not int:
        err(f"speculative.draft_depth: {spec.draft_depth} differs from identity.draft_depth "
            f"{resolved(ident.draft_depth)!r}")
    control = spec.acceptance_control
    if resolved(ident.acceptance_control) != control:
        err(f"identity.acceptance_control: {resolved(ident.acceptance_control)!r} differs from "
            f"speculative.acceptance_control {control!r}")
    synthetic = control == ACCEPTANCE_SYNTHETIC
    al = spec.synthetic_acceptance_length
    if synthetic != (al is not None):
        err(f"speculative.synthetic_acceptance_length: {al} under {control} acceptance "
            "(synthetic needs a number, natural needs null)")
    elif al is not None and not 1.0 <= al <= spec.draft_depth + 1:
        err(f"speculative.synthetic_acceptance_length: {al} is outside [1, K+1 = "
            f"{spec.draft_depth + 1}]")
    if synthetic and a.device not in DEVICES_WITH_SYNTHETIC_ACCEPTANCE:
        err(f"speculative.acceptance_control: {control!r} on a {a.device!r} run; vLLM's "
            f"synthetic acceptance runs on {', '.join(DEVICES_WITH_SYNTHETIC_ACCEPTANCE)} only")


def check_identity(a: Artifact, err: Err, legacy) -> None:
    _check_identity_fields(a.identity, "identity", err)
    if a.integrity.identity_digest != digest(a.identity):
        err(f"integrity.identity_digest: {a.integrity.identity_digest} does not match the "
            "identity; the execution identity was altered after the engine started")
    ident, device = a.identity, a.device
    if resolved(ident.device) != device:
        err(f"device: {device!r} differs from identity.device {resolved(ident.device)!r}")
    name = resolved(ident.device_name)
    if not isinstance(name, str) or not name:
        err(f"identity.device_name: must be a resolved name, got {name!r}")
    elif is_gpu_name(name) != (device == DEVICE_CUDA):
        err(f"identity.device_name: {name!r} on a {device!r} run; a GPU's name begins with "
            f"one of {', '.join(GPU_NAME_PREFIXES)}, a CPU's with none")
    backend = resolved(ident.attention_backend)
    for other, backends in ATTENTION_BACKENDS_BY_DEVICE.items():
        if other != device and backend in backends:
            err(f"identity.attention_backend: {backend!r} is a {other} backend, on a "
                f"{device!r} run")
    graphs = resolved(ident.cudagraph_mode)
    if device == DEVICE_CPU and graphs is not None and graphs != CUDAGRAPH_NONE:
        err(f"identity.cudagraph_mode: {graphs!r} on a {device!r} run; a CPU engine captures "
            "no CUDA graphs")
    pp = resolved_int(ident.pipeline_parallel_size)
    if pp is None or pp < 1:
        err("identity.pipeline_parallel_size: must be a resolved integer >= 1, got "
            f"{ident.pipeline_parallel_size.value!r}")
    _check_settings(a, err)


# Settings that are limits: a resolved one is a positive integer.
POSITIVE_SETTINGS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size",
                     "kv_cache_memory_bytes")
BOOLEAN_SETTINGS = ("enable_chunked_prefill", "enable_prefix_caching", "enforce_eager")


def _check_settings(a: Artifact, err: Err) -> None:
    """identity.settings against itself, the KV capacity and the device (unresolved settings,
    as in legacy artifacts, are not judged)."""
    settings, where = a.identity.settings, "identity.settings"
    for name in POSITIVE_SETTINGS:
        value = resolved(getattr(settings, name))
        if value is not None and (type(value) is not int or value <= 0):
            err(f"{where}.{name}: must be a positive integer, got {value!r}")
    for name in BOOLEAN_SETTINGS:
        value = resolved(getattr(settings, name))
        if value is not None and type(value) is not bool:
            err(f"{where}.{name}: must be a boolean, got {value!r}")
    block = resolved(settings.block_size)
    if block is not None and block != a.kv_capacity.block_size:
        err(f"{where}.block_size: {block!r} differs from kv_capacity.block_size "
            f"{a.kv_capacity.block_size}")
    share = resolved(settings.gpu_memory_utilization)
    if share is not None and (type(share) not in (int, float) or not 0 < share <= 1):
        err(f"{where}.gpu_memory_utilization: must lie in (0, 1], got {share!r}")
    sizes = resolved(settings.cudagraph_capture_sizes)
    if sizes is not None and (not isinstance(sizes, tuple) or any(s <= 0 for s in sizes)):
        err(f"{where}.cudagraph_capture_sizes: must be a list of positive integers, got "
            f"{sizes!r}")
    elif sizes and a.device == DEVICE_CPU:
        err(f"{where}.cudagraph_capture_sizes: {list(sizes)} on a {a.device!r} run; a CPU "
            "engine captures no CUDA graphs")
    graphs = resolved(a.identity.cudagraph_mode)
    if resolved(settings.enforce_eager) is True and graphs not in (None, CUDAGRAPH_NONE):
        err(f"identity.cudagraph_mode: {graphs!r} under {where}.enforce_eager true; an eager "
            f"engine's mode is {CUDAGRAPH_NONE!r}")


def _check_identity_fields(node, where: str, err: Err) -> None:
    if isinstance(node, IdentityField):
        if node.status == IDENTITY_RESOLVED:
            if node.value is None or not node.source or node.reason is not None:
                err(f"{where}: resolved fields need a value and a source and no reason, got "
                    f"value={node.value!r} source={node.source!r} reason={node.reason!r}")
            elif isinstance(node.value, str) and not node.value.strip():
                err(f"{where}: resolved to a blank string {node.value!r}; a resolved fact "
                    "names what was read (an unknown one is unresolved, with a reason)")
        elif not node.reason or node.value is not None:
            err(f"{where}: unresolved fields need a reason and no value, got "
                f"value={node.value!r} reason={node.reason!r}")
        return
    for name in getattr(node, "__dataclass_fields__", {}):
        _check_identity_fields(getattr(node, name), f"{where}.{name}", err)


# ---- KV capacity -------------------------------------------------------------------------

def check_kv(a: Artifact, err: Err, legacy) -> None:
    kv = a.kv_capacity
    if a.integrity.kv_capacity_digest != digest(kv):
        err(f"integrity.kv_capacity_digest: {a.integrity.kv_capacity_digest} does not match "
            "kv_capacity; the KV capacity was altered")
    for name in ("num_blocks", "block_size", "tokens"):
        if getattr(kv, name) <= 0:
            err(f"kv_capacity.{name}: must be > 0, got {getattr(kv, name)}")
    if not kv.source.strip():
        err(f"kv_capacity.source: must say where the capacity was read, got {kv.source!r}")
    if not kv.groups:
        err("kv_capacity.groups: empty; the engine's cache groups are missing")
    if len(kv.groups) == 1 and kv.tokens != kv.num_blocks * kv.block_size:
        err(f"kv_capacity.tokens: {kv.tokens} != num_blocks*block_size = "
            f"{kv.num_blocks * kv.block_size}")
    draft = set(kv.draft_layer_names)
    for i, group in enumerate(kv.groups):
        where = f"kv_capacity.groups[{i}]"
        if group.block_size != kv.block_size:
            err(f"{where}.block_size: {group.block_size} differs from kv_capacity.block_size "
                f"{kv.block_size}")
        if not group.layer_names:
            err(f"{where}.layer_names: empty; a cache group holds layers")
        if not group.spec_type.strip():
            err(f"{where}.spec_type: must name the group's KV cache spec, got "
                f"{group.spec_type!r}")
        want = [n for n in group.layer_names if n in draft]
        if list(group.draft_layers) != want:
            err(f"{where}.draft_layers: {list(group.draft_layers)} differs from the group's "
                f"layers among kv_capacity.draft_layer_names, {want}")
    grouped = Counter(n for g in kv.groups for n in g.layer_names)
    if sum(grouped.values()) != len(grouped):
        twice = sorted(n for n, count in grouped.items() if count > 1)
        err(f"kv_capacity.groups: layers {twice} are in more than one group")
    if kv.groups and not set(grouped) - draft:
        err(f"kv_capacity.groups: every layer ({len(grouped)}) is a draft layer; the target's "
            "layers are missing")
    if a.speculative.draft_depth > 0 and not kv.draft_layer_names:
        err("kv_capacity.draft_layer_names: empty; the draft's layers must be in the capacity")
    for name in kv.draft_layer_names:
        if name not in grouped:
            err(f"kv_capacity.draft_layer_names: {name!r} is in no cache group")
    if len(draft) != len(kv.draft_layer_names):
        err(f"kv_capacity.draft_layer_names: lists a layer twice ({list(kv.draft_layer_names)})")
    tp = resolved_int(a.identity.tensor_parallel_size)
    if not older_than(legacy, 4) and tp is not None and len(kv.rank_num_blocks) != tp:
        err(f"kv_capacity.rank_num_blocks: {len(kv.rank_num_blocks)} entries for "
            f"identity.tensor_parallel_size {tp}")
    for r, blocks in enumerate(kv.rank_num_blocks):
        if blocks != kv.num_blocks:
            err(f"kv_capacity.rank_num_blocks[{r}]: {blocks} differs from "
                f"kv_capacity.num_blocks {kv.num_blocks}")
    per_token = resolved(kv.bytes_per_token)
    if per_token is not None and (type(per_token) is not int or per_token <= 0):
        err(f"kv_capacity.bytes_per_token: must be a positive integer, got {per_token!r}")


# ---- grid --------------------------------------------------------------------------------

def _kv_need(phase: str, point) -> int:
    """KV tokens the batch of a point holds at once, as the collector requires it to fit:
    prefill B*(cached prefix + new tokens); decode B*(context + the step's 1 + K tokens)."""
    if phase == PHASE_PREFILL:
        return point.batch_size * (point.cached_prefix_tokens + point.new_tokens)
    return point.batch_size * (point.context_tokens + 1 + point.draft_depth)


def check_grid(a: Artifact, err: Err, legacy) -> None:
    grid = a.grid
    if a.integrity.grid_digest != grid_digest(grid):
        err(f"integrity.grid_digest: {a.integrity.grid_digest} does not match the grid "
            f"({grid_digest(grid)}); the grid was altered")
    phases = PHASES_BY_MODE[a.mode]
    for phase in (PHASE_PREFILL, PHASE_DECODE):
        if getattr(grid, phase) and phase not in phases:
            err(f"grid.{phase}: mode {a.mode!r} has no {phase} phase, yet the grid lists "
                f"{len(getattr(grid, phase))} {phase} points")
    ruled = grid
    if legacy == V1:   # autoregressive: K = 0 is the rule there, not a broken point
        ruled = Grid(prefill=grid.prefill, decode=tuple(
            dataclasses.replace(d, draft_depth=1) for d in grid.decode))
    for message in point_errors(ruled):
        err(f"grid.{message}")
    spec = a.speculative
    synthetic = spec.acceptance_control == ACCEPTANCE_SYNTHETIC
    for i, d in enumerate(grid.decode):
        if d.draft_depth != spec.draft_depth:
            err(f"grid.decode[{i}].draft_depth: {d.draft_depth} differs from "
                f"speculative.draft_depth {spec.draft_depth}; the engine verifies one K")
        if synthetic != (d.acceptance_length is not None):
            err(f"grid.decode[{i}].acceptance_length: {d.acceptance_length} under "
                f"{spec.acceptance_control} acceptance (synthetic needs a requested AL, "
                "natural needs null)")
    # The run's decode output is at least decode_max_tokens, which the fit rules assume (a
    # longer one only needs more room).
    limits = engine_limits(a.identity, a.kv_capacity, spec.draft_depth, synthetic)
    if limits is not None:   # the collector's own fit rules, stricter than the KV need below
        for message in fit_errors(grid, limits):
            err(f"grid.{message}")
        return
    capacity = a.kv_capacity.tokens
    for phase in (PHASE_PREFILL, PHASE_DECODE):
        for i, point in enumerate(getattr(grid, phase)):
            need = _kv_need(phase, point)
            if need > capacity:
                formula = ("batch_size*(cached_prefix_tokens+new_tokens)"
                           if phase == PHASE_PREFILL else
                           "batch_size*(context_tokens+1+draft_depth)")
                err(f"grid.{phase}[{i}]: needs {formula} = {need} KV tokens, "
                    f"kv_capacity.tokens is {capacity}")


# ---- environment -------------------------------------------------------------------------

def check_environment(a: Artifact, err: Err, flags: list[str], legacy) -> None:
    env = a.environment
    if env is None:
        if not older_than(legacy, 4):
            err("environment: null; required since schema_version 4 (null only in artifacts "
                "upgraded from schema_version 3 or older)")
        return
    if env.cpu_count < 1:
        err(f"environment.cpu_count: must be >= 1, got {env.cpu_count}")
    if not math.isfinite(env.other_cpu_cores) or env.other_cpu_cores < 0:
        err(f"environment.other_cpu_cores: must be a finite number >= 0, got "
            f"{env.other_cpu_cores}")
    if env.other_sdbench_engines < 0:
        err(f"environment.other_sdbench_engines: must be >= 0, got "
            f"{env.other_sdbench_engines}")
    gpus = env.other_gpu_processes
    if (gpus is None) != (a.device == DEVICE_CPU) or (gpus is not None and gpus < 0):
        err(f"environment.other_gpu_processes: {gpus} on a {a.device!r} run (null on cpu, a "
            "count >= 0 on cuda)")
    cause = (env.other_cpu_cores > CONTENTION_OTHER_CORES or env.other_sdbench_engines > 0
             or (gpus or 0) > 0)
    if cause and not env.contended:
        err(f"environment.contended: false, yet other_cpu_cores {env.other_cpu_cores} "
            f"(threshold {CONTENTION_OTHER_CORES}), other_sdbench_engines "
            f"{env.other_sdbench_engines}, other_gpu_processes {gpus} say contended")
    if env.contended != bool(env.reason and env.reason.strip()):
        err(f"environment.reason: {env.reason!r} with contended {env.contended}; a contended "
            "run says why, an uncontended one gives no reason")
    if env.contended:
        flags.append(f"environment.contended: {env.reason!r}; its times were measured beside "
                     "other work (kept, flagged)")


# ---- observations ------------------------------------------------------------------------

def check_observations(a: Artifact, err: Err, legacy) -> None:
    seen_ids: dict[int, str] = {}
    for phase in (PHASE_PREFILL, PHASE_DECODE):
        observations, points = getattr(a, phase), getattr(a.grid, phase)
        if observations and phase not in PHASES_BY_MODE[a.mode]:
            err(f"{phase}: mode {a.mode!r} measures no {phase} points, yet "
                f"{len(observations)} observations are present")
        by_point: dict[int, list[int]] = {}
        repeats_seen: dict[tuple[int, int], int] = {}
        for i, obs in enumerate(observations):
            where = f"{phase}[{i}]"
            _check_observation(a, phase, obs, where, points, err, legacy)
            key = (obs.point_index, obs.repeat)
            if key in repeats_seen:
                err(f"{where}.repeat: point {obs.point_index} repeat {obs.repeat} duplicates "
                    f"{phase}[{repeats_seen[key]}]")
            repeats_seen.setdefault(key, i)
            members = by_point.setdefault(obs.point_index, [])
            if members:
                _check_same_warmup(observations[members[0]], obs, where,
                                   f"{phase}[{members[0]}]", err)
            members.append(i)
            if obs.native_iteration_id in seen_ids:
                err(f"{where}.native_iteration_id: {obs.native_iteration_id} is also the id of "
                    f"{seen_ids[obs.native_iteration_id]}")
            seen_ids.setdefault(obs.native_iteration_id, where)


def _check_same_warmup(first, obs, where: str, first_where: str, err: Err) -> None:
    """A point is warmed up once, before its repeats: they share the warm-up's outcome."""
    for name in ("warmup_passes", "warmup_settled"):
        if getattr(obs, name) != getattr(first, name):
            err(f"{where}.{name}: {getattr(obs, name)} differs from {getattr(first, name)} in "
                f"{first_where}, a repeat of the same point (a point is warmed up once)")


def _check_observation(a: Artifact, phase, obs, where, points, err: Err, legacy) -> None:
    if not 0 <= obs.point_index < len(points):
        err(f"{where}.point_index: {obs.point_index} is outside grid.{phase} "
            f"(0..{len(points) - 1})")
    elif obs.point != points[obs.point_index]:
        err(f"{where}.point: {obs.point} differs from grid.{phase}[{obs.point_index}] "
            f"{points[obs.point_index]}")
    snap = obs.snapshot
    if obs.native_iteration_id < 1:
        err(f"{where}.native_iteration_id: must be >= 1 (vLLM numbers steps from 1), got "
            f"{obs.native_iteration_id}")
    if snap.native_iteration_id != obs.native_iteration_id:
        err(f"{where}.snapshot.native_iteration_id: {snap.native_iteration_id} differs from the "
            f"observation's {obs.native_iteration_id}")
    if obs.timing.native_iteration_id != snap.native_iteration_id:
        err(f"{where}.timing.native_iteration_id: {obs.timing.native_iteration_id} differs "
            f"from the snapshot's {snap.native_iteration_id}")
    _check_timing(a, obs, where, err)
    _check_provenance(a, obs, where, err)
    _check_snapshot(phase, snap, where, err)
    _check_warmup(a, obs, where, err)
    if phase == PHASE_PREFILL:
        _check_prefill(obs, where, err, legacy)
    else:
        _check_decode(obs, where, err, legacy)


def _check_timing(a: Artifact, obs, where: str, err: Err) -> None:
    timing, device = obs.timing, a.device
    seconds = timing.seconds
    if not math.isfinite(seconds) or seconds <= 0:
        err(f"{where}.timing.seconds: must be finite and > 0, got {seconds}")
    elif not is_real_step(seconds, device):
        err(f"{where}.timing.seconds: {seconds} is outside [{STEP_SECONDS_MIN}, "
            f"{STEP_SECONDS_MAX[device]}] s, the bounds of a real step on {device}")
    else:
        tokens = obs.snapshot.total_scheduled_tokens
        bound = STEP_SECONDS_BASE[device] + STEP_SECONDS_PER_TOKEN_MAX[device] * tokens
        if seconds > bound:
            err(f"{where}.timing.seconds: {seconds} for {tokens} scheduled tokens exceeds "
                f"{STEP_SECONDS_BASE[device]} s + {STEP_SECONDS_PER_TOKEN_MAX[device]} s per "
                f"token on {device} ({bound:g} s)")
    expected_source = SOURCE_FOR_DEVICE[device]
    if timing.source != expected_source:
        err(f"{where}.timing.source: {timing.source!r} cannot come from a {device!r} run "
            f"(expected {expected_source!r}); relabelled timing")
    ranks = timing.rank_seconds
    rule = a.measurement_policy.step_time_rule
    if rule == STEP_TIME_SINGLE_RANK:
        if ranks:
            err(f"{where}.timing.rank_seconds: {list(ranks)} under step_time_rule "
                f"{STEP_TIME_SINGLE_RANK!r}; one rank's step has no per-rank times")
        return
    tp = resolved_int(a.identity.tensor_parallel_size)
    if len(ranks) != tp:
        err(f"{where}.timing.rank_seconds: {len(ranks)} entries for "
            f"identity.tensor_parallel_size {tp}")
    for r, t in enumerate(ranks):
        if not is_real_step(t, device):
            err(f"{where}.timing.rank_seconds[{r}]: {t} is outside [{STEP_SECONDS_MIN}, "
                f"{STEP_SECONDS_MAX[device]}] s, the bounds of a real step on {device}")
    if ranks and seconds != max(ranks):
        err(f"{where}.timing.seconds: {seconds} is not the slowest rank's time "
            f"max(rank_seconds) = {max(ranks)} ({STEP_TIME_SLOWEST_RANK!r})")


def _check_provenance(a: Artifact, obs, where: str, err: Err) -> None:
    prov, device = obs.provenance, a.device
    if prov.device != device:
        err(f"{where}.provenance.device: {prov.device!r} differs from the artifact's device "
            f"{device!r}")
    if prov.device_name != resolved(a.identity.device_name):
        err(f"{where}.provenance.device_name: {prov.device_name!r} differs from "
            f"identity.device_name {resolved(a.identity.device_name)!r}")
    if prov.timer != TIMER_FOR_SOURCE[obs.timing.source]:
        err(f"{where}.provenance.timer: {prov.timer!r} is not the timer of source "
            f"{obs.timing.source!r}")
    if obs.graph_mode not in GRAPH_MODES_BY_DEVICE[device]:
        err(f"{where}.graph_mode: {obs.graph_mode!r} on a {device!r} run; a {device} step runs "
            f"{' or '.join(GRAPH_MODES_BY_DEVICE[device])}")
    elif obs.graph_mode != GRAPH_EAGER and resolved(a.identity.cudagraph_mode) == CUDAGRAPH_NONE:
        err(f"{where}.graph_mode: {obs.graph_mode!r}, yet identity.cudagraph_mode is "
            f"{CUDAGRAPH_NONE!r} (the engine captured no graph)")
    elif obs.graph_mode != GRAPH_EAGER and resolved(a.identity.settings.enforce_eager) is True:
        err(f"{where}.graph_mode: {obs.graph_mode!r}, yet identity.settings.enforce_eager is "
            "true (the engine ran every step eager)")


def _check_snapshot(phase: str, snap: Snapshot, where: str, err: Err) -> None:
    """The step's own counts against each other; a retained step runs its point's batch
    alone (no other request waiting or running, none preempted)."""
    if snap.booking != BOOKING_MEASURED:
        err(f"{where}.snapshot.booking: {snap.booking!r}; only measured steps may be retained "
            "(a warm-up counted as measured?)")
    if snap.phase != phase:
        err(f"{where}.snapshot.phase: {snap.phase!r} in a {phase} observation; a measured "
            "batch never mixes prefill and decode work")
    elif Snapshot.phase_of(snap.requests) != snap.phase:
        err(f"{where}.snapshot.phase: recorded {snap.phase!r}, but its requests make it "
            f"{Snapshot.phase_of(snap.requests)!r}; a measured batch never mixes prefill and "
            "decode work")
    if snap.total_scheduled_tokens != sum(r.new_tokens + r.draft_tokens for r in snap.requests):
        err(f"{where}.snapshot.total_scheduled_tokens: {snap.total_scheduled_tokens} != the "
            f"requests' new + draft tokens "
            f"{sum(r.new_tokens + r.draft_tokens for r in snap.requests)}")
    for j, r in enumerate(snap.requests):
        if not r.request_id:
            err(f"{where}.snapshot.requests[{j}].request_id: empty")
        for name in ("prompt_tokens", "preemptions"):
            if getattr(r, name) < 0:
                err(f"{where}.snapshot.requests[{j}].{name}: must be >= 0, got "
                    f"{getattr(r, name)}")
    for name in ("waiting", "running"):
        if getattr(snap.queue, name) < 0:
            err(f"{where}.snapshot.queue.{name}: must be >= 0, got {getattr(snap.queue, name)}")
    if 0 <= snap.queue.running < len(snap.requests):
        err(f"{where}.snapshot.queue.running: {snap.queue.running}, yet the step schedules "
            f"{len(snap.requests)} requests (every scheduled request is running)")
    elif snap.queue.running > len(snap.requests):
        err(f"{where}.snapshot.queue.running: {snap.queue.running}, more than the step's "
            f"{len(snap.requests)} requests; a measured batch runs alone")
    if snap.queue.waiting > 0:
        err(f"{where}.snapshot.queue.waiting: {snap.queue.waiting}; a measured step admits "
            "its whole batch at once, nothing waits")
    for j, r in enumerate(snap.requests):
        if r.preemptions > 0:
            err(f"{where}.snapshot.requests[{j}].preemptions: {r.preemptions}; a preempted "
                "request's step is not its point's")
    ids = {r.request_id for r in snap.requests}
    for j, c in enumerate(snap.corrections):
        if c.request_id not in ids:
            err(f"{where}.snapshot.corrections[{j}].request_id: {c.request_id!r} is none of the "
                "step's requests")
        if not 1 <= c.from_iteration_id < snap.native_iteration_id or c.rejected_tokens < 0:
            err(f"{where}.snapshot.corrections[{j}]: from_iteration_id {c.from_iteration_id}, "
                f"rejected_tokens {c.rejected_tokens}; a correction comes from an earlier "
                f"iteration (1..{snap.native_iteration_id - 1}) and rejects >= 0 tokens")


def _check_warmup(a: Artifact, obs, where: str, err: Err) -> None:
    warmup = a.measurement_policy.warmup
    if not warmup.min_passes <= obs.warmup_passes <= warmup.max_passes:
        err(f"{where}.warmup_passes: {obs.warmup_passes} is outside the policy's "
            f"[{warmup.min_passes}, {warmup.max_passes}]")
    elif not obs.warmup_settled and obs.warmup_passes != warmup.max_passes:
        err(f"{where}.warmup_settled: false after {obs.warmup_passes} passes; a warm-up that "
            f"does not settle runs all {warmup.max_passes} passes")


def _check_prefill(obs, where: str, err: Err, legacy) -> None:
    mismatch = prefill_mismatch(obs.point, obs.snapshot)
    if mismatch:
        err(f"{where}.snapshot: {mismatch}")
    prefix = obs.point.cached_prefix_tokens
    regime = obs.kv_seed_regime
    allowed = KV_SEED_REGIMES + (("unverified",) if older_than(legacy, 3) else ())
    if regime not in allowed:
        err(f"{where}.kv_seed_regime: expected one of {allowed}, got {regime!r}")
    elif (prefix == 0) != (regime == KV_SEED_NONE):
        err(f"{where}.kv_seed_regime: {regime!r} does not fit cached_prefix_tokens {prefix}")
    if regime == KV_SEED_NONE and not legacy and (
            len(obs.cache_hit_tokens) != obs.point.batch_size or any(obs.cache_hit_tokens)):
        err(f"{where}.cache_hit_tokens: {list(obs.cache_hit_tokens)}; a point without a "
            f"cached prefix is verified as no hit for each of {obs.point.batch_size} requests")
    if regime == KV_SEED_REAL and (len(obs.cache_hit_tokens) != obs.point.batch_size or
                                   any(h != prefix for h in obs.cache_hit_tokens)):
        err(f"{where}.cache_hit_tokens: {list(obs.cache_hit_tokens)}; a real prefix must be "
            f"verified as a hit of {prefix} tokens for each of {obs.point.batch_size} requests")


def _check_decode(obs, where: str, err: Err, legacy) -> None:
    mismatch = decode_mismatch(obs.point, obs.snapshot)
    if mismatch:
        err(f"{where}.snapshot: {mismatch}")
    k = obs.point.draft_depth
    if obs.step_index != STEADY_STEP_INDEX:
        err(f"{where}.step_index: the steady step is step {STEADY_STEP_INDEX}, got "
            f"{obs.step_index}")
    if not 1.0 <= obs.run_acceptance_length <= k + 1:
        err(f"{where}.run_acceptance_length: {obs.run_acceptance_length} is outside "
            f"[1, K+1 = {k + 1}]")
    if obs.run_acceptance_samples < 0 or (not older_than(legacy, 3) and
                                          obs.run_acceptance_samples < len(obs.accepted_tokens)):
        err(f"{where}.run_acceptance_samples: {obs.run_acceptance_samples}, fewer than the "
            f"steady step's own {len(obs.accepted_tokens)} accepted_tokens (the run's samples "
            "include them)")
    accepted = obs.accepted_tokens
    if len(accepted) != obs.point.batch_size:
        err(f"{where}.accepted_tokens: {len(accepted)} entries for batch_size "
            f"{obs.point.batch_size}")
    for j, n in enumerate(accepted):
        if not 0 <= n <= k:
            err(f"{where}.accepted_tokens[{j}]: {n} is outside [0, {k}]")
    if accepted:
        mean = 1.0 + sum(accepted) / len(accepted)
        if not math.isclose(obs.observed_acceptance_length, mean, abs_tol=1e-9):
            err(f"{where}.observed_acceptance_length: {obs.observed_acceptance_length} != "
                f"1 + mean(accepted_tokens) = {mean}")


# ---- summaries, sums, coverage ------------------------------------------------------------

def check_summaries(a: Artifact, err: Err) -> None:
    """One summary per observed point, equal to wire.model.summarize of its samples (in the
    order taken), with the stop its rule gives and the canary spread of its rounds."""
    policy = a.measurement_policy
    samples = {(phase, index): obs for phase in (PHASE_PREFILL, PHASE_DECODE)
               for index, obs in samples_by_point(getattr(a, phase)).items()}
    seen: dict[tuple[str, int], int] = {}
    for k, s in enumerate(a.summaries):
        key = (s.phase, s.point_index)
        if key in seen:
            err(f"summaries[{k}]: a second summary of {s.phase} point {s.point_index} (first: "
                f"summaries[{seen[key]}])")
            continue
        seen[key] = k
        if key not in samples:
            err(f"summaries[{k}]: {s.phase} point {s.point_index} has no observation to "
                "summarise")
            continue
        times = [o.timing.seconds for o in samples[key]]
        if not all(is_real_step(t, a.device) for t in times):
            continue   # the out-of-bounds step is reported; its summary is not recomputed
        want = summarize(s.phase, s.point_index, times,
                         stop_rule(times, policy.repeats, policy.until_pinned),
                         point_canary_spread(a.rounds, [o.round for o in samples[key]]))
        if s.stop != want.stop:
            err(f"summaries[{k}].stop: {s.stop!r}, yet its {len(times)} samples under the "
                f"policy's rule give {want.stop!r}")
        for name in ("samples", "median_seconds", "mean_seconds", "min_seconds",
                     "max_seconds", "cv", "median_half_width", "canary_spread"):
            got, exp = getattr(s, name), getattr(want, name)
            if (got is None) != (exp is None) or (got is not None and not math.isclose(
                    got, exp, rel_tol=MEASURED_SUM_REL_TOL, abs_tol=1e-15)):
                err(f"summaries[{k}].{name}: {got} != {exp}, recomputed from the "
                    f"{len(times)} samples of {s.phase} point {s.point_index}")
    for phase, index in sorted(samples.keys() - seen.keys()):
        err(f"summaries: {phase} point {index} is observed but has no summary")


def check_times(a: Artifact, err: Err, legacy) -> None:
    for name in ("elapsed_seconds", "measured_seconds", "timed_seconds"):
        value = getattr(a, name)
        if value is not None and (not math.isfinite(value) or value < 0):
            err(f"{name}: must be a finite number >= 0, got {value}")
    retained = fsum_or_inf([obs.timing.seconds for _, _, obs in all_observations(a)])
    if not math.isclose(a.measured_seconds, retained, rel_tol=MEASURED_SUM_REL_TOL,
                        abs_tol=1e-12):
        err(f"measured_seconds: {a.measured_seconds} != {retained}, the sum of the retained "
            "step times")
    timed = a.timed_seconds
    if timed is None:
        if not older_than(legacy, 4):
            err("timed_seconds: null; required since schema_version 4 (null only in artifacts "
                "upgraded from schema_version 3 or older)")
        if a.measured_seconds > a.elapsed_seconds:
            err(f"measured_seconds: {a.measured_seconds} exceeds elapsed_seconds "
                f"{a.elapsed_seconds}; steps are timed within the collection")
    else:
        if a.measured_seconds > timed:
            err(f"timed_seconds: {timed} is less than measured_seconds {a.measured_seconds}; "
                "every retained step is a timed step")
        if timed > a.elapsed_seconds:
            err(f"timed_seconds: {timed} exceeds elapsed_seconds {a.elapsed_seconds}; steps "
                "are timed within the collection")
    started, created = parse_utc(a.started_at or ""), parse_utc(a.created_at)
    if started is not None and created is not None:
        span = (created - started) / datetime.timedelta(seconds=1)
        if span < 0:
            err(f"started_at: {a.started_at} is after created_at {a.created_at}")
        elif a.elapsed_seconds > span + CLOCK_SLACK_SECONDS:
            err(f"elapsed_seconds: {a.elapsed_seconds} exceeds created_at - started_at = "
                f"{span} s (+{CLOCK_SLACK_SECONDS} s slack)")


# The observer's host cost a step: microseconds in practice; beyond this it is no such cost.
OBSERVER_COST_BOUND_SECONDS = 1.0


def check_observer_cost(a: Artifact, err: Err, flags: list[str]) -> None:
    cost = a.observer_cost
    if cost is None:
        flags.append("observer_cost: null; how much of a host-bound step is the observer's own "
                     "was not measured for this engine (kept, flagged)")
        return
    if cost.method != OBSERVER_COST_METHOD:
        err(f"observer_cost.method: {cost.method!r}, the contract's probe is "
            f"{OBSERVER_COST_METHOD!r}")
    rounds = cost.round_seconds_per_step
    if not rounds or not all(math.isfinite(r) and abs(r) <= OBSERVER_COST_BOUND_SECONDS
                             for r in rounds):
        err(f"observer_cost.round_seconds_per_step: {list(rounds)}; a probe round's figure is "
            f"a finite number of seconds within +-{OBSERVER_COST_BOUND_SECONDS}")
    elif not math.isclose(cost.host_seconds_per_step, statistics.median(rounds),
                          rel_tol=MEASURED_SUM_REL_TOL, abs_tol=1e-15):
        err(f"observer_cost.host_seconds_per_step: {cost.host_seconds_per_step} is not the "
            f"median of its rounds' figures {list(rounds)}")
    for name in ("steps", "batch_size"):
        if getattr(cost, name) < 1:
            err(f"observer_cost.{name}: must be >= 1, got {getattr(cost, name)}")


def check_coverage(a: Artifact, err: Err) -> None:
    cov = a.coverage
    expected = len(a.grid)
    observed = {phase: {o.point_index for o in getattr(a, phase)}
                for phase in (PHASE_PREFILL, PHASE_DECODE)}
    skipped: dict[tuple[str, int], int] = {}
    for j, s in enumerate(cov.skipped_points):
        where = f"coverage.skipped_points[{j}]"
        if not s.reason.strip():
            err(f"{where}.reason: must say why the point was skipped, got {s.reason!r}")
        if not 0 <= s.point_index < len(getattr(a.grid, s.phase)):
            err(f"{where}.point_index: {s.point_index} is outside grid.{s.phase}")
        if (s.phase, s.point_index) in skipped:
            err(f"{where}: {s.phase} point {s.point_index} is listed twice (first: "
                f"coverage.skipped_points[{skipped[(s.phase, s.point_index)]}])")
        skipped.setdefault((s.phase, s.point_index), j)
    for phase in (PHASE_PREFILL, PHASE_DECODE):
        for index in range(len(getattr(a.grid, phase))):
            if index not in observed[phase] and (phase, index) not in skipped:
                err(f"{phase}: grid.{phase}[{index}] has no observation and is not listed in "
                    "coverage.skipped_points")
            if index in observed[phase] and (phase, index) in skipped:
                err(f"{phase}: grid.{phase}[{index}] is both observed and listed as skipped")
    completed = len(observed[PHASE_PREFILL]) + len(observed[PHASE_DECODE])
    if cov.expected != expected:
        err(f"coverage.expected: {cov.expected}, the grid holds {expected} points")
    if cov.completed != completed:
        err(f"coverage.completed: {cov.completed}, the artifact observes {completed} points")
    if cov.skipped != len(cov.skipped_points):
        err(f"coverage.skipped: {cov.skipped}, coverage.skipped_points lists "
            f"{len(cov.skipped_points)}")
    if cov.completed + cov.skipped != cov.expected:
        err(f"coverage: completed {cov.completed} + skipped {cov.skipped} != expected "
            f"{cov.expected}")
    if a.status == STATUS_COMPLETE and (cov.completed != cov.expected or cov.skipped):
        err(f"status: 'complete' with coverage {cov.completed}/{cov.expected} "
            f"({cov.skipped} skipped)")
    open_points = unfinished(a)
    if a.status == STATUS_COMPLETE and open_points:
        err(f"status: 'complete' while {', '.join(open_points[:3])} "
            f"{'(and more) ' if len(open_points) > 3 else ''}still ask for samples (stop "
            "'not_finished')")
    if a.status != STATUS_COMPLETE and cov.completed == cov.expected and not cov.skipped \
            and not open_points:
        err(f"status: {a.status!r} although every point was measured")


def _flag_k_window(a: Artifact, k_window, report: Report) -> None:
    low, high = k_window
    k = a.speculative.draft_depth
    if a.decode and not low <= k <= high:
        report.flags.append(f"speculative.draft_depth: K={k} lies outside the import window "
                            f"K={low}-{high}; its {len(a.decode)} decode observations are kept, "
                            "flagged, not dropped")
