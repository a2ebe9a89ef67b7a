"""What --grid chose, read once before any engine starts (inputs.read_inputs) and handed
down as it is: the grid of each K of the run (a manifest, or a plan's points for that K), or
a rule that derives the grid from the started engine's limits (a consumer's grid, which its
own wing builds). No --grid: the engine's default grid (session.grid_for)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..wire.points import EngineLimits, Grid

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
