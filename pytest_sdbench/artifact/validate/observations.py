"""The observation rules: each step against its grid point, its snapshot, its timing and
provenance, its GPU clock and its warm-up; the rules of each phase (a prefill step's prefix
seeding, a decode step's acceptance, settled_steps' runs, a mixed step's two kinds of
request) are by_phase's."""

from __future__ import annotations

import math

from ...wire.contract import (
    BOOKING_MEASURED,
    CLOCK_CAP_REASONS,
    CLOCK_MHZ_MAX,
    CLOCK_REASONS,
    CUDAGRAPH_NONE,
    DEVICE_CUDA,
    GRAPH_EAGER,
    GRAPH_MODES,
    GRAPH_MODES_BY_DEVICE,
    PHASE_DECODE,
    PHASE_MIXED,
    PHASE_PREFILL,
    PHASES,
    POLICY_SETTLED_STEPS,
    SOURCE_FOR_DEVICE,
    STEP_SECONDS_BASE,
    STEP_SECONDS_MAX,
    STEP_SECONDS_MIN,
    STEP_SECONDS_PER_TOKEN_MAX,
    STEP_TIME_SINGLE_RANK,
    STEP_TIME_SLOWEST_RANK,
    TIMER_FOR_SOURCE,
    WARMUP_BY_SHAPE_SEEDED,
    WARMUP_MIN_PASSES,
    WARMUP_SEEDED_PASSES,
    WARMUP_SHAPE_RULES,
    collected_phases,
)
from ...wire.model import Artifact
from ...wire.points import capture_sizes, compiled_shape
from ...wire.records import GpuClock, Snapshot
from .by_phase import check_decode, check_mixed, check_prefill, check_settled_items
from .helpers import Err, is_real_step, older_than, resolved, resolved_int

# ---- observations ------------------------------------------------------------------------

def check_observations(a: Artifact, err: Err, legacy) -> None:
    seen_ids: dict[int, str] = {}
    for phase in PHASES:
        observations, points = getattr(a, phase), getattr(a.grid, phase)
        if observations and phase not in collected_phases(a.mode, bool(a.grid.mixed)):
            err(f"{phase}: mode {a.mode!r} measures no {phase} points, yet "
                f"{len(observations)} observations are present")
        by_point: dict[int, list[int]] = {}
        repeats_seen: dict[tuple[int, int, int], int] = {}
        for i, obs in enumerate(observations):
            where = f"{phase}[{i}]"
            _check_observation(a, phase, obs, where, points, err, legacy)
            key = (obs.point_index, obs.repeat, getattr(obs, "step_index", 0))
            if key in repeats_seen:
                err(f"{where}.repeat: point {obs.point_index} repeat {obs.repeat}"
                    f"{f' step {key[2]}' if key[2] else ''} duplicates "
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
        if phase == PHASE_DECODE and a.measurement_policy.decode == POLICY_SETTLED_STEPS:
            check_settled_items(observations, err)
        if a.measurement_policy.warmup.rule in WARMUP_SHAPE_RULES:
            _check_shape_warmup(a, phase, observations, by_point, err)


def _check_shape_warmup(a: Artifact, phase: str, observations, by_point: dict[int, list[int]],
                        err: Err) -> None:
    """by_shape: a point warmed up for fewer than WARMUP_MIN_PASSES passes relied on an
    earlier point of its compiled shape (the warm-up runs the grid in order) that settled by
    its own passes, or that was skipped later (its observations left with it).
    by_shape_seeded: the same, and a point takes at least its phase's WARMUP_SEEDED_PASSES
    (a prefill point one pass, a decode point none: its seed)."""
    sizes = capture_sizes(a.identity.settings.cudagraph_capture_sizes)
    points = getattr(a.grid, phase)
    skipped = {s.point_index for s in a.coverage.skipped_points if s.phase == phase}
    settled_by: set[tuple[str, str, int]] = set()
    seeded = a.measurement_policy.warmup.rule == WARMUP_BY_SHAPE_SEEDED
    for index in range(len(points)):
        members = by_point.get(index)
        if not members:
            if index in skipped:   # its graph mode is gone with it: each mode it could have run
                settled_by.update(compiled_shape(points[index], mode, sizes)
                                  for mode in GRAPH_MODES)
            continue
        first = observations[members[0]]
        shape = compiled_shape(first.point, first.graph_mode, sizes)
        if seeded and first.warmup_passes < WARMUP_SEEDED_PASSES[phase]:
            err(f"{phase}[{members[0]}].warmup_passes: {first.warmup_passes} under the "
                f"{WARMUP_BY_SHAPE_SEEDED} warm-up; a {phase} point takes at least "
                f"{WARMUP_SEEDED_PASSES[phase]}")
        if first.warmup_passes >= WARMUP_MIN_PASSES:
            if first.warmup_settled:
                settled_by.add(shape)
        elif shape not in settled_by:
            err(f"{phase}[{members[0]}].warmup_passes: {first.warmup_passes} under the "
                f"{a.measurement_policy.warmup.rule} warm-up, yet no earlier {phase} point of "
                f"its compiled shape ({first.graph_mode}, {shape[2]} tokens) settled; a point "
                f"of an unsettled shape warms up for at least {WARMUP_MIN_PASSES} passes")


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
    _check_clock(a, obs, where, err, legacy)
    if phase == PHASE_PREFILL:
        check_prefill(obs, where, err, legacy)
    elif phase == PHASE_MIXED:
        check_mixed(obs, where, err)
    else:
        check_decode(a, obs, where, err, legacy)


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


def _check_clock(a: Artifact, obs, where: str, err: Err, legacy) -> None:
    """CUDA: the GPU clock around the work item, as NVML reads it; CPU: none (a clock on a
    CPU run, or none on a CUDA run, is a relabelled artifact)."""
    clock = obs.gpu_clock
    if clock is None:
        if a.device == DEVICE_CUDA and not older_than(legacy, 6):
            err(f"{where}.gpu_clock: null on a cuda run; every CUDA sample carries the GPU "
                "clock it ran at")
        return
    if a.device != DEVICE_CUDA:
        err(f"{where}.gpu_clock: {clock} on a {a.device!r} run; only a CUDA run reads a GPU "
            "clock (relabelled?)")
        return
    if not 0 < clock.max_sm_mhz <= CLOCK_MHZ_MAX:
        err(f"{where}.gpu_clock.max_sm_mhz: {clock.max_sm_mhz} is outside (0, {CLOCK_MHZ_MAX}]")
    for name in ("sm_mhz_before", "sm_mhz_after"):
        mhz = getattr(clock, name)
        if not 0 < mhz <= clock.max_sm_mhz:
            err(f"{where}.gpu_clock.{name}: {mhz} MHz is outside (0, max_sm_mhz "
                f"{clock.max_sm_mhz}]")
    if list(clock.reasons) != sorted(set(clock.reasons), key=CLOCK_REASONS.index):
        err(f"{where}.gpu_clock.reasons: {list(clock.reasons)}; each reason once, in NVML's "
            "order")
    if clock.capped != GpuClock.capped_by(clock.reasons):
        err(f"{where}.gpu_clock.capped: {clock.capped}, yet its reasons {list(clock.reasons)} "
            f"make it {GpuClock.capped_by(clock.reasons)} (capped: one of {CLOCK_CAP_REASONS})")


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
