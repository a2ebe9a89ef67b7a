"""Everything the consumer cannot take truthfully, each refusal naming the field and
the value."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise

from ...wire.contract import (
    DEVICE_CUDA,
    K_WINDOW,
    MODE_AGG,
    PHASE_DECODE,
    PHASE_PREFILL,
    SOURCE_CUDA_EVENT,
    SPEC_METHOD_EAGLE3,
    STATUS_COMPLETE,
)
from ...wire.model import Artifact, Observation
from ...wire.points import point_label
from .options import ExportOptions
from .selecting import (
    NOT_EXPORTED_REASON,
    Selected,
    coordinates,
    exported_phases,
    modes_by_point,
    phases_not_exported,
    seed_regime,
)
from .vocabulary import ROW_SEED_REGIME, TIMING_SCOPE

# --- Checks: everything the consumer cannot take truthfully ---------------------------------

def check(artifact: Artifact, selected: Mapping[str, list[Selected]], options: ExportOptions,
          reasons: list[str]) -> None:
    _check_status(artifact, reasons)
    _check_speculative(artifact, reasons)
    exportable = _check_exportable(artifact, reasons)
    if not options.envelope_only:
        _check_timing(artifact, reasons)
        if exportable:
            _check_phases(artifact, reasons)
    _check_parallel(artifact, reasons)
    for phase, chosen in selected.items():
        _check_collisions(phase, chosen, reasons)
        _check_graph_modes(phase, chosen, reasons)
    _check_prefixes(selected.get(PHASE_PREFILL, []), reasons)
    _check_summaries(artifact, selected, reasons)


def _check_status(a: Artifact, reasons: list[str]) -> None:
    """Complete envelopes only: every point of the phases exported was measured. Points
    skipped in a phase no export takes (mixed) leave the exported envelopes whole; the
    manifest names them (phases_not_exported)."""
    cov = a.coverage
    exported = set(exported_phases(a))
    elsewhere = [s for s in cov.skipped_points if s.phase not in exported]
    if (elsewhere and len(elsewhere) == cov.skipped == len(cov.skipped_points)
            and cov.completed + cov.skipped == cov.expected):
        return
    if a.status != STATUS_COMPLETE or cov.skipped or cov.completed != cov.expected:
        skipped = "; ".join(f"{s.phase}[{s.point_index}]: {s.reason}" for s in cov.skipped_points)
        reasons.append(f"status: {a.status!r} (coverage {cov.completed}/{cov.expected}"
                       f"{', skipped ' + skipped if skipped else ''}); the consumer takes "
                       "complete envelopes only")


def _check_exportable(a: Artifact, reasons: list[str]) -> bool:
    """An artifact with no phase the consumer imports (a mixed-only one) has nothing to
    export, in any mode of the export: its rows are never written as prefill or decode."""
    if exported_phases(a):
        return True
    held = "; ".join(f"{n['rows']} {phase} rows of {n['points']} points"
                     for phase, n in phases_not_exported(a).items())
    reasons.append(f"mode: {a.mode!r} ({held}); {NOT_EXPORTED_REASON}: nothing to export "
                   "(collect prefill and decode points, mode agg, for the consumer)")
    return False


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
                f"({point_label(first.observation.point)}) and "
                f"{phase}[{item.observation.point_index}] "
                f"({point_label(item.observation.point)}) land on one consumer coordinate "
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
                           f"({point_label(obs.point)}); only a prefix the engine "
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

