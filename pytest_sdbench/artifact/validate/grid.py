"""The grid rules: the digest, the phases, each point's ranges, K and acceptance, and the
fit against the engine's limits or, without them, the KV capacity."""

from __future__ import annotations

import dataclasses

from ...wire.contract import (
    ACCEPTANCE_SYNTHETIC,
    PHASE_DECODE,
    PHASE_MIXED,
    PHASE_PREFILL,
    PHASES,
    collected_phases,
)
from ...wire.model import Artifact
from ...wire.points import Grid, engine_limits, fit_errors, grid_digest, point_errors
from .helpers import V1, Err

# ---- grid --------------------------------------------------------------------------------

def _kv_need(phase: str, point) -> int:
    """KV tokens the batch of a point holds at once, as the collector requires it to fit:
    prefill B*(cached prefix + new tokens); decode B*(context + the step's 1 + K tokens);
    mixed both."""
    if phase == PHASE_PREFILL:
        return point.batch_size * (point.cached_prefix_tokens + point.new_tokens)
    if phase == PHASE_MIXED:
        return (point.decode_batch_size * (point.context_tokens + 1 + point.draft_depth)
                + point.prefill_batch_size * (point.cached_prefix_tokens
                                              + point.prefill_tokens))
    return point.batch_size * (point.context_tokens + 1 + point.draft_depth)


def check_grid(a: Artifact, err: Err, legacy) -> None:
    grid = a.grid
    if a.integrity.grid_digest != grid_digest(grid):
        err(f"integrity.grid_digest: {a.integrity.grid_digest} does not match the grid "
            f"({grid_digest(grid)}); the grid was altered")
    phases = collected_phases(a.mode, bool(grid.mixed))
    for phase in PHASES:
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
    drafting = [(f"decode[{i}]", d) for i, d in enumerate(grid.decode)] + \
        [(f"mixed[{i}]", m) for i, m in enumerate(grid.mixed)]
    for where, d in drafting:
        if d.draft_depth != spec.draft_depth:
            err(f"grid.{where}.draft_depth: {d.draft_depth} differs from "
                f"speculative.draft_depth {spec.draft_depth}; the engine verifies one K")
        if synthetic != (d.acceptance_length is not None):
            err(f"grid.{where}.acceptance_length: {d.acceptance_length} under "
                f"{spec.acceptance_control} acceptance (synthetic needs a requested AL, "
                "natural needs null)")
    # The run's decode output is at least decode_max_tokens, which the fit rules assume (a
    # longer one only needs more room).
    limits = engine_limits(a.identity, a.kv_capacity, spec.draft_depth, synthetic)
    if limits is not None:   # the collector's own fit rules, stricter than the KV need below
        for message in fit_errors(grid, limits, policy=a.measurement_policy.decode):
            err(f"grid.{message}")
        return
    capacity = a.kv_capacity.tokens
    for phase in PHASES:
        for i, point in enumerate(getattr(grid, phase)):
            need = _kv_need(phase, point)
            if need > capacity:
                formula = {PHASE_PREFILL: "batch_size*(cached_prefix_tokens+new_tokens)",
                           PHASE_DECODE: "batch_size*(context_tokens+1+draft_depth)",
                           PHASE_MIXED: "decode_batch_size*(context_tokens+1+draft_depth)"
                           " + prefill_batch_size*(cached_prefix_tokens+prefill_tokens)"
                           }[phase]
                err(f"grid.{phase}[{i}]: needs {formula} = {need} KV tokens, "
                    f"kv_capacity.tokens is {capacity}")

