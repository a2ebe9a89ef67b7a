"""The sweep: the default grids derived from an engine, and grid manifests read from files.
The point types and their rules live in the wire format (wire.points)."""

from ..wire.points import (
    DecodePoint,
    EngineLimits,
    Grid,
    GridError,
    PrefillPoint,
    grid_digest,
    parse_grid,
)
from .defaults import default_grid, derived_grid, load_grid

__all__ = ["DecodePoint", "EngineLimits", "Grid", "GridError", "PrefillPoint", "default_grid",
           "derived_grid", "grid_digest", "load_grid", "parse_grid"]
