"""The fail-closed validator. It reads an artifact's JSON, refuses what it cannot trust, and
names the field and the value of every violation; it never repairs or guesses.

    report = validate_data(json.load(open(path)))
    report.ok, report.errors, report.flags, report.legacy
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..wire import typed
from ..wire.contract import (
    ACCEPTANCE_CONTROLS,
    ACCEPTANCE_SYNTHETIC,
    ARTIFACT_KIND,
    BOOKING_MEASURED,
    DEVICES,
    GRAPH_MODES,
    IDENTITY_RESOLVED,
    KV_SEED_NONE,
    KV_SEED_REAL,
    KV_SEED_REGIMES,
    LEGACY_SCHEMA_VERSIONS,
    MODES,
    PHASE_DECODE,
    PHASE_PREFILL,
    PHASES_BY_MODE,
    POLICY_BY_PHASE,
    SCHEMA_VERSION,
    SOURCE_FOR_DEVICE,
    STATUS_COMPLETE,
    STATUSES,
    STEADY_STEP_INDEX,
    TIME_UNIT,
    TIMER_FOR_SOURCE,
    TIMING_SCOPES,
)
from ..wire.identity import IdentityField
from ..wire.model import Artifact, Observation
from ..wire.points import DecodePoint, PrefillPoint, grid_digest
from ..wire.records import Snapshot
from ..wire.shape import decode_mismatch, prefill_mismatch
from ..wire.typed import digest

# A consumer's draft-depth import window; K outside it is flagged, never dropped.
DEFAULT_K_WINDOW = (1, 5)


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
    from .legacy import upgrade  # legacy formats are read by upgrading them, marked
    report = Report()
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        report.errors.append(f"schema_version: {version} is newer than this reader "
                             f"(reads 1..{SCHEMA_VERSION}); upgrade pytest-sdbench")
        return report
    if version in LEGACY_SCHEMA_VERSIONS:
        try:
            data, report.legacy = upgrade(data)
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
    err = report.errors.append
    _check_header(a, err, report.legacy)
    _check_identity_and_kv(a, err, report.legacy)
    seen_ids: dict[int, str] = {}
    phases: tuple[tuple[str, Sequence[Observation], Sequence[PrefillPoint | DecodePoint]], ...] = (
        (PHASE_PREFILL, a.prefill, a.grid.prefill), (PHASE_DECODE, a.decode, a.grid.decode))
    for phase, observations, points in phases:
        if observations and phase not in PHASES_BY_MODE.get(a.mode, ()):
            err(f"{phase}: mode {a.mode!r} measures no {phase} points, yet "
                f"{len(observations)} observations are present")
        skipped = {s.point_index for s in a.coverage.skipped_points if s.phase == phase}
        covered: dict[int, int] = {}
        repeats_seen: dict[tuple[int, int], int] = {}
        for i, obs in enumerate(observations):
            where = f"{phase}[{i}]"
            _check_observation(a, phase, obs, where, points, err, report.legacy)
            key = (obs.point_index, obs.repeat)
            if key in repeats_seen:
                err(f"{where}.repeat: point {obs.point_index} repeat {obs.repeat} duplicates "
                    f"{phase}[{repeats_seen[key]}]")
            repeats_seen.setdefault(key, i)
            covered.setdefault(obs.point_index, i)
            if obs.native_iteration_id in seen_ids:
                err(f"{where}.native_iteration_id: {obs.native_iteration_id} is also the id of "
                    f"{seen_ids[obs.native_iteration_id]}")
            seen_ids.setdefault(obs.native_iteration_id, where)
        for index in range(len(points)):
            if index not in covered and index not in skipped:
                err(f"{phase}: grid.{phase}[{index}] has no observation and is not listed in "
                    "coverage.skipped_points")
            if index in covered and index in skipped:
                err(f"{phase}: grid.{phase}[{index}] is both observed and listed as skipped")
    _check_coverage(a, err)


def _check_header(a: Artifact, err, legacy) -> None:
    if a.kind != ARTIFACT_KIND:
        err(f"kind: expected {ARTIFACT_KIND!r}, got {a.kind!r}")
    if a.mode not in MODES:
        err(f"mode: expected one of {MODES}, got {a.mode!r}")
    if a.status not in STATUSES:
        err(f"status: expected one of {STATUSES}, got {a.status!r}")
    if a.time_unit != TIME_UNIT:
        err(f"time_unit: expected {TIME_UNIT!r}, got {a.time_unit!r}")
    if a.device not in DEVICES:
        err(f"device: expected one of {DEVICES}, got {a.device!r}")
    phases = PHASES_BY_MODE.get(a.mode, ())
    policy = a.measurement_policy
    for phase in (PHASE_PREFILL, PHASE_DECODE):
        want = POLICY_BY_PHASE[phase] if phase in phases else None
        if getattr(policy, phase) != want:
            err(f"measurement_policy.{phase}: expected {want!r} for mode {a.mode!r}, "
                f"got {getattr(policy, phase)!r}")
    for phase in (PHASE_PREFILL, PHASE_DECODE):
        if getattr(a.grid, phase) and phase not in phases:
            err(f"grid.{phase}: mode {a.mode!r} has no {phase} phase, yet the grid lists "
                f"{len(getattr(a.grid, phase))} {phase} points")
    if a.integrity.grid_digest != grid_digest(a.grid):
        err(f"integrity.grid_digest: {a.integrity.grid_digest} does not match the grid "
            f"({grid_digest(a.grid)}); the grid was altered")
    spec = a.speculative
    if spec.acceptance_control not in ACCEPTANCE_CONTROLS:
        err(f"speculative.acceptance_control: expected one of {ACCEPTANCE_CONTROLS}, got "
            f"{spec.acceptance_control!r}")
    for name in ("elapsed_seconds", "measured_seconds"):
        value = getattr(a, name)
        if not math.isfinite(value) or value < 0:
            err(f"{name}: must be a finite number >= 0, got {value}")


def _check_identity_and_kv(a: Artifact, err, legacy) -> None:
    _check_identity_fields(a.identity, "identity", err)
    if a.integrity.identity_digest != digest(a.identity):
        err(f"integrity.identity_digest: {a.integrity.identity_digest} does not match the "
            "identity; the execution identity was altered after the engine started")
    if a.integrity.kv_capacity_digest != digest(a.kv_capacity):
        err(f"integrity.kv_capacity_digest: {a.integrity.kv_capacity_digest} does not match "
            "kv_capacity; the KV capacity was altered")
    ident = a.identity
    if ident.device.status == IDENTITY_RESOLVED and ident.device.value != a.device:
        err(f"device: {a.device!r} differs from identity.device.value {ident.device.value!r}")
    if legacy is None and (ident.draft_depth.status != IDENTITY_RESOLVED
                           or ident.draft_depth.value != a.speculative.draft_depth):
        err(f"speculative.draft_depth: {a.speculative.draft_depth} differs from "
            f"identity.draft_depth {ident.draft_depth.value!r}")
    kv = a.kv_capacity
    for name in ("num_blocks", "block_size", "tokens"):
        if getattr(kv, name) <= 0:
            err(f"kv_capacity.{name}: must be > 0, got {getattr(kv, name)}")
    if not kv.groups:
        err("kv_capacity.groups: empty; the engine's cache groups are missing")
    if len(kv.groups) == 1 and kv.tokens != kv.num_blocks * kv.block_size:
        err(f"kv_capacity.tokens: {kv.tokens} != num_blocks*block_size = "
            f"{kv.num_blocks * kv.block_size}")
    grouped = {n for g in kv.groups for n in g.layer_names}
    if a.speculative.draft_depth > 0 and not kv.draft_layer_names:
        err("kv_capacity.draft_layer_names: empty; the draft's layers must be in the capacity")
    for name in kv.draft_layer_names:
        if name not in grouped:
            err(f"kv_capacity.draft_layer_names: {name!r} is in no cache group")


def _check_identity_fields(node, where: str, err) -> None:
    if isinstance(node, IdentityField):
        if node.status == IDENTITY_RESOLVED:
            if node.value is None or not node.source or node.reason is not None:
                err(f"{where}: resolved fields need a value and a source and no reason, got "
                    f"value={node.value!r} source={node.source!r} reason={node.reason!r}")
        elif not node.reason or node.value is not None:
            err(f"{where}: unresolved fields need a reason and no value, got "
                f"value={node.value!r} reason={node.reason!r}")
        return
    for name in getattr(node, "__dataclass_fields__", {}):
        _check_identity_fields(getattr(node, name), f"{where}.{name}", err)


def _check_observation(a: Artifact, phase, obs, where, points, err, legacy) -> None:
    if not 0 <= obs.point_index < len(points):
        err(f"{where}.point_index: {obs.point_index} is outside grid.{phase} "
            f"(0..{len(points) - 1})")
    elif obs.point != points[obs.point_index]:
        err(f"{where}.point: {obs.point} differs from grid.{phase}[{obs.point_index}] "
            f"{points[obs.point_index]}")
    snap, timing, prov = obs.snapshot, obs.timing, obs.provenance
    if snap.native_iteration_id != obs.native_iteration_id:
        err(f"{where}.snapshot.native_iteration_id: {snap.native_iteration_id} differs from the "
            f"observation's {obs.native_iteration_id}")
    if timing.native_iteration_id != snap.native_iteration_id:
        err(f"{where}.timing.native_iteration_id: {timing.native_iteration_id} differs from the "
            f"snapshot's {snap.native_iteration_id}")
    if not math.isfinite(timing.seconds) or timing.seconds <= 0:
        err(f"{where}.timing.seconds: must be finite and > 0, got {timing.seconds}")
    if timing.scope not in TIMING_SCOPES:
        err(f"{where}.timing.scope: expected one of {TIMING_SCOPES}, got {timing.scope!r}")
    if prov.device != a.device:
        err(f"{where}.provenance.device: {prov.device!r} differs from the artifact's device "
            f"{a.device!r}")
    expected_source = SOURCE_FOR_DEVICE.get(a.device)
    if timing.source != expected_source:
        err(f"{where}.timing.source: {timing.source!r} cannot come from a {a.device!r} run "
            f"(expected {expected_source!r}); relabelled timing")
    if prov.timer != TIMER_FOR_SOURCE.get(timing.source):
        err(f"{where}.provenance.timer: {prov.timer!r} is not the timer of source "
            f"{timing.source!r}")
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
            "requests' new + draft tokens")
    if obs.graph_mode not in GRAPH_MODES:
        err(f"{where}.graph_mode: expected one of {GRAPH_MODES}, got {obs.graph_mode!r}")
    if phase == PHASE_PREFILL:
        _check_prefill(obs, where, err, legacy)
    else:
        _check_decode(a, obs, where, err)


def _check_prefill(obs, where, err, legacy) -> None:
    mismatch = prefill_mismatch(obs.point, obs.snapshot)
    if mismatch:
        err(f"{where}.snapshot: {mismatch}")
    prefix = obs.point.cached_prefix_tokens
    regime = obs.kv_seed_regime
    allowed = KV_SEED_REGIMES + (("unverified",) if legacy else ())
    if regime not in allowed:
        err(f"{where}.kv_seed_regime: expected one of {allowed}, got {regime!r}")
    elif (prefix == 0) != (regime == KV_SEED_NONE):
        err(f"{where}.kv_seed_regime: {regime!r} does not fit cached_prefix_tokens {prefix}")
    if regime == KV_SEED_REAL and (len(obs.cache_hit_tokens) != obs.point.batch_size or
                                   any(h != prefix for h in obs.cache_hit_tokens)):
        err(f"{where}.cache_hit_tokens: {list(obs.cache_hit_tokens)}; a real prefix must be "
            f"verified as a hit of {prefix} tokens for each of {obs.point.batch_size} requests")


def _check_decode(a: Artifact, obs, where, err) -> None:
    mismatch = decode_mismatch(obs.point, obs.snapshot)
    if mismatch:
        err(f"{where}.snapshot: {mismatch}")
    k = obs.point.draft_depth
    if k != a.speculative.draft_depth:
        err(f"{where}.point.draft_depth: {k} differs from speculative.draft_depth "
            f"{a.speculative.draft_depth}")
    if obs.step_index != STEADY_STEP_INDEX:
        err(f"{where}.step_index: the steady step is step {STEADY_STEP_INDEX}, got "
            f"{obs.step_index}")
    synthetic = a.speculative.acceptance_control == ACCEPTANCE_SYNTHETIC
    if synthetic != (obs.point.acceptance_length is not None):
        err(f"{where}.point.acceptance_length: {obs.point.acceptance_length} under "
            f"{a.speculative.acceptance_control} acceptance (synthetic needs a requested AL, "
            "natural needs null)")
    if not 1.0 <= obs.run_acceptance_length <= k + 1 or obs.run_acceptance_samples < 0:
        err(f"{where}.run_acceptance_length: {obs.run_acceptance_length} over "
            f"{obs.run_acceptance_samples} samples is outside [1, {k + 1}]")
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


def _check_coverage(a: Artifact, err) -> None:
    cov = a.coverage
    expected = len(a.grid)
    completed = len({o.point_index for o in a.prefill}) + len({o.point_index for o in a.decode})
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
    if a.status != STATUS_COMPLETE and cov.completed == cov.expected and not cov.skipped:
        err(f"status: {a.status!r} although every point was measured")


def _flag_k_window(a: Artifact, k_window, report: Report) -> None:
    low, high = k_window
    k = a.speculative.draft_depth
    if a.decode and not low <= k <= high:
        report.flags.append(f"speculative.draft_depth: K={k} lies outside the import window "
                            f"K={low}-{high}; its {len(a.decode)} decode observations are kept, "
                            "flagged, not dropped")
