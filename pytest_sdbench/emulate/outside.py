"""The coordinates of an emulated step outside what its profile measured: clamped into the
measured range (near_batch: the batch into the measured batches, then a value into what was
measured there), or, for more new tokens than measured, extended beyond the top along the
line through the two highest measured rows (extend_tokens). pricing.py says when each is
used.

Pure: plain numbers and fidelity's Priced; no vLLM."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..fidelity.predict_phases import Priced


def extend_tokens(price: Priced, where: dict, price_at: Callable[[int], Priced],
                  measured: list[int], asked: int, notes: list[str]) -> tuple[Priced, dict]:
    """A step of more new tokens than its rows measured (`asked` above the top, where
    `price` was read): the price at the top plus the slope of the line through the two
    highest measured token counts times the tokens beyond it (a prefill's cost grows about
    linearly in its tokens there; clamping would price the shorter step). Unchanged where
    there is no second point, it prices no higher, or the line would fall."""
    top = where["prefill_tokens"]
    below = [x for x in set(measured) if x < top]
    if not below or price.seconds is None:
        return price, where
    lower = max(below)
    base = price_at(lower)
    if base.seconds is None or base.seconds >= price.seconds:
        return price, where
    slope = (price.seconds - base.seconds) / (top - lower)
    extra = slope * (asked - top)
    notes.append(f"{asked} prefill tokens beyond the {top} measured: + {extra * 1e3:.4f} ms "
                 f"along the line through {lower} and {top}")
    extended = dataclasses.replace(price, seconds=price.seconds + extra)
    return extended, {**where, "extended_from": lower, "extended_to": asked}


def near_batch(points: list, batch: int, value: float, span_of, phase: str,
                what: str) -> tuple[int, float, list[str], tuple[float, float]]:
    """(batch, value, notes, the value's measured range there): the batch clamped into the
    points' batches and the value (a request's context, or the step's tokens) clamped into
    what was measured at that batch or, between two measured batches, at both (else at the
    nearer one). span_of(point) is
    the (low, high) that point contributes."""
    batches = sorted({p.batch for p in points})
    notes = []
    b = min(max(batch, batches[0]), batches[-1])
    if b != batch:
        notes.append(f"{phase} batch {batch} outside the measured {batches[0]}-"
                     f"{batches[-1]}: at {b}")

    def span(x: int) -> tuple[float, float]:
        here = [span_of(p) for p in points if p.batch == x]
        return min(s[0] for s in here), max(s[1] for s in here)

    if b in batches:
        lo, hi = span(b)
    else:
        b0 = max(x for x in batches if x < b)
        b1 = min(x for x in batches if x > b)
        (l0, h0), (l1, h1) = span(b0), span(b1)
        lo, hi = max(l0, l1), min(h0, h1)
        if lo > hi:
            nearer = b0 if b - b0 <= b1 - b else b1
            notes.append(f"{phase} batches {b0} and {b1} measured no common range of {what}: "
                         f"at batch {nearer}")
            b = nearer
            lo, hi = span(b)
    clamped = min(max(value, lo), hi)
    if clamped != value:
        notes.append(f"{value:g} {what} outside the {lo:g}-{hi:g} measured at {phase} batch "
                     f"{b}: at {clamped:g}")
    return b, clamped, notes, (lo, hi)
