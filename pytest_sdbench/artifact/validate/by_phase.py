"""The rules of each phase's observations: a prefill step's prefix seeding (its regime
against its point, verified cache hits), a decode step's acceptance and retained step,
settled_steps' runs (consecutive steps of one run, each context grown by what the step
before computed), and a mixed step's two kinds of request."""

from __future__ import annotations

import itertools
import math

from ...wire.contract import (
    KV_SEED_NONE,
    KV_SEED_REAL,
    KV_SEED_REGIMES,
    MIXED_STEP_INDEX,
    POLICY_SETTLED_STEPS,
    SETTLED_FIRST_STEP,
    SETTLED_STEPS,
    STEADY_STEP_INDEX,
)
from ...wire.model import Artifact, DecodeObservation
from ...wire.shape import decode_mismatch, mixed_mismatch, prefill_mismatch
from .helpers import Err, older_than


def check_prefill(obs, where: str, err: Err, legacy) -> None:
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
    if regime == KV_SEED_NONE and not older_than(legacy, 5) and (
            len(obs.cache_hit_tokens) != obs.point.batch_size or any(obs.cache_hit_tokens)):
        err(f"{where}.cache_hit_tokens: {list(obs.cache_hit_tokens)}; a point without a "
            f"cached prefix is verified as no hit for each of {obs.point.batch_size} requests")
    if regime == KV_SEED_REAL and (len(obs.cache_hit_tokens) != obs.point.batch_size or
                                   any(h != prefix for h in obs.cache_hit_tokens)):
        err(f"{where}.cache_hit_tokens: {list(obs.cache_hit_tokens)}; a real prefix must be "
            f"verified as a hit of {prefix} tokens for each of {obs.point.batch_size} requests")


def check_decode(a: Artifact, obs, where: str, err: Err, legacy) -> None:
    settled = a.measurement_policy.decode == POLICY_SETTLED_STEPS
    k = obs.point.draft_depth
    if settled and not SETTLED_FIRST_STEP <= obs.step_index < SETTLED_FIRST_STEP + SETTLED_STEPS:
        err(f"{where}.step_index: settled_steps retains run steps {SETTLED_FIRST_STEP}.."
            f"{SETTLED_FIRST_STEP + SETTLED_STEPS - 1} (step 1 admits the batch, step 2 is the "
            f"first decode step, a transient), got {obs.step_index}")
    elif not settled and obs.step_index != STEADY_STEP_INDEX:
        err(f"{where}.step_index: the steady step is step {STEADY_STEP_INDEX}, got "
            f"{obs.step_index}")
    else:
        mismatch = decode_mismatch(obs.point, obs.snapshot, obs.step_index)
        if mismatch:
            err(f"{where}.snapshot: {mismatch}")
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


def check_mixed(obs, where: str, err: Err) -> None:
    """mixed_step: the planned run step, exactly the point's two kinds of request
    (wire.shape.mixed_mismatch: the counts, each prefill whole in the step, each decode 1 +
    K at its context, the token sum); its decodes' accepted drafts and its prefills' cache
    hits fit them."""
    point = obs.point
    if obs.step_index != MIXED_STEP_INDEX:
        err(f"{where}.step_index: mixed_step retains run step {MIXED_STEP_INDEX} (the first "
            f"settled step of the decode batch, where the prefills are admitted), got "
            f"{obs.step_index}")
    else:
        mismatch = mixed_mismatch(point, obs.snapshot, obs.step_index)
        if mismatch:
            err(f"{where}.snapshot: {mismatch}")
    accepted = obs.accepted_tokens
    if len(accepted) != point.decode_batch_size:
        err(f"{where}.accepted_tokens: {len(accepted)} entries for decode_batch_size "
            f"{point.decode_batch_size}")
    for j, n in enumerate(accepted):
        if not 0 <= n <= point.draft_depth:
            err(f"{where}.accepted_tokens[{j}]: {n} is outside [0, {point.draft_depth}]")
    prefix, regime = point.cached_prefix_tokens, obs.kv_seed_regime
    if regime not in (KV_SEED_NONE, KV_SEED_REAL) or (prefix == 0) != (regime == KV_SEED_NONE):
        err(f"{where}.kv_seed_regime: {regime!r} does not fit cached_prefix_tokens {prefix}")
    if len(obs.cache_hit_tokens) != point.prefill_batch_size or \
            any(h != prefix for h in obs.cache_hit_tokens):
        err(f"{where}.cache_hit_tokens: {list(obs.cache_hit_tokens)}; each of "
            f"{point.prefill_batch_size} prefills is verified as a hit of {prefix} tokens")


def check_settled_items(observations, err: Err) -> None:
    """settled_steps: a work item retains SETTLED_STEPS consecutive steps of one run, in the
    order of their native IDs, and each step's context is the one before it grown by exactly
    what that step computed: 1 + the drafts it accepted, per request."""
    items: dict[tuple[int, int], list[tuple[int, DecodeObservation]]] = {}
    for i, obs in enumerate(observations):
        items.setdefault((obs.point_index, obs.repeat), []).append((i, obs))
    for (index, repeat), members in sorted(items.items()):
        members.sort(key=lambda m: m[1].step_index)
        steps = [obs.step_index for _, obs in members]
        want = list(range(SETTLED_FIRST_STEP, SETTLED_FIRST_STEP + SETTLED_STEPS))
        where = f"decode: point {index} repeat {repeat}"
        if steps != want:
            err(f"{where}: retains steps {steps}; a work item retains the consecutive steps "
                f"{want}")
            continue
        for (_, before), (j, after) in itertools.pairwise(members):
            if after.native_iteration_id <= before.native_iteration_id or \
                    after.round != before.round:
                err(f"decode[{j}].native_iteration_id: {after.native_iteration_id} (round "
                    f"{after.round}) does not follow step {before.step_index}'s "
                    f"{before.native_iteration_id} (round {before.round}) in one run")
                continue
            problem = _context_step(before, after)
            if problem:
                err(f"decode[{j}].snapshot: {problem}")


def _context_step(before, after) -> str | None:
    """How `after`'s context fails to be `before`'s grown by what `before` computed."""
    accepted = dict(zip((r.request_id for r in before.snapshot.requests),
                        before.accepted_tokens, strict=False))
    for r in after.snapshot.requests:
        prior = next((q for q in before.snapshot.requests if q.request_id == r.request_id),
                     None)
        if prior is None or r.request_id not in accepted:
            return (f"request {r.request_id!r} of step {after.step_index} is not in step "
                    f"{before.step_index}; a work item's steps run one batch")
        want = prior.kv_tokens + prior.new_tokens + accepted[r.request_id]
        if r.kv_tokens != want:
            return (f"request {r.request_id!r} reads {r.kv_tokens} KV tokens at step "
                    f"{after.step_index}; step {before.step_index} read {prior.kv_tokens}, "
                    f"computed {prior.new_tokens} and accepted {accepted[r.request_id]}, so "
                    f"{want}")
    return None
