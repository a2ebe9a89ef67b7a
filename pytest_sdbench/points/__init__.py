"""The sweep: typed points, default grids, strict manifest parsing, the grid digest."""

from .grid import (
                   DecodePoint,
                   Grid,
                   GridError,
                   PrefillPoint,
                   default_grid,
                   grid_digest,
                   load_grid,
                   parse_grid,
)

__all__ = ["DecodePoint", "Grid", "GridError", "PrefillPoint", "default_grid", "grid_digest",
           "load_grid", "parse_grid"]
