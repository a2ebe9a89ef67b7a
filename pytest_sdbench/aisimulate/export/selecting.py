"""Reading an artifact and selecting, per point, the one observation it exports; the
consumer's coordinate of a step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ...artifact import validate_path
from ...artifact.store import UnusableArtifact
from ...wire.contract import (
    ACCEPTANCE_SYNTHETIC,
    PHASE_DECODE,
    PHASE_PREFILL,
    PHASES,
    PHASES_BY_MODE,
    TWO_PHASES,
)
from ...wire.model import Artifact, DecodeObservation, Observation, PrefillObservation
from ...wire.points import point_label
from ...wire.rounds import samples_by_point
from .vocabulary import Refused, UnusableInput

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


def exported_phases(a: Artifact) -> tuple[str, ...]:
    """The phases an export takes: those of the artifact's mode that the consumer imports
    (TWO_PHASES, one per file). It has no mixed phase."""
    return tuple(phase for phase in PHASES_BY_MODE[a.mode] if phase in TWO_PHASES)


NOT_EXPORTED_REASON = ("the consumer (AISimulate) imports one phase per file, prefill and "
                       "decode, and has no mixed phase")


def phases_not_exported(a: Artifact) -> dict[str, dict]:
    """Each phase of the artifact that no export takes (its mixed points and rows), with
    its counts and why: the manifest and the output say so, never dropping them silently,
    and never writing them as prefill or decode rows."""
    return {phase: {"points": len(getattr(a.grid, phase)), "rows": len(getattr(a, phase)),
                    "skipped": [f"{s.phase}[{s.point_index}]: {s.reason}"
                                for s in a.coverage.skipped_points if s.phase == phase],
                    "reason": NOT_EXPORTED_REASON}
            for phase in PHASES if phase not in TWO_PHASES
            and (getattr(a.grid, phase) or getattr(a, phase))}


@dataclass(frozen=True)
class Selected:
    """The one observation a point exports: the lower median of its samples by time."""
    phase: str
    observation: Observation
    repeats_seconds: tuple[float, ...]   # every sample's time, by repeat index


def select(artifact: Artifact, phase: str) -> list[Selected]:
    """Per point (grid order) the observation at the lower median of its samples' times: for
    an odd count the median itself, for an even count the lower of the two middle ones (their
    mean, the summary's median, is no observation). Ties go to the lower repeat index. A
    sample is a work item (wire.rounds.samples_by_point: under settled_steps, its settled
    steps), whose time is one of its steps' (their lower median): that step is exported."""
    chosen = []
    for _, samples in sorted(samples_by_point(getattr(artifact, phase)).items()):
        by_repeat = sorted(samples, key=lambda sample: sample.repeat)
        ranked = sorted(by_repeat, key=lambda sample: (sample.seconds, sample.repeat))
        sample = ranked[(len(ranked) - 1) // 2]
        step = next(o for o in sample.observations if o.timing.seconds == sample.seconds)
        chosen.append(Selected(phase, step, tuple(s.seconds for s in by_repeat)))
    return chosen


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
            left_out.append(f"decode[{obs.point_index}] ({point_label(obs.point)})")
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
                     f"({point_label(item.observation.point)}, graph {item.observation.graph_mode})"
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


def seed_regime(obs: Observation) -> str | None:
    """A prefill step's KV seed regime (None for decode)."""
    return obs.kv_seed_regime if isinstance(obs, PrefillObservation) else None

