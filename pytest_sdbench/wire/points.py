"""Points of the sweep. A prefill point is (batch, new tokens, cached prefix); a decode point
is (batch, context, draft depth K, acceptance length). A grid manifest is JSON:

    {"prefill": [{"batch_size": 1, "new_tokens": 64, "cached_prefix_tokens": 0}, ...],
     "decode":  [{"batch_size": 4, "context_tokens": 512, "draft_depth": 3,
                  "acceptance_length": null}, ...]}

Errors name the exact field, e.g. ``decode[3].batch_size: must be >= 1, got 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import typed


class GridError(ValueError):
    """A grid that cannot be collected; the message lists every offending field."""


@dataclass(frozen=True)
class PrefillPoint:
    """One prefill coordinate: B requests, each with new_tokens after a cached prefix."""
    batch_size: int
    new_tokens: int
    cached_prefix_tokens: int


@dataclass(frozen=True)
class DecodePoint:
    """One decode coordinate: B running requests reading context_tokens of KV each, verifying
    draft_depth draft tokens; acceptance_length is the requested AL (null: natural)."""
    batch_size: int
    context_tokens: int
    draft_depth: int
    acceptance_length: float | None = None


@dataclass(frozen=True)
class Grid:
    """The points of a collection, in order."""
    prefill: tuple[PrefillPoint, ...] = ()
    decode: tuple[DecodePoint, ...] = ()

    def __len__(self) -> int:
        return len(self.prefill) + len(self.decode)

    def only(self, phases) -> Grid:
        return Grid(prefill=self.prefill if "prefill" in phases else (),
                    decode=self.decode if "decode" in phases else ())


def _point_errors(grid: Grid) -> list[str]:
    errors = []
    for i, p in enumerate(grid.prefill):
        for name in ("batch_size", "new_tokens"):
            if getattr(p, name) < 1:
                errors.append(f"prefill[{i}].{name}: must be >= 1, got {getattr(p, name)}")
        if p.cached_prefix_tokens < 0:
            errors.append(f"prefill[{i}].cached_prefix_tokens: must be >= 0, "
                          f"got {p.cached_prefix_tokens}")
    for i, d in enumerate(grid.decode):
        for name in ("batch_size", "context_tokens", "draft_depth"):
            if getattr(d, name) < 1:
                errors.append(f"decode[{i}].{name}: must be >= 1, got {getattr(d, name)}")
        al = d.acceptance_length
        if al is not None and not (1.0 <= al <= d.draft_depth + 1):
            errors.append(f"decode[{i}].acceptance_length: must lie in [1, draft_depth+1 = "
                          f"{d.draft_depth + 1}], got {al}")
    for phase, points in (("prefill", grid.prefill), ("decode", grid.decode)):
        seen: dict[object, int] = {}
        for i, point in enumerate(points):
            if point in seen:
                errors.append(f"{phase}[{i}]: duplicates {phase}[{seen[point]}]")
            seen.setdefault(point, i)
    return errors


def parse_grid(data) -> Grid:
    """A Grid from manifest JSON data; raises GridError naming every bad field."""
    try:
        grid = typed.decode(Grid, data)
    except typed.DecodeError as exc:
        raise GridError("invalid grid: " + "; ".join(exc.errors)) from None
    errors = _point_errors(grid)
    if errors:
        raise GridError("invalid grid: " + "; ".join(errors))
    return grid


def grid_digest(grid: Grid) -> str:
    """sha256 of the canonical grid JSON: the identity of what was asked for."""
    return typed.digest(grid)
