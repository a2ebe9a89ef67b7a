"""What --grid chose, read once before any engine starts (inputs.read_inputs) and handed
down as it is: the grid of each K of the run (a manifest, or a plan's points for that K), or
a rule that derives the grid from the started engine's limits (a consumer's grid, which its
own wing builds). No --grid: the engine's default grid (session.grid_for)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..wire.contract import PHASE_DECODE, collected_phases
from ..wire.points import (
    EngineLimits,
    Grid,
    GridError,
    KnownLimits,
    check_grid_for_mode,
    fit_errors,
)

# A grid derived from the started engine: (its limits, the synthetic acceptance length).
GridRule = Callable[[EngineLimits, "float | None"], Grid]


@dataclass(frozen=True)
class GridChoice:
    source: str                                   # the option's value, as the user gave it
    by_depth: Mapping[int, Grid] = field(default_factory=dict)   # read: one grid per K
    derive: GridRule | None = None                # or derived from the started engine

    def grid(self, draft_depth: int, limits: EngineLimits,
             acceptance_length: float | None) -> Grid:
        """The grid for an engine of this K, these limits and this acceptance length."""
        if self.derive is not None:
            return self.derive(limits, acceptance_length)
        return self.by_depth[draft_depth]


def checked_choice(choice: GridChoice, mode: str, depths: tuple[int, ...],
                   acceptance_length: float | None, limits: KnownLimits, limits_source: str,
                   opt: Callable[[str], str]) -> GridChoice:
    """--grid's choice checked against the run before any engine starts: each grid holds
    points of the mode, its decode points name the run's K and acceptance, and every point
    fits the limits known before the engine starts (a grid the started engine derives fits
    it by construction). GridError names the option, the field and the value."""
    try:
        for grid in choice.by_depth.values():
            check_grid_for_mode(grid, mode)
    except GridError as exc:
        raise GridError(f"{opt('grid')}: {exc}") from None
    if not choice.by_depth:
        return choice
    grid = choice.by_depth[depths[0]]
    phases = collected_phases(mode, bool(grid.mixed))
    decode = grid.decode if PHASE_DECODE in phases else ()
    if len(depths) > 1 and decode:
        # A decode point names its K and an engine runs one K: no engine of the sweep
        # could run every decode point of the manifest.
        raise GridError(f"{opt('k')} {','.join(map(str, depths))} with {opt('grid')}: a K "
                        f"sweep runs one engine per K, but the grid's decode points name "
                        f"their K (decode[0].draft_depth is {decode[0].draft_depth}); give one "
                        f"K, or a grid without decode points")
    if len(depths) == 1:
        (k,) = depths
        for i, d in enumerate(decode):
            if d.draft_depth != k:
                raise GridError(f"{opt('grid')}: decode[{i}].draft_depth is {d.draft_depth}, "
                                f"the engine runs K={k} ({opt('k')})")
            if (acceptance_length is None) != (d.acceptance_length is None):
                raise GridError(f"{opt('grid')}: decode[{i}].acceptance_length is "
                                f"{d.acceptance_length}, so {opt('acceptance-length')} must "
                                f"be {'given' if acceptance_length is None else 'left out'}")
    errors = fit_errors(grid.only(phases), limits)
    if errors:
        how = (f"{opt('vllm-defaults')} drops a preset's limits; " if "preset" in limits_source
               else "") + f"{opt('engine-arg')} sets one"
        raise GridError(f"{opt('grid')}: does not fit the engine ({limits_source}): "
                        + "; ".join(errors) + f" ({how})")
    return choice
