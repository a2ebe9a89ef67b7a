"""The summary, sum and coverage rules: each summary recomputed from its samples, the
measured and timed seconds, the observer's cost, the coverage against the status."""

from __future__ import annotations

import datetime
import math
import statistics

from ...wire.contract import (
    CLOCK_SLACK_SECONDS,
    MEASURED_SUM_REL_TOL,
    OBSERVER_COST_METHOD,
    PHASES,
    STATUS_COMPLETE,
)
from ...wire.model import Artifact, parse_utc, summarize
from ...wire.rounds import point_canary_spread, samples_by_point, stop_rule
from ..check_rounds import unfinished
from .helpers import Err, all_observations, fsum_or_inf, is_real_step, older_than

# ---- summaries, sums, coverage ------------------------------------------------------------

def check_summaries(a: Artifact, err: Err) -> None:
    """One summary per observed point, equal to wire.model.summarize of its samples (in the
    order taken), with the stop its rule gives and the canary spread of its rounds."""
    policy = a.measurement_policy
    samples = {(phase, index): obs for phase in PHASES
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
        times = [sample.seconds for sample in samples[key]]
        if not all(is_real_step(o.timing.seconds, a.device) for sample in samples[key]
                   for o in sample.observations):
            continue   # the out-of-bounds step is reported; its summary is not recomputed
        rule = policy.median_interval
        want = summarize(s.phase, s.point_index, times,
                         stop_rule(times, policy.repeats, policy.until_pinned, rule),
                         point_canary_spread(a.rounds, [o.round for o in samples[key]]), rule)
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
                for phase in PHASES}
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
    for phase in PHASES:
        for index in range(len(getattr(a.grid, phase))):
            if index not in observed[phase] and (phase, index) not in skipped:
                err(f"{phase}: grid.{phase}[{index}] has no observation and is not listed in "
                    "coverage.skipped_points")
            if index in observed[phase] and (phase, index) in skipped:
                err(f"{phase}: grid.{phase}[{index}] is both observed and listed as skipped")
    completed = sum(len(observed[phase]) for phase in PHASES)
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

