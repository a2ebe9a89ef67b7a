"""Export an artifact into what AISimulate (aisimulate==0.13.0.dev202610270000000085) reads:
the per-phase native rank envelopes (Dynamo's schema_version 2) with their collector
provenance sidecar, the checkpoint configs, the FpmModelProfile with a speculative
execution profile, and the speculative FPM table (parquet and its commit record) that the
consumer's Rust loader takes at nextn=K. docs/export.md holds the field mapping and every
refusal; a refusal names the field and the value.

This module reads artifacts through pytest_sdbench.artifact and the wire types only: it
imports no vLLM and no AISimulate. The consumer's vocabulary below is written here once and
checked against the consumer's own code by tests/consumer/test_aisimulate_import.py.
Only the parquet writer needs pyarrow (the `export` extra), imported when a table is written.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from .. import __version__
from ..artifact import UnusableArtifact, validate_path
from ..wire import typed
from ..wire.contract import (
    ACCEPTANCE_SYNTHETIC,
    DEVICE_CUDA,
    GRAPH_EAGER,
    GRAPH_FULL,
    GRAPH_MODES,
    GRAPH_PIECEWISE,
    K_WINDOW,
    KV_SEED_NONE,
    KV_SEED_REAL,
    MODE_AGG,
    PACKAGE_NAME,
    PHASE_DECODE,
    PHASE_PREFILL,
    PHASES,
    PHASES_BY_MODE,
    REVISION_PATTERN,
    SOURCE_CUDA_EVENT,
    SOURCE_USER,
    SPEC_METHOD_EAGLE3,
    STATUS_COMPLETE,
    WARMUP_UNTIL_STABLE,
)
from ..wire.identity import IdentityField
from ..wire.model import Artifact, DecodeObservation, Observation, PrefillObservation
from ..wire.points import PrefillPoint
from . import consumer_plan as cplan
from . import repeatability

# --- The consumer's vocabulary (aisimulate 0.13.0.dev202610270000000085) -------------------
CONSUMER = "aisimulate"
CONSUMER_VERSION = "0.13.0.dev202610270000000085"
ENVELOPE_SCHEMA_VERSION = 2                         # aisimulate.fpm_contract
PROVENANCE_SCHEMA = ("aic_fpm_collector_provenance", 1)
PROVENANCE_FILE = "collector-provenance.json"
ENVELOPE_FILE = "benchmark.json"                    # matches FPM_BENCHMARK_RESULT_GLOB
TABLE_SCHEMA = ("aic_fpm_forward_perf", 7)
TABLE_FILE, TABLE_METADATA_FILE = "fpm_forward_perf.parquet", "fpm_forward_perf.metadata.json"
TABLE_COORDINATES = "iteration_totals_balanced_v1"
# The Rust loader binds a speculative-round identity to this policy and scope, and both to
# single-sample rows; the collector's own table (dynamo_native_single_sample_v1) is refused.
TABLE_POLICY = "vllm_native_fpm_model_step_cuda_v1"
TIMING_SCOPE = "model_step_cuda"
REDUCTION = "single_sample"
EXECUTION_COLUMNS = ("model_config_sha256", "execution_profile", "engram_residency",
                     "input_modality")
SELECTOR_PREFIX = "speculative_round_v1:"
# The consumer's autoregressive (legacy) identity: its execution_profile column reads "full".
# Written for a K>0 profile it is imported silently and loads at nextn=0; never written here.
AUTOREGRESSIVE_EXECUTION_PROFILE = "full"
# The backend identity columns: the attention backend the engine resolved (identity
# .attention_backend) where the artifact has it, else the consumer's "auto" (engine decided).
AUTO_BACKEND = "auto"


def backend_columns(attention_backend: str) -> dict[str, object]:
    return {"moe_backend": AUTO_BACKEND, "attention_backend": attention_backend,
            "enable_wideep": False, "enable_eplb": False}
POINT_SOURCE = "dynamo_native_self_benchmark"



def topology(tp: int) -> dict[str, int]:
    """The consumer's topology of a dense engine of tensor-parallel size tp: its plain "tp"
    preset (data, pipeline and context parallel 1, no expert axes)."""
    return {"tp": tp, "pp": 1, "dp": 1, "moe_tp": 1, "moe_ep": 1, "cp": 1}


def parallel_strategy(tp: int) -> str:
    """The consumer's topology_strategy of a dense topology."""
    return "single" if tp == 1 else "tp"
PARTITION_POLICY = "balanced_v1"
# Dynamo's names of CUDA-graph modes and of KV seeding (point-injection stamps).
GRAPH_MODE_NAME = {GRAPH_EAGER: "NONE", GRAPH_PIECEWISE: "PIECEWISE", GRAPH_FULL: "FULL"}
ROW_SEED_REGIME = {KV_SEED_NONE: "not_applicable", KV_SEED_REAL: "real_prefix"}
SEED_STAMP = {KV_SEED_REAL: "prefill_real_seed", PHASE_DECODE: "kvwarm_real_kv"}
DECODE_SEED_REGIME = "real_kv"
TABLE_SEED_REGIME = {True: "real_kv", False: "n/a"}   # by "the row reads cached KV"
# The consumer's precision names for an unquantized bfloat16 checkpoint (its capability
# rules: gemm = moe = fmha = the checkpoint dtype, collectives in half, fmha resolution
# checkpoint_native), and its KV cache dtype for vLLM's cache_dtype values mapped here.
PRECISION_DTYPES = ("bfloat16",)
KV_CACHE_DTYPE = {"auto": None, "bfloat16": "bfloat16"}   # None: the model's dtype (vLLM "auto")
COMM_QUANT_MODE = "half"
FMHA_RESOLUTION = "checkpoint_native"
MOE_CONFIG_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
# vLLM releases the consumer's packaged h200_sxm data does not list (0.26.0 among them)
# load only with this variable set; the manifest names it.
CONSUMER_ENVIRONMENT = {"AIC_ALLOW_UNLISTED_VERSIONS": "1"}

AIC_REVISION = f"{PACKAGE_NAME} {__version__} export"   # the collector source of a plan/table
MANIFEST_KIND = "pytest-sdbench/aisimulate-export"
MANIFEST_VERSION = 1
MANIFEST_FILE, PROFILE_FILE = "import-manifest.json", "fpm_profile.json"
PREDICT_FILE = "predict.json"   # a consumer predict config (JSON is YAML) for the export
REPEATABILITY_FILE = "repeatability.json"
SYSTEM_PATTERN = r"^[a-z0-9][a-z0-9_.-]*$"   # a consumer systems/<name>.yaml, path-safe


class Refused(Exception):
    """The consumer cannot take this artifact truthfully; every reason names a field."""

    def __init__(self, reasons: Sequence[str]):
        self.reasons = list(reasons)
        super().__init__("; ".join(self.reasons))


class UnusableInput(ValueError):
    """The input is no artifact, or an option's value cannot be used."""


# --- Facts: resolved in the artifact, or given by the user (source 'user'), never invented --

@dataclass(frozen=True)
class FactSpec:
    path: str          # where the artifact keeps it
    option: str        # how the user gives it when the artifact leaves it unresolved
    parse: type


FACTS: dict[str, FactSpec] = {
    "target_revision": FactSpec("identity.target.revision", "--target-revision REV", str),
    "draft_revision": FactSpec("identity.draft.revision", "--draft-revision REV", str),
    "max_num_seqs": FactSpec("identity.settings.max_num_seqs", "--fact max_num_seqs=N", int),
    "max_num_batched_tokens": FactSpec("identity.settings.max_num_batched_tokens",
                                       "--fact max_num_batched_tokens=N", int),
    "max_model_len": FactSpec("identity.settings.max_model_len", "--fact max_model_len=N", int),
    "gpu_memory_utilization": FactSpec("identity.settings.gpu_memory_utilization",
                                       "--fact gpu_memory_utilization=F", float),
    "kv_cache_dtype": FactSpec("identity.settings.kv_cache_dtype",
                               "--fact kv_cache_dtype=NAME", str),
    "kv_bytes_per_token": FactSpec("kv_capacity.bytes_per_token",
                                   "--fact kv_bytes_per_token=N", int),
    # only the consumer's collection plan reads it: an export without it has no plan
    "enforce_eager": FactSpec("identity.settings.enforce_eager",
                              "--fact enforce_eager=true|false", bool),
}
OPTIONAL_FACTS = ("enforce_eager",)
REVISION_FACTS = ("target_revision", "draft_revision")
USER_FACT_NAMES = tuple(name for name in FACTS if name not in REVISION_FACTS)


def parse_user_fact(text: str) -> tuple[str, object]:
    """NAME=VALUE of one fact the artifact may leave unresolved; UnusableInput otherwise."""
    name, sep, raw = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or name not in USER_FACT_NAMES:
        raise UnusableInput(f"--fact: expected NAME=VALUE with NAME one of "
                            f"{', '.join(USER_FACT_NAMES)}; got {text!r}")
    return name, check_user_value(name, raw.strip())


def parse_graph_mode(text: str) -> tuple[str, str]:
    """PHASE=MODE of --graph-mode: the one CUDA-graph mode a phase's export keeps."""
    phase, sep, mode = (part.strip() for part in text.partition("="))
    if not sep or phase not in PHASES or mode not in GRAPH_MODES:
        raise UnusableInput(f"--graph-mode: expected PHASE=MODE with PHASE one of "
                            f"{', '.join(PHASES)} and MODE one of {', '.join(GRAPH_MODES)}; "
                            f"got {text!r}")
    return phase, mode


def check_user_value(name: str, raw: str) -> object:
    spec = FACTS[name]
    if spec.parse is bool:
        if raw.lower() not in ("true", "false"):
            raise UnusableInput(f"--fact {name}: expected true or false, got {raw!r}")
        return raw.lower() == "true"
    if spec.parse is str:
        if name in REVISION_FACTS and not re.fullmatch(REVISION_PATTERN, raw):
            raise UnusableInput(f"{spec.option.split()[0]}: a revision is a full 40-hex git "
                                f"commit, got {raw!r}")
        if not raw:
            raise UnusableInput(f"--fact {name}: empty value")
        return raw
    try:
        value = spec.parse(raw)
    except ValueError:
        raise UnusableInput(f"--fact {name}: expected {spec.parse.__name__}, got {raw!r}") from None
    low_ok = value > 0 and math.isfinite(value)
    if not low_ok or (name == "gpu_memory_utilization" and value > 1):
        raise UnusableInput(f"--fact {name}: out of range, got {raw!r}")
    return value


@dataclass(frozen=True)
class Fact:
    value: object
    source: str


def identity_field(artifact: Artifact, path: str) -> IdentityField:
    node: Any = artifact
    for part in path.split("."):
        node = getattr(node, part)
    assert isinstance(node, IdentityField), path
    return node


def resolve_fact(artifact: Artifact, name: str, user: Mapping[str, object],
                 reasons: list[str], required: bool = True) -> Fact | None:
    """The artifact's value (a user value must agree with it) or, where the artifact leaves
    the field unresolved, the user's; else (when required) a reason naming the field and
    the option."""
    spec = FACTS[name]
    found = identity_field(artifact, spec.path)
    if found.resolved:
        if name in user and user[name] != found.value:
            reasons.append(f"{spec.path}: the artifact holds {found.value!r} (source "
                           f"{found.source}); the user's {name}={user[name]!r} contradicts it")
            return None
        return Fact(found.value, f"artifact {spec.path} ({found.source})")
    if name in user:
        return Fact(user[name], SOURCE_USER)
    if not required:
        return None
    reasons.append(f"{spec.path}: unresolved ({found.reason}); the consumer needs it: "
                   f"pass {spec.option}, recorded with source 'user'")
    return None


def resolved_value(artifact: Artifact, path: str, reasons: list[str]) -> object:
    found = identity_field(artifact, path)
    if not found.resolved:
        reasons.append(f"{path}: unresolved ({found.reason}); the consumer needs it")
        return None
    return found.value


# --- Options and results --------------------------------------------------------------------

@dataclass(frozen=True)
class KnownConfig:
    """A config.json text the exporter may ship for a model, found by its sha256."""
    text: str
    source: str


@dataclass(frozen=True)
class ExportOptions:
    system: str | None = None
    user_facts: Mapping[str, object] = field(default_factory=dict)
    target_config: Path | None = None      # a config.json, or a directory holding one
    draft_config: Path | None = None
    envelope_only: bool = False
    acceptance_length: float | None = None  # export only the decode points requested at it
    nextn_accepted: float | None = None     # the user's, checked against the rows' AL
    repeats_from: tuple[Path, ...] = ()     # other engine starts: repeatability samples
    graph_modes: Mapping[str, str] = field(default_factory=dict)   # phase -> the mode it keeps
    known_configs: Mapping[str, KnownConfig] = field(default_factory=dict)   # sha256 -> text


@dataclass(frozen=True)
class Exported:
    root: Path
    manifest: dict


# --- Reading and selecting ------------------------------------------------------------------

def read_artifact(path: Path) -> tuple[Artifact, str | None, bytes]:
    """The validated artifact, its legacy marker and its bytes; Refused if invalid."""
    try:
        report = validate_path(path)
    except UnusableArtifact as exc:
        raise UnusableInput(str(exc)) from None
    if not report.ok or report.artifact is None:
        raise Refused([f"not a valid artifact ({len(report.errors)} violation(s); run "
                       f"`sdbench validate {path}`): " + "; ".join(report.errors[:5])])
    return report.artifact, report.legacy, path.read_bytes()


@dataclass(frozen=True)
class Selected:
    """The one observation a point exports: the lower median of its repeats by time."""
    phase: str
    observation: Observation
    repeats_seconds: tuple[float, ...]   # every repeat's time, by repeat index


def select(artifact: Artifact, phase: str) -> list[Selected]:
    """Per point (grid order) the observation at the lower median of its repeats' times: for
    an odd count the median itself, for an even count the lower of the two middle ones (their
    mean, the summary's median, is no observation). Ties go to the lower repeat index."""
    by_point: dict[int, list[Observation]] = {}
    observations: tuple[Observation, ...] = getattr(artifact, phase)
    for obs in observations:
        by_point.setdefault(obs.point_index, []).append(obs)
    chosen = []
    for index in sorted(by_point):
        repeats = sorted(by_point[index], key=_repeat_of)
        ranked = sorted(repeats, key=_time_then_repeat)
        chosen.append(Selected(phase, ranked[(len(ranked) - 1) // 2],
                               tuple(o.timing.seconds for o in repeats)))
    return chosen


def _repeat_of(obs: Observation) -> int:
    return obs.repeat


def _time_then_repeat(obs: Observation) -> tuple[float, int]:
    return obs.timing.seconds, obs.repeat


def select_acceptance(a: Artifact, selected: dict[str, list[Selected]], al: float | None,
                       reasons: list[str]) -> list[str]:
    """With an acceptance length chosen, only the decode points requested at it: the consumer
    has no acceptance-length axis, so an AL sweep exports one AL at a time. The points left
    out are listed in the manifest."""
    if al is None:
        return []
    requested = sorted({o.point.acceptance_length for o in a.decode}, key=str)
    if a.speculative.acceptance_control != ACCEPTANCE_SYNTHETIC or al not in requested:
        reasons.append(f"--acceptance-length {al:g}: no decode point was requested at it "
                       f"(speculative.acceptance_control {a.speculative.acceptance_control!r}, "
                       f"requested {requested})")
        return []
    kept, left_out = [], []
    for item in selected[PHASE_DECODE]:
        obs = item.observation
        if isinstance(obs, DecodeObservation) and obs.point.acceptance_length == al:
            kept.append(item)
        else:
            left_out.append(f"decode[{obs.point_index}] ({describe(obs)})")
    selected[PHASE_DECODE] = kept
    return left_out


def select_graph_modes(selected: dict[str, list[Selected]], graph_modes: Mapping[str, str],
                        reasons: list[str]) -> list[str]:
    """With a phase's graph mode chosen, only its points that ran in that mode: the consumer
    reads no CUDA-graph label and interpolates one curve per cell (phase), so a phase whose
    steps ran in several modes exports one mode at a time. The points left out are listed
    in the manifest."""
    left_out = []
    for phase, mode in sorted(graph_modes.items(), key=lambda item: PHASES.index(item[0])):
        if phase not in selected:
            reasons.append(f"--graph-mode {phase}={mode}: the artifact has no {phase} phase "
                           f"(phases: {', '.join(selected)})")
            continue
        kept = [item for item in selected[phase] if item.observation.graph_mode == mode]
        if not kept:
            reasons.append(f"--graph-mode {phase}={mode}: no {phase} point ran in it "
                           f"({modes_by_point(selected[phase])})")
            continue
        left_out += [f"{phase}[{item.observation.point_index}] "
                     f"({describe(item.observation)}, graph {item.observation.graph_mode})"
                     for item in selected[phase] if item.observation.graph_mode != mode]
        selected[phase] = kept
    return left_out


def modes_by_point(chosen: list[Selected]) -> str:
    by_mode: dict[str, list[int]] = {}
    for item in chosen:
        by_mode.setdefault(item.observation.graph_mode, []).append(item.observation.point_index)
    return "; ".join(f"{mode} at points {points}" for mode, points in sorted(by_mode.items()))


def export_name(run_id: str, acceptance_length: float | None,
                graph_modes: Mapping[str, str]) -> str:
    """The export's folder under DIR: the run, and the selections that made it."""
    name = run_id
    if acceptance_length is not None:
        name += f"-al{acceptance_length:g}"
    for phase in PHASES:
        if phase in graph_modes:
            name += f"-{phase}-{graph_modes[phase]}"
    return name


def coordinates(phase: str, obs: Observation) -> tuple[int, int, int]:
    """The consumer's coordinate of a step: (batch, new tokens, KV tokens read), summed over
    the requests as the scheduler emitted them. A decode step has no prefill tokens."""
    requests = obs.snapshot.requests
    kv = sum(r.kv_tokens for r in requests)
    new = sum(r.new_tokens for r in requests) if phase == PHASE_PREFILL else 0
    return len(requests), new, kv


def describe(obs: Observation) -> str:
    p = obs.point
    if isinstance(p, PrefillPoint):
        return f"B={p.batch_size} new={p.new_tokens} prefix={p.cached_prefix_tokens}"
    al = "natural" if p.acceptance_length is None else f"{p.acceptance_length:g}"
    return f"B={p.batch_size} ctx={p.context_tokens} K={p.draft_depth} AL={al}"


def seed_regime(obs: Observation) -> str | None:
    """A prefill step's KV seed regime (None for decode)."""
    return obs.kv_seed_regime if isinstance(obs, PrefillObservation) else None


# --- Checks: everything the consumer cannot take truthfully ---------------------------------

def check(artifact: Artifact, selected: Mapping[str, list[Selected]], options: ExportOptions,
          reasons: list[str]) -> None:
    _check_status(artifact, reasons)
    _check_speculative(artifact, reasons)
    if not options.envelope_only:
        _check_timing(artifact, reasons)
        _check_phases(artifact, reasons)
    _check_parallel(artifact, reasons)
    for phase, chosen in selected.items():
        _check_collisions(phase, chosen, reasons)
        _check_graph_modes(phase, chosen, reasons)
    _check_prefixes(selected.get(PHASE_PREFILL, []), reasons)
    _check_summaries(artifact, selected, reasons)


def _check_status(a: Artifact, reasons: list[str]) -> None:
    cov = a.coverage
    if a.status != STATUS_COMPLETE or cov.skipped or cov.completed != cov.expected:
        skipped = "; ".join(f"{s.phase}[{s.point_index}]: {s.reason}" for s in cov.skipped_points)
        reasons.append(f"status: {a.status!r} (coverage {cov.completed}/{cov.expected}"
                       f"{', skipped ' + skipped if skipped else ''}); the consumer takes "
                       "complete envelopes only")


def _check_phases(a: Artifact, reasons: list[str]) -> None:
    if a.mode != MODE_AGG:
        reasons.append(f"mode: {a.mode!r}; the consumer's loader needs prefill and decode rows "
                       "of one engine (it refuses a table without either): export an agg "
                       "artifact, or --envelope-only")


def _check_speculative(a: Artifact, reasons: list[str]) -> None:
    spec, k = a.speculative, a.speculative.draft_depth
    low, high = K_WINDOW
    if spec.method != SPEC_METHOD_EAGLE3:
        reasons.append(f"speculative.method: {spec.method!r}; the consumer's speculative "
                       "identity is eagle3, and this exporter never writes an autoregressive "
                       "identity")
    elif not low <= k <= high:
        reasons.append(f"speculative.draft_depth: K={k} lies outside the consumer's window "
                       f"{low}-{high} (the artifact keeps it; no consumer identity carries it, "
                       "and K=0 would be imported as autoregressive)")


def _check_timing(a: Artifact, reasons: list[str]) -> None:
    timings = [o.timing for o in a.prefill] + [o.timing for o in a.decode]
    sources = sorted({t.source for t in timings})
    if a.device != DEVICE_CUDA or sources != [SOURCE_CUDA_EVENT]:
        scopes = sorted({t.scope for t in timings})
        reasons.append(f"device: {a.device!r} (timing source {', '.join(sources)}, scope "
                       f"{', '.join(scopes)}); the consumer's speculative table admits timing "
                       f"scope {TIMING_SCOPE!r} only, which a host timer is not; "
                       "--envelope-only writes the envelopes without a table")


def _check_parallel(a: Artifact, reasons: list[str]) -> None:
    """Tensor parallel maps to the consumer's pure-TP speculative identity (one step time:
    the slowest rank's, as the artifact's step_time_rule has it); pipeline parallel does
    not (the consumer's speculative identity requires PP1)."""
    tp, pp = a.identity.tensor_parallel_size, a.identity.pipeline_parallel_size
    if not tp.resolved or not isinstance(tp.value, int) or tp.value < 1:
        reasons.append(f"identity.tensor_parallel_size: unresolved ({tp.reason}); the "
                       "consumer's topology needs it")
    if not pp.resolved or pp.value != 1:
        shown = pp.value if pp.resolved else f"unresolved ({pp.reason})"
        reasons.append(f"identity.pipeline_parallel_size: {shown}; the consumer's speculative "
                       "identity requires pipeline parallel 1")


def tp_of(a: Artifact) -> int:
    value = a.identity.tensor_parallel_size.value
    assert isinstance(value, int), value
    return value


def _check_collisions(phase: str, chosen: list[Selected], reasons: list[str]) -> None:
    seen: dict[tuple[int, int, int], Selected] = {}
    for item in chosen:
        key = coordinates(phase, item.observation)
        if key in seen:
            first = seen[key]
            reasons.append(
                f"{phase}[{first.observation.point_index}] "
                f"({describe(first.observation)}) and "
                f"{phase}[{item.observation.point_index}] "
                f"({describe(item.observation)}) land on one consumer coordinate "
                f"(batch {key[0]}, new {key[1]}, KV {key[2]}); the consumer keys a row by "
                "those alone (no K or acceptance-length axis): export one acceptance length "
                "at a time (--acceptance-length AL), or from separate artifacts")
        seen.setdefault(key, item)


def _check_graph_modes(phase: str, chosen: list[Selected], reasons: list[str]) -> None:
    """The consumer reads no CUDA-graph label and interpolates along curves of one batch (a
    prefill token curve at one KV total, a KV curve at one token total, a decode KV curve)
    and, for decode, between batches. A phase may mix modes only where no query can fall
    between two points of different modes: a token curve may change mode between
    per-request token counts s and s+1 (batch B: totals B*s and B*(s+1)), decode between
    batches B and B+1; never along a KV curve."""
    modes = {item.observation.graph_mode for item in chosen}
    if len(modes) < 2:
        return
    crossings = _mode_crossings(phase, chosen)
    if crossings:
        shown = "; ".join(crossings[:3]) + ("; ..." if len(crossings) > 3 else "")
        reasons.append(f"{phase}.graph_mode: steps ran in {len(modes)} modes "
                       f"({modes_by_point(chosen)}); the consumer reads no CUDA-graph label "
                       f"and would interpolate across modes ({shown}): export one mode at a "
                       f"time (--graph-mode {phase}=MODE; the points left out are listed in "
                       "the manifest), or collect both sides of each mode change "
                       "(--grid aisimulate does)")


def _mode_crossings(phase: str, chosen: list[Selected]) -> list[str]:
    """Each pair of neighbouring points of one consumer curve that ran in different modes
    with room for a query between them."""
    points = [(coordinates(phase, item.observation), item.observation) for item in chosen]
    curves: dict[tuple, list[tuple[int, Observation]]] = {}
    for (batch, new, kv), obs in points:
        if phase == PHASE_PREFILL:
            curves.setdefault(("tokens", batch, kv), []).append((new, obs))
            curves.setdefault(("KV", batch, new), []).append((kv, obs))
        else:
            curves.setdefault(("KV", batch, 0), []).append((kv, obs))
    crossings = []
    for (axis, batch, _), curve in sorted(curves.items(), key=lambda c: c[0]):
        curve.sort(key=lambda item: item[0])
        for (a, first), (b, second) in pairwise(curve):
            adjacent = axis == "tokens" and b - a == batch
            if first.graph_mode != second.graph_mode and not adjacent:
                crossings.append(f"batch {batch}: {axis} {a} ({first.graph_mode}) to {b} "
                                 f"({second.graph_mode})")
    if phase == PHASE_DECODE:
        by_batch: dict[int, set[str]] = {}
        for (batch, _, _), obs in points:
            by_batch.setdefault(batch, set()).add(obs.graph_mode)
        ordered = sorted(by_batch.items())
        for (a, low), (b, high) in pairwise(ordered):
            if low != high and b != a + 1:
                crossings.append(f"batches {a} ({'/'.join(sorted(low))}) and {b} "
                                 f"({'/'.join(sorted(high))}) are not adjacent")
    return crossings


def _check_prefixes(chosen: list[Selected], reasons: list[str]) -> None:
    for item in chosen:
        obs, regime = item.observation, seed_regime(item.observation)
        if regime not in ROW_SEED_REGIME:
            reasons.append(f"prefill[{obs.point_index}].kv_seed_regime: {regime!r} "
                           f"({describe(obs)}); only a prefix the engine "
                           "computed and verified as a hit is real KV (the consumer's table "
                           "needs real_kv for cached prefill)")


def _check_summaries(a: Artifact, selected: Mapping[str, list[Selected]],
                     reasons: list[str]) -> None:
    """An odd count's selected time is the point's median: the summary must say so."""
    medians: dict[tuple[str, int], float] = {(s.phase, s.point_index): s.median_seconds
                                             for s in a.summaries}
    for phase, chosen in selected.items():
        for item in chosen:
            obs = item.observation
            median = medians.get((phase, obs.point_index))
            if len(item.repeats_seconds) % 2 and median != obs.timing.seconds:
                reasons.append(f"summaries[{phase} {obs.point_index}].median_seconds: {median!r}"
                               f" is not the median of its repeats {list(item.repeats_seconds)}")


# --- Consumer facts derived from the artifact ------------------------------------------------

@dataclass(frozen=True)
class Deployment:
    """Everything the profile and the table need, each with its source."""
    facts: dict[str, Fact]
    precision: dict[str, str]
    configs: dict[str, tuple[bytes, str]]        # role -> (config.json bytes, source)


def resolve_facts(a: Artifact, options: ExportOptions, reasons: list[str]) -> dict[str, Fact]:
    """The facts an export records. Both revisions are required in every mode, envelopes
    included: an export names the checkpoints it measured by commit, or is refused. The
    engine facts are required by the table only (envelopes record those at hand)."""
    facts: dict[str, Fact] = {}
    for name in FACTS:
        required = name in REVISION_FACTS or not (options.envelope_only
                                                  or name in OPTIONAL_FACTS)
        fact = resolve_fact(a, name, options.user_facts, reasons, required=required)
        if fact is not None:
            facts[name] = fact
    for name in REVISION_FACTS:
        revision = facts.get(name)
        if revision is not None and not re.fullmatch(REVISION_PATTERN, str(revision.value)):
            reasons.append(f"{FACTS[name].path}: {revision.value!r} ({revision.source}) is "
                           "not a pinned 40-hex commit; the consumer pins checkpoints by commit")
    return facts


def resolve_deployment(a: Artifact, options: ExportOptions, reasons: list[str]) -> Deployment:
    facts = resolve_facts(a, options, reasons)
    _system_fact(a, options, facts, reasons)
    for name, path in (("engine_version", "identity.engine_version"),
                       ("architecture", "identity.target.architecture")):
        value = resolved_value(a, path, reasons)
        if value is not None:
            facts[name] = Fact(value, f"artifact {path} ({identity_field(a, path).source})")
    found = a.identity.attention_backend
    facts["attention_backend"] = (
        Fact(found.value, f"artifact identity.attention_backend ({found.source})")
        if found.resolved and isinstance(found.value, str) and found.value else
        Fact(AUTO_BACKEND, f"the consumer's 'auto' (engine decided): "
                           f"identity.attention_backend unresolved ({found.reason})"))
    precision = _precision(a, facts, reasons)
    configs = {role: _config(a, role, options, reasons) for role in ("target", "draft")}
    _check_dense(configs.get("target"), reasons)
    return Deployment(facts, precision, {r: c for r, c in configs.items() if c})


def _system_fact(a: Artifact, options: ExportOptions, facts: dict[str, Fact],
                 reasons: list[str]) -> None:
    if options.system is None:
        name = a.identity.device_name.value if a.identity.device_name.resolved else None
        reasons.append(f"system: the artifact's device {name!r} names no consumer system "
                       "(its systems/<name>.yaml); pass --system NAME, e.g. h200_sxm, "
                       "recorded with source 'user'")
    else:
        facts["system"] = Fact(options.system, SOURCE_USER)


def _precision(a: Artifact, facts: Mapping[str, Fact], reasons: list[str]) -> dict[str, str]:
    dtype = resolved_value(a, "identity.target.dtype", reasons)
    quant = resolved_value(a, "identity.target.quantization", reasons)
    if dtype not in PRECISION_DTYPES or quant != "none":
        if dtype is not None:
            reasons.append(f"identity.target.dtype: {dtype!r} with quantization {quant!r}; "
                           f"this exporter maps unquantized {', '.join(PRECISION_DTYPES)} "
                           "checkpoints only")
        return {}
    kv = facts.get("kv_cache_dtype")
    if kv is None:
        return {}
    if kv.value not in KV_CACHE_DTYPE:
        reasons.append(f"identity.settings.kv_cache_dtype: {kv.value!r} ({kv.source}); this "
                       f"exporter maps {', '.join(sorted(KV_CACHE_DTYPE))} only")
        return {}
    kv_dtype = KV_CACHE_DTYPE[kv.value] or dtype
    return {"gemm_quant_mode": dtype, "moe_quant_mode": dtype, "fmha_quant_mode": dtype,
            "comm_quant_mode": COMM_QUANT_MODE, "kv_cache_dtype": kv_dtype}


def _config(a: Artifact, role: str, options: ExportOptions,
            reasons: list[str]) -> tuple[bytes, str] | None:
    """config.json bytes whose sha256 is the artifact's config digest: the user's file, else
    the checkpoint at the artifact's model path, else a known config (a preset) by digest."""
    path = f"identity.{role}.config_digest"
    digest = resolved_value(a, path, reasons)
    if digest is None:
        return None
    want = str(digest).removeprefix("sha256:")
    given = options.target_config if role == "target" else options.draft_config
    if given is not None:
        file = given / "config.json" if given.is_dir() else given
        try:
            data = file.read_bytes()
        except OSError:
            raise UnusableInput(f"--{role}-config: {file} cannot be read") from None
        got = hashlib.sha256(data).hexdigest()
        if got != want:
            reasons.append(f"{path}: {digest}, but --{role}-config {file} has sha256:{got}; "
                           "that is not the checkpoint the engine ran")
            return None
        return data, f"{SOURCE_USER} (--{role}-config {file})"
    model = getattr(a.identity, role).model
    if model.resolved:
        file = Path(str(model.value)) / "config.json"
        data = file.read_bytes() if file.is_file() else b""
        if hashlib.sha256(data).hexdigest() == want:
            return data, f"the artifact's identity.{role}.model ({file})"
    known = options.known_configs.get(want)
    if known is not None and hashlib.sha256(known.text.encode()).hexdigest() == want:
        return known.text.encode(), known.source
    reasons.append(f"{path}: {digest}; no config.json with that digest is at hand (not at the "
                   f"artifact's identity.{role}.model, no preset matches); the consumer reads "
                   f"the checkpoint's config.json: pass --{role}-config PATH")
    return None


def _check_dense(config: tuple[bytes, str] | None, reasons: list[str]) -> None:
    if config is None:
        return
    data = json.loads(config[0])
    experts = [data[key] for key in MOE_CONFIG_KEYS if isinstance(data, dict) and data.get(key)]
    if experts:
        reasons.append(f"target config.json: a mixture-of-experts model ({experts[0]} experts); "
                       "this exporter maps dense models only")


# --- The consumer's identity ----------------------------------------------------------------

def canonical_hash(payload: object) -> str:
    """The consumer's canonical hash (sorted keys, compact separators)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def execution_profile(k: int, draft_path: str, draft_revision: str) -> dict:
    if not 1 <= k <= K_WINDOW[1]:
        raise AssertionError(f"a speculative execution profile needs K in 1-{K_WINDOW[1]}, "
                             f"got {k}")
    return {"kind": "speculative_round", "method": SPEC_METHOD_EAGLE3, "num_draft_tokens": k,
            "draft_model": draft_path, "draft_revision": draft_revision,
            "timing_scope": TIMING_SCOPE}


def speculative_identity(model_revision: str, profile: dict) -> tuple[str, str, str, str]:
    """The four execution columns of a speculative round, as the consumer's Rust
    _normalize_fpm_execution_profile writes the selector (key order fixed, compact)."""
    ordered = {key: profile[key] for key in ("kind", "method", "num_draft_tokens",
                                             "draft_model", "draft_revision", "timing_scope")}
    selector = SELECTOR_PREFIX + json.dumps(
        {"model_revision": model_revision, "execution_profile": ordered},
        separators=(",", ":"), ensure_ascii=False)
    return ("", selector, "none", "text")


def assert_speculative(execution: Sequence[str], k: int) -> None:
    """Never an autoregressive identity for K > 0: the consumer would import it silently and
    load it at nextn=0, pricing EAGLE3 rounds as plain steps."""
    profile = execution[1] if len(execution) == len(EXECUTION_COLUMNS) else None
    ok = (k >= 1 and isinstance(profile, str) and profile.startswith(SELECTOR_PREFIX)
          and json.loads(profile[len(SELECTOR_PREFIX):])["execution_profile"]
          ["num_draft_tokens"] == k)
    if not ok or profile == AUTOREGRESSIVE_EXECUTION_PROFILE:
        raise AssertionError(f"refusing to write execution identity {tuple(execution)!r} for "
                             f"K={k}: a K>0 profile must carry its speculative round")


def cell_id(*, model_path: str, system: str, phase: str, tp: int,
            precision: Mapping[str, str], execution: Sequence[str],
            attention_backend: str = AUTO_BACKEND) -> str:
    """The consumer planner's _cell_id for this cell."""
    payload = {
        "backend": "vllm", "model_path": model_path, "system": system, "phase": phase,
        "topology": topology(tp), "weight_quantization": precision["gemm_quant_mode"],
        "kv_cache_dtype": precision["kv_cache_dtype"], **backend_columns(attention_backend),
        **dict(zip(EXECUTION_COLUMNS, execution, strict=True)),
        "input_text_sha256": "", "point_source": POINT_SOURCE,
    }
    return "fpm-" + canonical_hash(payload)[:16]


# --- Envelopes --------------------------------------------------------------------------------

def _point(phase: str, item: Selected, benchmark_id: int, k: int) -> dict:
    obs = item.observation
    batch, new, kv = coordinates(phase, obs)
    rows: list[list[int]] | None = None
    if phase == PHASE_PREFILL:
        stamp = SEED_STAMP.get(seed_regime(obs) or "")
        reasons = ["explicit", stamp] if stamp else ["explicit"]
        rows = [[r.new_tokens, r.kv_tokens] for r in obs.snapshot.requests]
    else:
        reasons = ["explicit", SEED_STAMP[PHASE_DECODE]]
    return {
        "point_type": phase, "benchmark_id": benchmark_id, "batch_size": batch,
        "total_prefill_tokens": new, "total_kv_read_tokens": kv, "rows": rows,
        "sample_reasons": reasons,
        # Dynamo's graph labels, here the mode the engine reported for this very step;
        # capture size and padding are not recorded.
        "expected_cudagraph_mode": GRAPH_MODE_NAME[obs.graph_mode],
        "expected_capture_size": None, "padding_tokens": None,
        **row_labels(phase, item, k),
    }


def row_labels(phase: str, item: Selected, k: int) -> dict:
    """sdbench's own labels of a row (the consumer ignores them; they keep the audit trail).
    Every row carries every label (None where a phase has none): one parquet schema."""
    obs = item.observation
    decode = obs if isinstance(obs, DecodeObservation) else None
    return {
        "sdbench_point_index": obs.point_index, "sdbench_repeat": obs.repeat,
        "sdbench_repeats": len(item.repeats_seconds),
        "sdbench_selection": "median" if len(item.repeats_seconds) % 2 else "median_low",
        "sdbench_native_iteration_id": obs.native_iteration_id,
        "sdbench_graph_mode": obs.graph_mode, "sdbench_timing_source": obs.timing.source,
        "sdbench_warmup_passes": obs.warmup_passes,
        "sdbench_warmup_settled": obs.warmup_settled,
        "sdbench_draft_depth": k,
        "sdbench_kv_seed_regime": seed_regime(obs),
        "sdbench_requested_acceptance_length": (decode.point.acceptance_length if decode
                                                else None),
        "sdbench_observed_acceptance_length": (decode.observed_acceptance_length if decode
                                               else None),
        "sdbench_run_acceptance_length": decode.run_acceptance_length if decode else None,
    }


def _fpm(phase: str, obs: Observation, benchmark_id: int, worker_id: str) -> dict:
    batch, new, kv = coordinates(phase, obs)
    prefill = phase == PHASE_PREFILL
    return {
        "version": 1, "worker_id": worker_id, "dp_rank": 0, "counter_id": benchmark_id,
        "wall_time": obs.timing.seconds,
        "timing_scope": (TIMING_SCOPE if obs.timing.source == SOURCE_CUDA_EVENT
                         else obs.timing.scope),
        "scheduled_requests": {
            "num_prefill_requests": batch if prefill else 0,
            "sum_prefill_tokens": new,
            "sum_prefill_kv_tokens": kv if prefill else 0,
            "num_decode_requests": 0 if prefill else batch,
            "sum_decode_kv_tokens": 0 if prefill else kv,
        },
        "queued_requests": {"num_waiting": obs.snapshot.queue.waiting},
        "sdbench_timing": {"seconds": obs.timing.seconds, "scope": obs.timing.scope,
                           "source": obs.timing.source,
                           "rank_seconds": list(obs.timing.rank_seconds)},
        "sdbench_provenance": {"device": obs.provenance.device,
                               "device_name": obs.provenance.device_name,
                               "timer": obs.provenance.timer},
    }


def build_envelope(a: Artifact, legacy: str | None, phase: str, chosen: list[Selected],
                   worker_id: str) -> dict:
    """Dynamo's native rank envelope of one phase: benchmark IDs 1..N in grid order, one
    local FPM per point, iteration groups equal to the results, measured totals."""
    k = a.speculative.draft_depth
    results, groups = [], []
    for benchmark_id, item in enumerate(chosen, start=1):
        point = _point(phase, item, benchmark_id, k)
        fpm = _fpm(phase, item.observation, benchmark_id, worker_id)
        regime = ROW_SEED_REGIME.get(seed_regime(item.observation) or "", DECODE_SEED_REGIME)
        results.append({"point": point, "fpms": [fpm], "kv_seed_regime": regime})
        groups.append({"benchmark_id": benchmark_id, "point": point, "expected_dp_ranks": [0],
                       "complete": True, "wall_time": fpm["wall_time"],
                       "rank_results": [{"dp_rank": 0, "fpms": [fpm]}]})
    mode = one_graph_mode(chosen)
    envelope = {
        "schema_version": ENVELOPE_SCHEMA_VERSION, "artifact_type": "rank",
        "status": "complete", "valid": True, "usable": True, "timing_valid": True,
        "stop_reason": None, "error": None, "skipped_points": [], "missing_phases": [],
        "run_id": a.run_id, "grid_digest": a.integrity.grid_digest,
        "config": {"mode": phase},
        "coverage": {"expected_points": len(results), "completed_points": len(results),
                     "skipped_points": 0},
        "dp": {"rank": 0, "size": 1},
        "timing": {
            "started_at": a.started_at or a.created_at,
            # The artifact times the whole collection, not each phase: an upper bound.
            "benchmark_elapsed_seconds": a.elapsed_seconds,
            "benchmark_elapsed_scope": "sdbench_collection_all_phases",
            "measured_iteration_seconds": math.fsum(g["wall_time"] for g in groups),
        },
        "timing_boundary": "sdbench_worker_model_step",
        "execution_mode": mode,
        "results": results, "iteration_groups": groups,
        "sdbench": {"package": PACKAGE_NAME, "version": __version__, "run_id": a.run_id,
                    "schema_version": a.schema_version, "legacy": legacy,
                    "measurement_policy": getattr(a.measurement_policy, phase),
                    "repeats": a.measurement_policy.repeats,
                    "speculative": {"method": a.speculative.method, "draft_depth": k,
                                    "acceptance_control": a.speculative.acceptance_control,
                                    "synthetic_acceptance_length":
                                        a.speculative.synthetic_acceptance_length}},
    }
    if phase == PHASE_DECODE:
        # Every decode request reads KV the engine computed from its own prompt tokens.
        method = ("sdbench_same_request_prefill_then_steady_step" if legacy else
                  "sdbench_seeded_prompt_readmitted_from_prefix_cache_then_steady_step")
        envelope["kvwarm"] = {"enabled": True, "warm_eligible": True, "skip_reason": None,
                              "method": method}
    return envelope


def one_graph_mode(chosen: list[Selected]) -> str:
    """The CUDA-graph mode of a phase's exported steps, or 'mixed:A,B' for a phase whose
    modes change only where no query falls between (check refuses any other mix)."""
    modes = sorted({item.observation.graph_mode for item in chosen})
    return modes[0] if len(modes) == 1 else "mixed:" + ",".join(modes)


@dataclass(frozen=True)
class RowIdentity:
    """What every row of the table and the cell ids carry."""
    model_path: str
    draft_path: str
    system: str
    version: str
    precision: dict[str, str]
    execution: tuple[str, str, str, str]
    tp: int
    attention_backend: str = AUTO_BACKEND


# --- The speculative FPM table --------------------------------------------------------------

def table_rows(a: Artifact, selected: Mapping[str, list[Selected]], *, identity: RowIdentity,
               cells: Mapping[str, str], run: Mapping[str, str]) -> list[dict]:
    """One row per point: the selected observation's time in ms at its coordinate, under the
    speculative identity, labelled single_sample / model_step_cuda."""
    k = a.speculative.draft_depth
    assert_speculative(identity.execution, k)
    rows = []
    for phase, chosen in selected.items():
        for item in chosen:
            obs = item.observation
            batch, new, kv = coordinates(phase, obs)
            rows.append({
                "cell_id": cells[phase], "model_path": identity.model_path,
                "system": identity.system, "backend": "vllm",
                "backend_version": identity.version,
                "runtime_backend_version": identity.version,
                "weight_quantization": identity.precision["gemm_quant_mode"],
                **identity.precision, "fmha_resolution": FMHA_RESOLUTION,
                "parallel_strategy": parallel_strategy(identity.tp),
                **topology(identity.tp), **backend_columns(identity.attention_backend),
                **dict(zip(EXECUTION_COLUMNS, identity.execution, strict=True)),
                "workload_kind": phase, "batch_size": batch, "total_prefill_tokens": new,
                "total_kv_read_tokens": kv, "partition_policy": PARTITION_POLICY,
                "kv_seed_regime": TABLE_SEED_REGIME[phase == PHASE_DECODE or kv > 0],
                "latency_ms": obs.timing.seconds * 1000.0,
                # the unbooked passes before this step; the row is one observation (the
                # median of the point's repeats: sdbench_repeats, sdbench_selection), so
                # the consumer's repeats and sample count of this row are 1
                "warmup_repeats": obs.warmup_passes,
                "measurement_repeats": 1,
                "measurement_policy": TABLE_POLICY, "timing_scope": TIMING_SCOPE,
                "measurement_reduction": REDUCTION, "source_sample_count": 1,
                **run, **row_labels(phase, item, k),
            })
    key = ("cell_id", "batch_size", "total_prefill_tokens", "total_kv_read_tokens")
    return sorted(rows, key=lambda r: tuple(r[name] for name in key))


def write_table(rows: list[dict], dest: Path, metadata: dict) -> dict:
    import importlib
    pa = importlib.import_module("pyarrow")       # the `export` extra, optional
    pq = importlib.import_module("pyarrow.parquet")
    dest.mkdir(parents=True, exist_ok=True)
    parquet = dest / TABLE_FILE
    pq.write_table(pa.Table.from_pylist(rows), parquet, compression="zstd")
    metadata = {**metadata, "row_count": len(rows),
                "parquet_sha256": hashlib.sha256(parquet.read_bytes()).hexdigest()}
    write_json(dest / TABLE_METADATA_FILE, metadata, sort_keys=True)
    return metadata


def pyarrow_missing() -> bool:
    import importlib.util
    return importlib.util.find_spec("pyarrow") is None


# --- Export -----------------------------------------------------------------------------------

def write_json(path: Path, data: object, sort_keys: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=sort_keys) + "\n")


def export_artifact(path: Path, out: Path, options: ExportOptions) -> Exported:
    """Export one artifact to out/<run_id>/, atomically (a temporary folder renamed into
    place). Refused (nothing written) when the consumer cannot take it truthfully."""
    artifact, legacy, raw = read_artifact(path)
    selected = {phase: select(artifact, phase) for phase in PHASES_BY_MODE[artifact.mode]}
    reasons: list[str] = []
    left_out = select_acceptance(artifact, selected, options.acceptance_length, reasons)
    left_out += select_graph_modes(selected, options.graph_modes, reasons)
    check(artifact, selected, options, reasons)
    acceptance = measured_acceptance(artifact, selected, options.nextn_accepted, reasons)
    others = []
    for other_path in options.repeats_from:
        other, _, _ = read_artifact(other_path)
        reasons += repeatability.same_collection_errors(artifact, other, str(other_path))
        others.append(other)
    repeats = repeatability.assess(artifact, others, {
        phase: [(item.observation.point_index, item.observation.timing.seconds)
                for item in chosen] for phase, chosen in selected.items()})
    deployment = None
    if options.envelope_only:
        facts = resolve_facts(artifact, options, reasons)
        if options.system is not None:
            facts["system"] = Fact(options.system, SOURCE_USER)
    else:
        deployment = resolve_deployment(artifact, options, reasons)
        facts = deployment.facts
    if reasons:
        raise Refused(reasons)
    if deployment is not None and pyarrow_missing():
        raise UnusableInput("writing the consumer's parquet table needs pyarrow: pip install "
                            "'pytest-sdbench[export]' (or pass --envelope-only)")
    out.mkdir(parents=True, exist_ok=True)
    name = export_name(artifact.run_id, options.acceptance_length, options.graph_modes)
    # The folder resolved, not the export's own name: a link planted there (in a folder
    # others can write) is replaced, never followed to the folder it names.
    final = out.resolve() / name
    staging = Path(tempfile.mkdtemp(prefix=f".{artifact.run_id}.", suffix=".tmp", dir=out))
    try:
        write_json(staging / REPEATABILITY_FILE, repeats)
        manifest = _build(artifact, legacy, raw, path, selected, deployment, facts, options,
                          staging, final, left_out, acceptance)
        manifest["repeatability"] = {
            "file": REPEATABILITY_FILE,
            **{key: repeats[key] for key in ("status", "point_counts", "source_agreement_failed",
                                             "cv", "source_relative_difference",
                                             "engine_starts", "sample_rule", "policy")}}
        write_json(staging / MANIFEST_FILE, manifest)
        umask = os.umask(0)
        os.umask(umask)
        # mkdtemp makes 0700; an export is for sharing, once built (while it is built,
        # nobody else can plant a link where one of its files is written).
        os.chmod(staging, 0o777 & ~umask)
        _swap_into_place(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Exported(final, manifest)


def _swap_into_place(staging: Path, final: Path) -> None:
    """Rename the finished export into place; an earlier export of the same run is moved
    aside first and removed after, so a reader sees the old tree or the new, never half."""
    if final.exists():
        aside = Path(tempfile.mkdtemp(prefix=f".{final.name}.old.", dir=final.parent))
        os.replace(final, aside / final.name)
        os.replace(staging, final)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(staging, final)


def _build(a: Artifact, legacy: str | None, raw: bytes, path: Path,
           selected: Mapping[str, list[Selected]], deployment: Deployment | None,
           facts: Mapping[str, Fact], options: ExportOptions, staging: Path,
           final: Path, left_out: list[str], acceptance: dict | None) -> dict:
    k = a.speculative.draft_depth
    run12 = a.run_id[:12]
    pod, attempt = f"sdbench-{run12}", f"sdbench-{a.run_id}"
    cells = {phase: f"sdbench-envelope-{phase}-{run12}" for phase in selected}
    built = build_profile(a, deployment, final) if deployment is not None else None
    profile, identity = built if built is not None else (None, None)
    artifact_sha = hashlib.sha256(raw).hexdigest()
    plan: dict | None = None
    notes: list[str] = []
    if deployment is not None and identity is not None and profile is not None:
        cells = {phase: cell_id(model_path=identity.model_path, system=identity.system,
                                phase=phase, tp=identity.tp, precision=identity.precision,
                                execution=identity.execution,
                                attention_backend=identity.attention_backend)
                 for phase in selected}
        for role, (data, _source) in deployment.configs.items():
            (staging / "model" / role).mkdir(parents=True, exist_ok=True)
            (staging / "model" / role / "config.json").write_bytes(data)
        plan, notes = build_consumer_plan(a, deployment, identity, profile, cells, selected)
    if plan is not None:
        plan_sha = str(plan["sha256"])
        write_json(staging / "campaign" / cplan.PLAN_FILE, plan)
        write_json(staging / "campaign" / cplan.OVERRIDES_FILE, {})
    else:   # envelopes only, or no consumer plan: a hash of the export's own inputs
        plan_sha = canonical_hash({"artifact_sha256": artifact_sha, "cells": cells,
                                   "fpm_profile": profile})
    worker = f"{pod}-rank0"
    version = str(identity_field(a, "identity.engine_version").value)
    for phase, chosen in selected.items():
        raw_dir = staging / "campaign" / "cells" / cells[phase] / "raw" / pod
        write_json(raw_dir / ENVELOPE_FILE, build_envelope(a, legacy, phase, chosen, worker))
        write_json(raw_dir / PROVENANCE_FILE, {
            "schema_name": PROVENANCE_SCHEMA[0], "schema_version": PROVENANCE_SCHEMA[1],
            "cell_id": cells[phase], "plan_sha256": plan_sha, "attempt_id": attempt,
            "runtime": {"backend": "vllm", "backend_version": version},
            "producer": {"package": PACKAGE_NAME, "version": __version__,
                         "artifact_run_id": a.run_id, "artifact_sha256": artifact_sha}})
        if plan is not None:
            write_json(raw_dir / cplan.RECEIPT_FILE, cplan.receipt(plan, cells[phase], attempt))
    run = {"source_plan_sha256": plan_sha, "collector_attempt_id": attempt,
           "runtime_run_id": a.run_id, "runtime_grid_digest": a.integrity.grid_digest}
    table = None
    if identity is not None:
        write_json(staging / PROFILE_FILE, profile)
        rows = table_rows(a, selected, identity=identity, cells=cells, run=run)
        dest = Path("systems") / "data" / identity.system / "vllm" / version
        write_table(rows, staging / dest, {
            "schema_name": TABLE_SCHEMA[0], "schema_version": TABLE_SCHEMA[1],
            "coordinate_system": TABLE_COORDINATES, "measurement_policy": TABLE_POLICY,
            "timing_scope": TIMING_SCOPE,
            "warmup_repeats": a.measurement_policy.warmup.min_passes,
            # each row is one observation (single_sample, source_sample_count 1)
            "measurement_repeats": 1,
            "sdbench_selection": selection_rule(a),
            "sdbench_measurement_policy": typed.encode(a.measurement_policy),
            "source_plan_sha256": [plan_sha], "collector_attempt_ids": [attempt],
            "runtime_run_ids": [a.run_id], "runtime_grid_digests": [a.integrity.grid_digest],
            "aic_revision": AIC_REVISION,
            "model_paths": [identity.model_path], "system": identity.system,
            "backend": "vllm", "backend_version": version,
            "producer": {"package": PACKAGE_NAME, "version": __version__}})
        table = {"systems_root": "systems", "parquet": str(dest / TABLE_FILE),
                 "metadata": str(dest / TABLE_METADATA_FILE), "rows": len(rows)}
        if deployment is not None and acceptance is not None and profile is not None:
            write_json(staging / PREDICT_FILE, predict_config(
                a, deployment, profile, identity, final / "systems", acceptance))
        if plan is not None:
            write_json(staging / cplan.CHECKPOINT_DIR / cplan.CHECKPOINT_FILE, cplan.checkpoint(
                plan, attempt_id=attempt, started_at=a.started_at or a.created_at,
                artifact_dirs={cells[p]: str(final / "campaign" / "cells" / cells[p])
                               for p in selected},
                pods=[pod], counts={p: len(chosen) for p, chosen in selected.items()},
                table={"parquet": str(final / dest / TABLE_FILE),
                       "metadata": str(final / dest / TABLE_METADATA_FILE)}, rows=rows))
    manifest = build_manifest(a, legacy, path, artifact_sha, selected, deployment, facts, options,
                         identity=identity, cells=cells, plan_sha=plan_sha, attempt=attempt,
                         pod=pod, table=table, k=k, left_out=left_out, plan=plan, notes=notes,
                         acceptance=acceptance)
    write_json(staging / MANIFEST_FILE, manifest)
    return manifest


def measured_acceptance(a: Artifact, selected: Mapping[str, list[Selected]],
                        nextn_accepted: float | None, reasons: list[str]) -> dict | None:
    """The acceptance the exported decode rows ran at: the consumer prices a decode step from
    them at nextn_accepted (accepted drafts per request and step = AL - 1), which it takes
    from its config. The rows' mean run AL gives the value; a user's value outside the
    rows' measured range is refused, one off their mean by more than 5% warned."""
    observations = [item.observation for item in selected.get(PHASE_DECODE, [])
                    if isinstance(item.observation, DecodeObservation)]
    runs = [o.run_acceptance_length for o in observations]
    if not runs:
        return None
    low, high, mean = min(runs), max(runs), math.fsum(runs) / len(runs)
    k = a.speculative.draft_depth
    result: dict[str, Any] = {
        "rows_run_acceptance_length": {"min": low, "max": high, "mean": mean,
                                       "rows": len(runs)},
        "nextn_accepted": round(mean - 1, 4),
        "source": "the exported decode rows' mean run acceptance length - 1", "warnings": []}
    if nextn_accepted is not None:
        if not (0 <= nextn_accepted <= k and low - 1 <= nextn_accepted <= high - 1):
            reasons.append(f"--nextn-accepted {nextn_accepted:g}: the decode rows were measured "
                           f"at acceptance lengths {low:.3f}-{high:.3f} (nextn_accepted "
                           f"{low - 1:.3f}-{high - 1:.3f}, K={k}); the consumer would price "
                           "steps at an acceptance no row ran at")
        elif abs(nextn_accepted + 1 - mean) > 0.05 * mean:
            result["warnings"].append(
                f"nextn_accepted {nextn_accepted:g} is more than 5% off the rows' mean run "
                f"acceptance length {mean:.3f} (nextn_accepted {mean - 1:.3f})")
        result.update(nextn_accepted=nextn_accepted, source=SOURCE_USER)
    return result


def predict_config(a: Artifact, d: Deployment, profile: dict, identity: RowIdentity,
                   systems: Path, acceptance: dict) -> dict:
    """The consumer's predict config of this export (aisimulate predict -c): every engine
    value from the artifact (or the user's facts), direct interpolation with fallback
    denied. The traffic is a placeholder for the user's workload."""
    f: dict[str, Any] = {name: fact.value for name, fact in d.facts.items()}
    chunked = a.identity.settings.enable_chunked_prefill
    engine: dict[str, Any] = {
        "mode": "aggregated", "model": identity.model_path, "fpm_profile": profile,
        "hardware": identity.system, "backend": "vllm", "backend_version": identity.version,
        "nextn": a.speculative.draft_depth, "nextn_accepted": acceptance["nextn_accepted"],
        "systems_paths": [str(systems)], "estimation_mode": "fpm_interpolation",
        "fallback_policy": "deny",
        "estimator_config": {"fpm_interpolation": {"method": "direct"}},
        "workers": {"aggregated": {
            "scheduler": {"max_batched_tokens": f["max_num_batched_tokens"],
                          "max_sequences": f["max_num_seqs"]},
            "kv_cache": {"capacity": {"memory_fraction": f["gpu_memory_utilization"]}}}}}
    if chunked.resolved and isinstance(chunked.value, bool):
        engine["enable_chunked_prefill"] = chunked.value
    return {"traffic": {"source": {"type": "synthetic", "input_tokens": 1024,
                                   "output_tokens": 128},
                        "load": {"type": "concurrency", "concurrency": 1},
                        "stop": {"requests": 8}},
            "engine": engine}


def selection_rule(a: Artifact) -> dict:
    """How a row's one observation was chosen among the point's repeats."""
    return {"rule": "the observation at the lower median of the point's repeats by time",
            "repeats_per_point": a.measurement_policy.repeats,
            "reduction": REDUCTION, "source_sample_count": 1}


def build_consumer_plan(a: Artifact, d: Deployment, identity: RowIdentity, profile: dict,
                   cells: Mapping[str, str], selected: Mapping[str, list[Selected]]
                   ) -> tuple[dict | None, list[str]]:
    """The consumer's collection plan of this export (export.consumer_plan), or None with
    the reason where the artifact cannot state it."""
    f: dict[str, Any] = {name: fact.value for name, fact in d.facts.items()}
    mode, sizes = a.identity.cudagraph_mode, a.identity.settings.cudagraph_capture_sizes
    target = d.configs.get("target")
    if "enforce_eager" not in f or not mode.resolved or mode.value not in cplan.CUDAGRAPH_MODE:
        what = ("identity.settings.enforce_eager unresolved (pass --fact enforce_eager=...)"
                if "enforce_eager" not in f else f"identity.cudagraph_mode {mode.value!r}")
        return None, [f"no consumer collection plan: {what}"]
    if target is None:
        return None, ["no consumer collection plan: no target config.json"]
    # the engine's capture sizes where the artifact has them; else the plan names the mode
    captures = tuple(sizes.value) if isinstance(sizes.value, (list, tuple)) else ()
    plan = cplan.collection_plan(cplan.PlanInputs(
        model_path=identity.model_path, system=identity.system, version=identity.version,
        tp=identity.tp, strategy=parallel_strategy(identity.tp),
        architecture=str(f["architecture"]), config=json.loads(target[0]),
        precision=identity.precision, attention_backend=identity.attention_backend,
        cells={phase: (cells[phase], identity.execution) for phase in selected},
        max_model_len=int(f["max_model_len"]),
        max_num_batched_tokens=int(f["max_num_batched_tokens"]),
        max_num_seqs=int(f["max_num_seqs"]),
        gpu_memory_utilization=float(f["gpu_memory_utilization"]),
        cudagraph_mode=cplan.CUDAGRAPH_MODE[str(mode.value)], capture_sizes=captures,
        enforce_eager=bool(f["enforce_eager"]),
        warmup_iterations=a.measurement_policy.warmup.min_passes,
        points={phase: [coordinates(phase, item.observation) for item in chosen]
                for phase, chosen in selected.items()},
        profile=profile, aic_revision=AIC_REVISION))
    if plan is None:
        return None, [f"no consumer collection plan: this exporter does not map the consumer's "
                      f"capability of architecture {f['architecture']!r} "
                      f"(known: {', '.join(sorted(cplan.CAPABILITY_BY_ARCHITECTURE))})"]
    return plan, []


def build_profile(a: Artifact, d: Deployment, final: Path) -> tuple[dict, RowIdentity]:
    """The FpmModelProfile (one aggregated deployment with the speculative round) and the
    identity its rows carry."""
    f: dict[str, Any] = {name: fact.value for name, fact in d.facts.items()}
    k = a.speculative.draft_depth
    model_path, draft_path = str(final / "model" / "target"), str(final / "model" / "draft")
    spec = execution_profile(k, draft_path, str(f["draft_revision"]))
    execution = speculative_identity(str(f["target_revision"]), spec)
    kv_cache_bytes = a.kv_capacity.num_blocks * a.kv_capacity.block_size * int(
        f["kv_bytes_per_token"])
    sources = "; ".join(f"{name} from {fact.source}" for name, fact in sorted(d.facts.items()))
    al = a.speculative.synthetic_acceptance_length
    profile = {
        "schema_version": 1, "model": model_path, "model_revision": f["target_revision"],
        "architecture": f["architecture"], "context_length": f["max_model_len"],
        "num_experts": 0,   # dense: a mixture-of-experts config is refused
        "provenance": (f"{PACKAGE_NAME} {__version__} export of run {a.run_id} "
                       f"(K={k}, acceptance {a.speculative.acceptance_control}"
                       f"{'' if al is None else f' AL={al:g}'}); {sources}"),
        "deployments": [{
            "system": f["system"], "backend": "vllm", "backend_version": f["engine_version"],
            **topology(tp_of(a)),
            **d.precision, "attention_backend": f["attention_backend"],
            "worker_type": "aggregated", "execution_profile": spec,
            "resources": {
                "runtime_memory": {
                    "kv_cache_bytes": kv_cache_bytes,
                    "gpu_memory_utilization": f["gpu_memory_utilization"],
                    "max_model_len": f["max_model_len"],
                    "provenance": ("kv_cache_bytes = kv_capacity.num_blocks "
                                   f"({a.kv_capacity.num_blocks}) x block_size "
                                   f"({a.kv_capacity.block_size}) x kv_bytes_per_token "
                                   f"({f['kv_bytes_per_token']}, "
                                   f"{d.facts['kv_bytes_per_token'].source})")},
                "kv_bytes_per_token": f["kv_bytes_per_token"], "cache_layout": "linear",
                "max_num_tokens": f["max_num_batched_tokens"],
                "max_batch_size": f["max_num_seqs"],
                "provenance": "engine limits: " + "; ".join(
                    f"{n} from {d.facts[n].source}" for n in
                    ("max_num_batched_tokens", "max_num_seqs"))}}],
    }
    return profile, RowIdentity(model_path, draft_path, str(f["system"]),
                                str(f["engine_version"]), d.precision, execution, tp_of(a),
                                str(f["attention_backend"]))


def build_manifest(a: Artifact, legacy, path: Path, artifact_sha: str, selected, deployment,
              resolved: Mapping[str, Fact], options: ExportOptions, *, identity, cells,
              plan_sha, attempt, pod, table, k: int, left_out: list[str], plan: dict | None,
              notes: list[str], acceptance: dict | None) -> dict:
    warnings = _warnings(a, selected) + notes + (acceptance or {}).get("warnings", [])
    facts = {name: {"value": fact.value, "source": fact.source}
             for name, fact in sorted(resolved.items())}
    user = sorted(name for name, fact in facts.items() if fact["source"] == SOURCE_USER)
    if deployment:
        for role, (_text, source) in deployment.configs.items():
            facts[f"{role}_config"] = {"value": f"model/{role}/config.json", "source": source}
        facts["precision"] = {"value": deployment.precision, "source": (
            "derived by the consumer's capability rules for an unquantized dense checkpoint "
            "from identity.target.dtype/quantization and kv_cache_dtype ('auto' = the model's "
            "dtype in vLLM)")}
    return {
        "kind": MANIFEST_KIND, "version": MANIFEST_VERSION,
        "producer": {"package": PACKAGE_NAME, "version": __version__},
        "consumer": {"package": CONSUMER, "version": CONSUMER_VERSION,
                     "environment": CONSUMER_ENVIRONMENT},
        "mode": "envelope_only" if deployment is None else "table",
        "artifact": {"path": str(path), "sha256": artifact_sha, "run_id": a.run_id,
                     "schema_version": a.schema_version, "legacy": legacy,
                     "device": a.device, "integrity": {
                         "grid_digest": a.integrity.grid_digest,
                         "identity_digest": a.integrity.identity_digest,
                         "kv_capacity_digest": a.integrity.kv_capacity_digest}},
        "draft_depth": k, "nextn": k,
        "facts": facts, "user_facts": user,
        "system": identity.system if identity else None, "backend": "vllm",
        "backend_version": str(identity_field(a, "identity.engine_version").value),
        "model_path": identity.model_path if identity else None,
        "draft_path": identity.draft_path if identity else None,
        "precision": identity.precision if identity else None,
        "fmha_resolution": FMHA_RESOLUTION if identity else None,
        "topology": topology(tp_of(a)), "parallel_strategy": parallel_strategy(tp_of(a)),
        "execution_identity": list(identity.execution) if identity else None,
        "cells": cells, "plan_sha256": plan_sha, "attempt_id": attempt, "pod": pod,
        "consumer_plan": None if plan is None else {
            "collection_plan": f"campaign/{cplan.PLAN_FILE}",
            "generator_overrides": f"campaign/{cplan.OVERRIDES_FILE}",
            "checkpoint": f"{cplan.CHECKPOINT_DIR}/{cplan.CHECKPOINT_FILE}",
            "hash_rule": ("the consumer's canonical hash (runtime_memory.validate_saved_plan) "
                          "of the plan's immutable inputs"),
            "points": "the exported rows' coordinates as its frozen explicit manifest"},
        "fpm_profile": PROFILE_FILE if identity else None, "table": table,
        "predict_config": PREDICT_FILE if identity and acceptance else None,
        "acceptance": None if acceptance is None else
        {key: value for key, value in acceptance.items() if key != "warnings"},
        "graph_modes": {phase: one_graph_mode(chosen) for phase, chosen in selected.items()},
        "selection": {
            "rule": ("per point the observation at the lower median of its repeats' times "
                     "(the median for an odd count)"),
            "acceptance_length": options.acceptance_length,
            "graph_modes": dict(options.graph_modes), "left_out": left_out},
        "rows": [_row_record(phase, item) for phase, chosen in selected.items()
                 for item in chosen],
        "warnings": warnings,
    }


def _row_record(phase: str, item: Selected) -> dict:
    obs = item.observation
    batch, new, kv = coordinates(phase, obs)
    return {"phase": phase, "point_index": obs.point_index, "repeat": obs.repeat,
            "native_iteration_id": obs.native_iteration_id, "batch_size": batch,
            "total_prefill_tokens": new, "total_kv_read_tokens": kv,
            "graph_mode": obs.graph_mode, "seconds": obs.timing.seconds,
            "repeats_seconds": list(item.repeats_seconds)}


def _warnings(a: Artifact, selected) -> list[str]:
    warnings = []
    if a.measurement_policy.warmup.rule == WARMUP_UNTIL_STABLE:
        unsettled = [f"{phase}[{item.observation.point_index}]" for phase, chosen in
                     selected.items() for item in chosen if not item.observation.warmup_settled]
        if unsettled:
            shown = ", ".join(unsettled[:8]) + (", ..." if len(unsettled) > 8 else "")
            warnings.append(f"warm-up did not settle before {len(unsettled)} point(s): {shown}")
    if a.environment is not None and a.environment.contended:
        warnings.append(f"environment: contended collection ({a.environment.reason})")
    requested = sorted({al for item in selected.get(PHASE_DECODE, [])
                        if isinstance(item.observation, DecodeObservation)
                        and (al := item.observation.point.acceptance_length) is not None})
    if requested:
        warnings.append(f"decode rows were measured at synthetic acceptance length(s) "
                        f"{', '.join(f'{al:g}' for al in requested)}; the consumer's identity "
                        "has no acceptance-length axis")
    return warnings
