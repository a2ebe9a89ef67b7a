"""The repeatability of an export's rows, judged by the consumer's policy
(collector/fpm_forward/repeatability.py, aisimulate 0.13.0.dev202610270000000085): a point
passes when its independent samples number `samples` (5) and their CV (sample standard
deviation, n - 1, over the mean) is at most 5%; its source agrees when
|median of the samples / source time - 1| is at most 5%. The consumer's own assessment reads
only fresh native launches with Dynamo's runtime evidence, which no export carries (see
docs/export.md); this module applies its rule to the samples an export has.

Samples: the consumer counts independent repetitions, and says adjacent internal steps are
not repetitions. Here a point's samples are, over the artifact and the other engine starts
given with it (--repeats-from): one per round where repeats were taken in rounds (schema v5:
observations carry `round`, measurement_policy.repeat_order 'rounds': each round a pass over
the whole grid), and one per engine start otherwise (repeats taken back to back share the
host's speed of that moment: that start's median observation is its one sample).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ..wire.model import Artifact, Observation

SAMPLES, MAX_CV, MAX_SOURCE_DIFFERENCE = 5, 0.05, 0.05   # the consumer's defaults
ROUNDS = "rounds"


def _by_point(a: Artifact, phase: str) -> dict[int, list[Observation]]:
    points: dict[int, list[Observation]] = {}
    for obs in getattr(a, phase):
        points.setdefault(obs.point_index, []).append(obs)
    return points


def _lower_median(observations: Sequence[Observation]) -> Observation:
    ranked = sorted(observations, key=lambda o: (o.timing.seconds, o.repeat))
    return ranked[(len(ranked) - 1) // 2]


def sample_kind(a: Artifact) -> str:
    """How one artifact's observations of a point become samples."""
    order = getattr(a.measurement_policy, "repeat_order", None)
    return "round" if order == ROUNDS else "engine_start"


def samples(a: Artifact, phase: str, point_index: int, start: int) -> list[dict[str, Any]]:
    """One artifact's samples of a point: one per round (v5 rounds), else one per start."""
    observations = _by_point(a, phase).get(point_index, [])
    if not observations:
        return []
    if sample_kind(a) == "round":
        rounds: dict[object, list[Observation]] = {}
        for obs in observations:
            rounds.setdefault(getattr(obs, "round", obs.repeat), []).append(obs)
        return [{"engine_start": start, "run_id": a.run_id, "round": key,
                 "seconds": _lower_median(group).timing.seconds}
                for key, group in sorted(rounds.items(), key=lambda item: str(item[0]))]
    return [{"engine_start": start, "run_id": a.run_id, "round": None,
             "seconds": _lower_median(observations).timing.seconds,
             "back_to_back_repeats": len(observations)}]


def _point(phase: str, index: int, source: float, collected: list[dict[str, Any]]) -> dict:
    values = [s["seconds"] for s in collected]
    mean = statistics.mean(values) if values else None
    median = statistics.median(values) if values else None
    stdev = statistics.stdev(values) if len(values) >= 2 else None
    cv = stdev / mean if stdev is not None and mean else None
    difference = abs(median / source - 1) if median is not None else None
    enough = len(values) >= SAMPLES
    status = ("incomplete" if not enough else
              "passed" if cv is not None and cv <= MAX_CV else "unstable")
    agreement = ("unestablished" if difference is None or not enough else
                 "passed" if difference <= MAX_SOURCE_DIFFERENCE else "failed")
    return {"phase": phase, "point_index": index, "source_seconds": source,
            "samples": collected, "sample_count": len(values), "mean_seconds": mean,
            "median_seconds": median, "sample_cv": cv, "source_relative_difference": difference,
            "status": status, "source_agreement": agreement}


def assess(main: Artifact, others: Sequence[Artifact],
           rows: Mapping[str, Sequence[tuple[int, float]]]) -> dict:
    """The consumer's repeatability rule on an export: rows are, per phase, the exported
    points (index, the row's seconds)."""
    starts = [main, *others]
    points = [_point(phase, index, source,
                     [s for start, a in enumerate(starts) for s in samples(a, phase, index, start)])
              for phase, chosen in rows.items() for index, source in chosen]
    counts: dict[str, int] = {}
    for p in points:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    failed = counts.get("unstable", 0) or any(p["source_agreement"] == "failed" for p in points)
    status = ("failed" if failed else "incomplete" if counts.get("incomplete") else "passed")
    cvs = sorted(p["sample_cv"] for p in points if p["sample_cv"] is not None)
    diffs = sorted(p["source_relative_difference"] for p in points
                   if p["source_relative_difference"] is not None)
    return {
        "schema": "pytest-sdbench/aisimulate-repeatability", "version": 1,
        "policy": {"samples": SAMPLES, "cv_threshold": MAX_CV,
                   "source_agreement_threshold": MAX_SOURCE_DIFFERENCE,
                   "standard_deviation_denominator": "n - 1",
                   "agreement_metric": "abs(median of samples / exported row - 1)",
                   "from": "collector/fpm_forward/repeatability.py defaults "
                           "(aisimulate 0.13.0.dev202610270000000085)"},
        "engine_starts": [{"run_id": a.run_id, "sample_kind": sample_kind(a)} for a in starts],
        "sample_rule": ("one sample per round (repeats in rounds), else one per engine start "
                        "(back-to-back repeats are adjacent steps, not repetitions)"),
        "status": status, "point_counts": counts,
        "source_agreement_failed": sum(p["source_agreement"] == "failed" for p in points),
        "cv": _quantiles(cvs), "source_relative_difference": _quantiles(diffs),
        "points": points,
    }


def _quantiles(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    at = lambda q: values[min(len(values) - 1, math.ceil(q * len(values)) - 1)]  # noqa: E731
    return {"median": statistics.median(values), "p90": at(0.9), "max": values[-1]}


def same_collection_errors(main: Artifact, other: Artifact, path: str) -> list[str]:
    """Another engine start must be of the same identity and grid to give samples."""
    errors = []
    for name in ("identity_digest", "grid_digest"):
        ours, theirs = getattr(main.integrity, name), getattr(other.integrity, name)
        if ours != theirs:
            errors.append(f"--repeats-from {path}: integrity.{name} {theirs} differs from the "
                          f"exported artifact's {ours}; samples come from engine starts of the "
                          "same identity and grid")
    if main.speculative != other.speculative:
        errors.append(f"--repeats-from {path}: speculative differs from the exported "
                      "artifact's")
    return errors
