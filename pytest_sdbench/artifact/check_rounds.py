"""The validator's rules for how an artifact repeated its points (schema v5): each point's
samples and why it has that many, the rounds with their seeded orders and canary readings,
and the native iteration IDs, which must run in the recorded order. Every rule recomputes a
fact from others the artifact states (wire.rounds holds the one definition of each rule),
so that a forged order, canary or round count contradicts something.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..wire.contract import (
    CANARY_WORKLOAD,
    DEVICE_CPU,
    LEGACY_SCHEMA_VERSIONS,
    MIN_PINNED_ROUNDS,
    PHASES,
    PINNED_CONFIDENCE,
    REPEAT_BACK_TO_BACK,
    STATUS_COMPLETE,
    STOP_NOT_FINISHED,
    collected_phases,
)
from ..wire.model import Artifact
from ..wire.rounds import (
    CanarySample,
    PointRef,
    canary_readings,
    canary_spread,
    needs_another_round,
    round_order,
    samples_by_point,
)

Err = Callable[[str], None]
LEGACY_VERSION = {marker: version for version, marker in LEGACY_SCHEMA_VERSIONS.items()}
# A canary reading is a few milliseconds of host work; a reading beyond this is no reading.
CANARY_SECONDS_MAX = 10.0


def _refs(a: Artifact) -> list[PointRef]:
    """Every point of the artifact's grid, in grid order (prefill, then decode)."""
    return [PointRef(phase, i)  # type: ignore[arg-type]
            for phase in collected_phases(a.mode, bool(a.grid.mixed))
            for i in range(len(getattr(a.grid, phase)))]


def check_samples(a: Artifact, err: Err) -> None:
    """Each point's samples are numbered 0..n-1 in the order of their rounds, one per round,
    and n is what its rule asks: no sample past the point where the rule stopped it."""
    policy = a.measurement_policy
    for phase in PHASES:
        for index, obs in sorted(samples_by_point(getattr(a, phase)).items()):
            where = f"{phase}: point {index}"
            repeats = [o.repeat for o in obs]
            if repeats != list(range(len(obs))):
                err(f"{where}: its samples, in the order of their rounds, are numbered "
                    f"{repeats}; a point's samples are numbered 0..{len(obs) - 1} in the "
                    "order taken")
            rounds = [o.round for o in obs]
            if policy.repeat_order != REPEAT_BACK_TO_BACK and len(set(rounds)) != len(rounds):
                err(f"{where}: measured more than once in a round (rounds {rounds}); a round "
                    "measures each of its points once")
            seconds = [o.seconds for o in obs]
            for m in range(1, len(seconds)):
                if not needs_another_round(seconds[:m], policy.repeats, policy.until_pinned,
                                           policy.median_interval):
                    err(f"{where}: {len(seconds)} samples, yet its rule stopped it after {m} "
                        f"(measurement_policy.repeats {policy.repeats}, until_pinned "
                        f"{policy.until_pinned}); the round count was altered")
                    break


def check_rounds(a: Artifact, err: Err, legacy: str | None) -> None:
    """The rounds against the policy, the grid, the observations and the seed."""
    if legacy is not None and LEGACY_VERSION[legacy] < 5:   # rounds came with v5
        if a.rounds or a.host_canary is not None:
            err("rounds: a legacy artifact records no rounds and no host canary")
        return
    policy = a.measurement_policy
    if policy.repeat_order == REPEAT_BACK_TO_BACK:
        _check_back_to_back(a, err)
    else:
        _check_policy_of_rounds(a, err)
        _check_round_orders(a, err)
        _check_membership(a, err)
    _check_id_order(a, err)
    _check_canaries(a, err)


def _check_policy_of_rounds(a: Artifact, err: Err) -> None:
    policy, until = a.measurement_policy, a.measurement_policy.until_pinned
    if policy.order_seed is None:
        err("measurement_policy.order_seed: null under rounds; every round's order is drawn "
            "from it")
    if until is not None:
        if not 0 < until.max_half_width < 1:
            err(f"measurement_policy.until_pinned.max_half_width: must lie in (0, 1), got "
                f"{until.max_half_width}")
        if until.confidence != PINNED_CONFIDENCE:
            err(f"measurement_policy.until_pinned.confidence: {until.confidence}, the "
                f"contract's rule is {PINNED_CONFIDENCE}")
        if until.max_rounds < max(policy.repeats, MIN_PINNED_ROUNDS):
            err(f"measurement_policy.until_pinned.max_rounds: {until.max_rounds} is fewer than "
                f"{max(policy.repeats, MIN_PINNED_ROUNDS)} (the fixed rounds, and the "
                f"{MIN_PINNED_ROUNDS} a pinned median needs)")
        elif len(a.rounds) > until.max_rounds:
            err(f"rounds: {len(a.rounds)} rounds, more than until_pinned.max_rounds "
                f"{until.max_rounds}")
    elif len(a.rounds) > policy.repeats:
        err(f"rounds: {len(a.rounds)} rounds, more than measurement_policy.repeats "
            f"{policy.repeats} (no until_pinned)")
    if a.status == STATUS_COMPLETE and len(a.rounds) < policy.repeats:
        err(f"rounds: {len(a.rounds)} rounds in a complete artifact, fewer than "
            f"measurement_policy.repeats {policy.repeats}")


def _check_back_to_back(a: Artifact, err: Err) -> None:
    policy = a.measurement_policy
    if policy.order_seed is not None or policy.until_pinned is not None:
        err(f"measurement_policy: order_seed {policy.order_seed} and until_pinned "
            f"{policy.until_pinned} under back_to_back repeats (both belong to rounds)")
    if len(a.rounds) != 1:
        err(f"rounds: {len(a.rounds)} entries under back_to_back repeats; a back-to-back "
            "collection is one pass over the grid, recorded as one round")
        return
    (only,) = a.rounds
    if only.index != 0 or list(only.order) != _refs(a):
        err("rounds[0]: a back-to-back pass measures the grid in grid order, index 0; got "
            f"index {only.index} and another order")
    for phase, i, obs in _observations(a):
        if obs.round != 0:
            err(f"{phase}[{i}].round: {obs.round} under back_to_back repeats (one round, 0)")


def _observations(a: Artifact):
    for phase in PHASES:
        for i, obs in enumerate(getattr(a, phase)):
            yield phase, i, obs


def _check_round_orders(a: Artifact, err: Err) -> None:
    valid = set(_refs(a))
    seed = a.measurement_policy.order_seed
    for position, r in enumerate(a.rounds):
        where = f"rounds[{position}]"
        if r.index != position:
            err(f"{where}.index: {r.index}; rounds are numbered 0, 1, ... in the order run")
        unknown = [ref for ref in r.order if ref not in valid]
        if unknown:
            err(f"{where}.order: {unknown[0]} is no point of the grid")
        if len(set(r.order)) != len(r.order):
            err(f"{where}.order: lists a point twice")
        if not r.order:
            err(f"{where}.order: empty; a round measures at least one point")
        if seed is not None and tuple(r.order) != round_order(r.order, seed, r.index):
            want = round_order(r.order, seed, r.index)
            k = next(i for i, (x, y) in enumerate(zip(r.order, want, strict=True)) if x != y)
            err(f"{where}.order: not the order that order_seed {seed} draws for round "
                f"{r.index}: position {k} holds {r.order[k].phase}[{r.order[k].point_index}], "
                f"the draw puts {want[k].phase}[{want[k].point_index}] there")


def _check_membership(a: Artifact, err: Err) -> None:
    """A point takes part in round r exactly when its samples before r ask for another
    round (wire.rounds.needs_another_round); its samples are taken in rounds it is in. A
    partial artifact's last round may leave members unmeasured (it was interrupted)."""
    policy = a.measurement_policy
    skipped = {PointRef(s.phase, s.point_index) for s in a.coverage.skipped_points}
    members = [set(r.order) for r in a.rounds]
    for phase in PHASES:
        for index, obs in sorted(samples_by_point(getattr(a, phase)).items()):
            ref = PointRef(phase, index)  # type: ignore[arg-type]
            if ref in skipped:
                continue   # reported by the coverage rules
            taken = {o.round: o.seconds for o in obs}
            for o in obs:
                if not 0 <= o.round < len(a.rounds) or ref not in members[o.round]:
                    err(f"{phase}: point {index} has a sample in round {o.round}, which does "
                        "not list it")
            before: list[float] = []
            for r, listed in enumerate(members):
                wanted = needs_another_round(before, policy.repeats, policy.until_pinned,
                                             policy.median_interval)
                if (ref in listed) != wanted:
                    err(f"rounds[{r}].order: {'lists' if ref in listed else 'leaves out'} "
                        f"{phase}[{index}], whose {len(before)} samples before it "
                        f"{'need another round' if wanted else 'need no further round'}")
                    break
                if ref in listed and r not in taken:
                    last = r == len(members) - 1 and a.status != STATUS_COMPLETE
                    if not last:
                        err(f"{phase}: point {index} has no sample in round {r}, which lists "
                            "it")
                        break
                if r in taken:
                    before.append(taken[r])


def _check_id_order(a: Artifact, err: Err) -> None:
    """The native iteration IDs run in the recorded order: within a round along its order
    (a back-to-back point's repeats together), and each round after the one before."""
    ids: dict[tuple[int, PointRef], list[int]] = {}
    for phase, _, obs in _observations(a):
        ids.setdefault((obs.round, PointRef(phase, obs.point_index)),
                       []).append(obs.native_iteration_id)
    last_id, last_where = 0, ""
    for r in a.rounds:
        for ref in r.order:
            found = ids.get((r.index, ref))
            if not found:
                continue
            where = f"{ref.phase}[{ref.point_index}] in round {r.index}"
            if min(found) <= last_id:
                err(f"rounds[{r.index}].order: {where} has native_iteration_id {min(found)}, "
                    f"not after {last_where}'s {last_id}; the observations were not taken in "
                    "the recorded order")
            last_id, last_where = max(last_id, max(found)), where


def _check_canaries(a: Artifact, err: Err) -> None:
    for position, r in enumerate(a.rounds):
        for name in ("canary_before", "canary_after"):
            sample = getattr(r, name)
            where = f"rounds[{position}].{name}"
            if sample is None:
                if name == "canary_after" and position == len(a.rounds) - 1 and \
                        a.status != STATUS_COMPLETE:
                    continue   # the round was interrupted before its closing reading
                err(f"{where}: null; every finished round is bracketed by two readings")
                continue
            _check_canary_sample(sample, where, a.device, err)
    want = canary_spread(CANARY_WORKLOAD, canary_readings(a.rounds))
    got = a.host_canary
    if got is None or want is None:
        if got != want:
            err(f"host_canary: {got} does not summarise the rounds' readings ({want})")
        return
    if got.workload != CANARY_WORKLOAD:
        err(f"host_canary.workload: {got.workload!r}, the contract's canary is "
            f"{CANARY_WORKLOAD!r}")
    for name in ("samples", "python_median_seconds", "python_spread", "python_cv",
                 "launch_median_seconds", "launch_spread", "launch_cv"):
        g, w = getattr(got, name), getattr(want, name)
        if (g is None) != (w is None) or (g is not None and not math.isclose(
                g, w, rel_tol=1e-9, abs_tol=1e-15)):
            err(f"host_canary.{name}: {g} != {w}, recomputed from the rounds' canary readings")


def _check_canary_sample(sample: CanarySample, where: str, device: str, err: Err) -> None:
    for name in ("python_seconds", "launch_seconds"):
        value = getattr(sample, name)
        if value is None:
            continue
        if not math.isfinite(value) or not 0 < value <= CANARY_SECONDS_MAX:
            err(f"{where}.{name}: {value} is outside (0, {CANARY_SECONDS_MAX}] s")
    if (sample.launch_seconds is None) != (device == DEVICE_CPU):
        err(f"{where}.launch_seconds: {sample.launch_seconds} on a {device!r} run (the kernel "
            "launch reading is taken on cuda, null on cpu)")


def unfinished(a: Artifact) -> list[str]:
    """The points whose rule asks for more samples (a partial artifact's)."""
    return [f"{s.phase}[{s.point_index}]" for s in a.summaries if s.stop == STOP_NOT_FINISHED]
