"""Prefill-only and decode-only steps priced from the profile's measured points
(PHASES_RULE), and what every price is made of: a price or why there is none (Priced and its
categories) and the piecewise-linear interpolation that never extrapolates. The mixed step:
predict_mixed.py; the whole rule (RULE, its one home) and the pricing of a StepRecord:
predict.py.

Pure: reads the artifact (wire types); no engine, no consumer."""

from __future__ import annotations

import statistics
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from ..wire.contract import PHASE_DECODE, PHASE_PREFILL
from ..wire.model import Artifact

PHASES_RULE = (
    "Each measured point is the median of its repeats, at the totals its step read (batch B, "
    "new prompt tokens T, KV tokens read), and only points that ran in the step's own "
    "CUDA-graph mode are used. Prefill-only step (B, T, cached KV P): at batch B, linear in T "
    "between the measured uncached points (P = 0); with P > 0, linear in P from that value "
    "to the cached-prefix points' curve at the same T (valid up to the KV they read). "
    "Decode-only step (B, KV C): the decode points at the profile's K and acceptance length, "
    "at batch B linear in C. A batch that was not measured: linear in B between the two "
    "nearest measured batches, each priced at the same totals (prefill) or the same mean "
    "context per request (decode).")

OFF_BATCH, OFF_TOKENS, OFF_CONTEXT, OFF_CACHED = ("off-grid: batch", "off-grid: tokens",
                                                  "off-grid: context", "off-grid: cached KV")
NO_MODE, NO_PHASE = "graph mode not measured", "phase not measured"


@dataclass(frozen=True)
class MeasuredPoint:
    phase: str
    point_index: int
    graph_mode: str
    batch: int
    tokens: int            # prefill: total new tokens; decode: 0
    kv: int                # total KV tokens read
    seconds: float         # the median of its repeats
    acceptance_length: float | None = None   # decode: the requested AL


@dataclass(frozen=True)
class Priced:
    """A prediction (seconds), or why there is none (a category and the detail)."""
    seconds: float | None = None
    category: str | None = None
    detail: str | None = None
    how: str | None = None     # same batch, or between batches
    basis: str | None = None   # a mixed step's: predict_mixed's BASIS_ROWS or BASIS_RULE

    @property
    def priced(self) -> bool:
        return self.seconds is not None


def seconds_of(priced: Priced) -> float:
    """The seconds of a price the rule's own steps made (they raise where they cannot)."""
    if priced.seconds is None:
        raise Unpriced(priced.category or NO_PHASE, priced.detail or "not priced")
    return priced.seconds


class Unpriced(Exception):
    """Raised inside the rule where a step cannot be priced: the category and the detail."""

    def __init__(self, category: str, detail: str):
        super().__init__(detail)
        self.category, self.detail = category, detail


def profile_points(artifact: Artifact) -> list[MeasuredPoint]:
    """Every measured point: the median of its repeats' step times, at the totals its first
    repeat's snapshot read (every repeat has the point's shape), in its graph mode."""
    points = []
    for phase in (PHASE_PREFILL, PHASE_DECODE):
        by_index: dict[int, list] = {}
        for o in getattr(artifact, phase):
            by_index.setdefault(o.point_index, []).append(o)
        for index, repeats in sorted(by_index.items()):
            first = repeats[0]
            requests = first.snapshot.requests
            tokens = sum(r.new_tokens for r in requests) if phase == PHASE_PREFILL else 0
            modes = [o.graph_mode for o in repeats]
            points.append(MeasuredPoint(
                phase=phase, point_index=index, graph_mode=max(set(modes), key=modes.count),
                batch=len(requests), tokens=tokens, kv=sum(r.kv_tokens for r in requests),
                seconds=statistics.median(o.timing.seconds for o in repeats),
                acceptance_length=getattr(first.point, "acceptance_length", None)))
    return points


def interpolate(curve: Sequence[tuple[float, float]], x: float) -> float | None:
    """Piecewise linear through (x, y) knots sorted by x; None outside [x0, xn]. Knots
    repeated at one x are averaged."""
    xs, ys = _merged(curve)
    if not xs or x < xs[0] or x > xs[-1]:
        return None
    i = bisect_left(xs, x)
    if xs[i] == x:
        return ys[i]
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _merged(curve: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    by_x: dict[float, list[float]] = {}
    for x, y in curve:
        by_x.setdefault(x, []).append(y)
    xs = sorted(by_x)
    return xs, [statistics.fmean(by_x[x]) for x in xs]


def span_of(curve: Sequence[tuple[float, float]]) -> str:
    xs = [x for x, _ in curve]
    return f"[{min(xs):g}, {max(xs):g}]" if xs else "[]"


class PhaseInterpolator:
    """Prices prefill-only and decode-only steps from a profile's points by PHASES_RULE."""

    def __init__(self, points: Sequence[MeasuredPoint], draft_depth: int,
                 acceptance_length: float | None):
        self.draft_depth = draft_depth
        self.prefill = [p for p in points if p.phase == PHASE_PREFILL]
        # The decode points at the run's acceptance length (an AL sweep's others are not
        # the serving run's) and K (an artifact holds one K).
        self.decode = [p for p in points if p.phase == PHASE_DECODE
                       and p.acceptance_length == acceptance_length]

    def prefill_mode(self, tokens: int) -> str | None:
        """The graph mode the profile's prefill points ran at `tokens` scheduled tokens (the
        mode vLLM picks by a step's token count): that of the fewest measured tokens at or
        above it, else of the most; None without prefill points."""
        if not self.prefill:
            return None
        ranked = sorted(self.prefill, key=lambda p: p.tokens)
        return next((p for p in ranked if p.tokens >= tokens), ranked[-1]).graph_mode

    def price_decode(self, batch: int, kv: int, mode: str) -> Priced:
        """A decode-only step of `batch` requests reading `kv` KV tokens, run `mode`."""
        try:
            return self._decode(batch, kv, mode)
        except Unpriced as no:
            return Priced(category=no.category, detail=no.detail)

    # ---- the rule ---------------------------------------------------------------------
    @staticmethod
    def _in_mode(points: list[MeasuredPoint], mode: str, phase: str) -> list[MeasuredPoint]:
        if not points:
            raise Unpriced(NO_PHASE, f"the profile has no {phase} point"
                           + (" at the run's acceptance length" if phase == PHASE_DECODE
                              else ""))
        chosen = [p for p in points if p.graph_mode == mode]
        if not chosen:
            modes = sorted({p.graph_mode for p in points})
            raise Unpriced(NO_MODE, f"the step ran {mode}; the profile's {phase} points "
                           f"ran {', '.join(modes)}")
        return chosen

    @staticmethod
    def _across(batch: int, batches: list[int], phase: str, mode: str, at) -> Priced:
        """At a measured batch; else linear in B between the nearest measured ones."""
        if batch in batches:
            return Priced(seconds=at(batch), how="same batch")
        lower = [b for b in batches if b < batch]
        upper = [b for b in batches if b > batch]
        if not lower or not upper:
            raise Unpriced(OFF_BATCH, f"batch {batch} outside the {phase} batches measured "
                           f"{mode}: {batches}")
        b0, b1 = lower[-1], upper[0]
        y0, y1 = at(b0), at(b1)
        return Priced(seconds=y0 + (y1 - y0) * (batch - b0) / (b1 - b0),
                      how=f"between batches {b0} and {b1}")

    def _prefill(self, batch: int, tokens: int, kv: int, mode: str) -> Priced:
        points = self._in_mode(self.prefill, mode, PHASE_PREFILL)
        batches = sorted({p.batch for p in points})

        def at(b: int) -> float:
            here = [p for p in points if p.batch == b]
            plain = [(p.tokens, p.seconds) for p in here if p.kv == 0]
            t0 = interpolate(plain, tokens)
            if t0 is None:
                raise Unpriced(OFF_TOKENS, f"{tokens} prefill tokens outside the "
                               f"{span_of(plain)} measured at batch {b} ({mode}, no prefix)")
            if kv == 0:
                return t0
            cached = [p for p in here if p.kv > 0]
            t1 = interpolate([(p.tokens, p.seconds) for p in cached], tokens)
            reach = interpolate([(p.tokens, p.kv) for p in cached], tokens)
            if t1 is None or reach is None:
                raise Unpriced(OFF_CACHED, f"{tokens} prefill tokens with {kv} cached KV: "
                               f"the cached-prefix points at batch {b} ({mode}) span "
                               f"{span_of([(p.tokens, 0.0) for p in cached])} tokens")
            if kv > reach:
                raise Unpriced(OFF_CACHED, f"{kv} cached KV tokens beyond the {reach:g} "
                               f"measured at batch {b}, {tokens} tokens ({mode})")
            share = kv / reach   # convex: exact at both ends (0 and the cached points)
            return t0 * (1 - share) + t1 * share
        return self._across(batch, batches, PHASE_PREFILL, mode, at)

    def _decode(self, batch: int, kv: float, mode: str) -> Priced:
        points = self._in_mode(self.decode, mode, PHASE_DECODE)
        batches = sorted({p.batch for p in points})
        context = kv / batch

        def at(b: int) -> float:
            curve = [(p.kv, p.seconds) for p in points if p.batch == b]
            total = kv if b == batch else b * context
            y = interpolate(curve, total)
            if y is None:
                raise Unpriced(OFF_CONTEXT, f"{total:g} KV tokens at batch {b} outside the "
                               f"{span_of(curve)} measured ({mode})")
            return y
        return self._across(batch, batches, PHASE_DECODE, mode, at)
