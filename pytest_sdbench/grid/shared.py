"""What the engines of a K sweep share: a grid with K taken out. A decode point names its K
(an engine runs one), so each K's grid and digest differ; the K-free grid is the same."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..wire.points import DecodePoint, Grid, PrefillPoint


@dataclass(frozen=True)
class DecodeCoordinate:
    """A decode point without its draft depth."""
    batch_size: int
    context_tokens: int
    acceptance_length: float | None = None


@dataclass(frozen=True)
class SharedGrid:
    """A grid with K taken out: prefill points as they are, decode points without K."""
    prefill: tuple[PrefillPoint, ...] = ()
    decode: tuple[DecodeCoordinate, ...] = ()

    def __len__(self) -> int:
        return len(self.prefill) + len(self.decode)


def without_depth(grid: Grid) -> SharedGrid:
    return SharedGrid(grid.prefill, tuple(DecodeCoordinate(d.batch_size, d.context_tokens,
                                                           d.acceptance_length)
                                          for d in grid.decode))


def with_depth(shared: SharedGrid, draft_depth: int) -> Grid:
    """The grid an engine of this K runs for the shared grid."""
    return Grid(shared.prefill, tuple(DecodePoint(d.batch_size, d.context_tokens, draft_depth,
                                                  d.acceptance_length)
                                      for d in shared.decode))


def shared_grid(grids: Sequence[Grid]) -> SharedGrid:
    """The points every grid holds, K taken out, in the first grid's order. A grid derived
    from each engine may hold points of its own (batches at its K's captured sizes, AL K+1);
    those are not shared."""
    first, *rest = [without_depth(g) for g in grids]
    prefill = set(first.prefill).intersection(*(g.prefill for g in rest))
    decode = set(first.decode).intersection(*(g.decode for g in rest))
    return SharedGrid(tuple(p for p in first.prefill if p in prefill),
                      tuple(d for d in first.decode if d in decode))
