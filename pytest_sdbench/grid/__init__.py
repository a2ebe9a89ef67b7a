"""The sweep: the default grids derived from an engine, and grid manifests read from files.
The point types and their rules live in the wire format (wire.points)."""

import os
from os import PathLike

from ..wire.points import Grid, GridError, parse_grid
from .defaults import load_grid


def as_grid(grid: object) -> Grid:
    """The grid a fixture is given (sdbench_collect(grid=...)): a Grid, a dict in the
    manifest's own shape ({"prefill": [...], "decode": [...]}, docs/artifact.md), parsed by
    --sdbench-grid's parser, or the path of a manifest file; GridError in one line
    otherwise, naming the field."""
    if isinstance(grid, Grid):
        return grid
    if isinstance(grid, dict):
        return parse_grid(grid)
    if isinstance(grid, (str, PathLike)):
        return load_grid(os.fspath(grid))
    raise GridError(f"grid: expected a Grid, a dict in the manifest's shape "
                    f"({{\"prefill\": [...], \"decode\": [...]}}) or a manifest's path, got "
                    f"{type(grid).__name__}")
