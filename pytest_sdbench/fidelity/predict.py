"""Our prediction of a step from the profile: a simple interpolation over the artifact's
measured points, stated in RULE below (the one home of its words: served_steps.py and the
reports quote them). No extrapolation: a step outside what was measured is not priced, and
says why (its category and the coordinates that fell outside).

Pure: reads the artifact (wire types) and StepRecords; no engine, no consumer."""

from __future__ import annotations

import dataclasses
import statistics
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from ..wire.contract import PHASE_DECODE, PHASE_MIXED, PHASE_PREFILL
from ..wire.model import Artifact
from .serving_records import UNKNOWN_GRAPH_MODE, StepRecord

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
MIXED_RULE = (
    "Mixed step (B_d decoding requests at mean context C, B_p prompts of T new tokens "
    "together over P cached KV tokens, S = B_d(1 + K) + T scheduled tokens), priced from the "
    "profile's mixed rows at the run's acceptance length, each the median of its repeats at "
    "the shape its step read: "
    "1. base: the lattice (the rows of one uncached prompt, at the context most of them were "
    "measured at: C0) in the step's own graph mode; at a measured decode batch linear in T; "
    "between the two nearest measured decode batches linear in B_d, each read at the same T, "
    "or, where T at one of them ran the other graph mode (the CUDA-graph edge), each at the "
    "step's own S (T_b = S - b(1 + K)); the context the lattice's decodes read is "
    "interpolated alike (C0'). "
    "2. the decodes' context: + D(B_d, C) - D(B_d, C0'), the decode rows' price at batch B_d "
    "(in the step's mode, else the mode most decode points ran). "
    "3. the prompts: + Pf(B_p, T, P) - Pf(1, T, 0), the prefill rows' price of the step's "
    "prompts as they are less that of the lattice row's one uncached prompt (in the mode "
    "the prefill points ran at T tokens). "
    "Exact at a lattice point. A step a term cannot price is not priced, and says which "
    "coordinate fell outside: decode batch, prefill tokens, graph edge, the decodes' "
    "context, prompts.")
MIXED_FALLBACK_RULE = (
    "Where the profile has no mixed rows at all (a profile without the mixed phase), a mixed "
    "step is priced by a rule, labelled so ('rule: no mixed rows'), never as a measured "
    "price: as one prefill step of all its scheduled tokens (prefill tokens plus each "
    "decoding request's 1 + drafts) and all its requests, with the prefilling requests' KV "
    "(vLLM runs it through the same non-uniform path as a prefill; the KV the decoding "
    "requests read is left unpriced, as no measured prefill step reads that much KV for so "
    "few new tokens). On served rate-16 steps it was off by a third.")
RULE = (f"{PHASES_RULE} {MIXED_RULE} {MIXED_FALLBACK_RULE} Nothing is extrapolated: "
        "coordinates outside the measured range are not priced.")

# How a mixed step was priced (Priced.basis): from measured mixed rows, or by the rule.
BASIS_ROWS, BASIS_RULE = "mixed rows", "rule: no mixed rows"
OFF_BATCH, OFF_TOKENS, OFF_CONTEXT, OFF_CACHED = ("off-grid: batch", "off-grid: tokens",
                                                  "off-grid: context", "off-grid: cached KV")
NO_MODE, NO_PHASE = "graph mode not measured", "phase not measured"
# A mixed step outside its rows (MIXED_RULE), by the coordinate that fell outside.
OFF_DECODE_BATCH, OFF_PREFILL_TOKENS, OFF_GRAPH_EDGE = (
    "off-grid: decode batch", "off-grid: prefill tokens", "off-grid: graph edge")
OFF_DECODE_CONTEXT, OFF_PROMPTS = "off-grid: decodes' context", "off-grid: prompts"


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
    basis: str | None = None   # a mixed step's: BASIS_ROWS or BASIS_RULE

    @property
    def priced(self) -> bool:
        return self.seconds is not None


def _value(priced: Priced) -> float:
    """The seconds of a price the rule's own steps made (they raise where they cannot)."""
    if priced.seconds is None:
        raise _Unpriced(priced.category or NO_PHASE, priced.detail or "not priced")
    return priced.seconds


class _Unpriced(Exception):
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


@dataclass(frozen=True)
class MixedRow:
    """One measured mixed point: the median of its repeats' step times, at the shape its
    steps read (the decoding and the prefilling requests of its snapshot), in its graph
    mode."""
    point_index: int
    graph_mode: str
    decode_batch: int          # requests decoding (B_d)
    context: float             # the KV each read, mean over them and over the repeats
    prefill_batch: int         # requests prefilling (B_p)
    prefill_tokens: int        # their new tokens together (T)
    cached_tokens: int         # their cached KV together (P)
    scheduled_tokens: int      # the step's tokens (S)
    seconds: float
    context_tokens: int        # the point's context as asked (the lattice's key)
    acceptance_length: float | None = None


def mixed_rows(artifact: Artifact) -> list[MixedRow]:
    """Every measured mixed point (Artifact.mixed; none before schema 7): the median of its
    repeats, at the shape its first repeat's snapshot read (every repeat has the point's
    shape), the decodes' context averaged over the repeats (under async scheduling a
    settled step's KV follows the drafts accepted before it)."""
    by_index: dict[int, list] = {}
    for o in artifact.mixed:
        by_index.setdefault(o.point_index, []).append(o)
    rows = []
    for index, repeats in sorted(by_index.items()):
        snapshot = repeats[0].snapshot
        decoding = [r for r in snapshot.requests if not r.in_prefill]
        prefilling = [r for r in snapshot.requests if r.in_prefill]
        contexts = [statistics.fmean(r.kv_tokens for r in o.snapshot.requests
                                     if not r.in_prefill) for o in repeats]
        modes = [o.graph_mode for o in repeats]
        point = repeats[0].point
        rows.append(MixedRow(
            point_index=index, graph_mode=max(set(modes), key=modes.count),
            decode_batch=len(decoding), context=statistics.fmean(contexts),
            prefill_batch=len(prefilling), prefill_tokens=sum(r.new_tokens for r in prefilling),
            cached_tokens=sum(r.kv_tokens for r in prefilling),
            scheduled_tokens=snapshot.total_scheduled_tokens,
            seconds=statistics.median(o.timing.seconds for o in repeats),
            context_tokens=point.context_tokens, acceptance_length=point.acceptance_length))
    return rows


def lattice_of(rows: Sequence[MixedRow]) -> tuple[list[MixedRow], int | None]:
    """MIXED_RULE's lattice: the rows of one uncached prompt (B_p = 1, P = 0) at the context
    (as asked) most of them were measured at; a tie goes to the context with more decode
    batches, then to the shorter. (The default mixed grid's lattice: grid.defaults
    derived_mixed_grid, at MIXED_CONTEXT; its columns hold fewer rows.)"""
    single = [r for r in rows if r.prefill_batch == 1 and r.cached_tokens == 0]
    by_context: dict[int, list[MixedRow]] = {}
    for r in single:
        by_context.setdefault(r.context_tokens, []).append(r)
    if not by_context:
        return [], None
    context = max(by_context, key=lambda c: (len(by_context[c]),
                                             len({r.decode_batch for r in by_context[c]}), -c))
    return by_context[context], context


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


def _span(curve: Sequence[tuple[float, float]]) -> str:
    xs = [x for x, _ in curve]
    return f"[{min(xs):g}, {max(xs):g}]" if xs else "[]"


class Interpolator:
    """Prices StepRecords from a profile by RULE."""
    rule = RULE

    def __init__(self, points: Sequence[MeasuredPoint], draft_depth: int,
                 acceptance_length: float | None, mixed: Sequence[MixedRow] = ()):
        self.draft_depth = draft_depth
        self.prefill = [p for p in points if p.phase == PHASE_PREFILL]
        # The decode points at the run's acceptance length (an AL sweep's others are not
        # the serving run's) and K (an artifact holds one K).
        self.decode = [p for p in points if p.phase == PHASE_DECODE
                       and p.acceptance_length == acceptance_length]
        # Mixed rows: where the profile has any, a mixed step is priced from them (at the
        # run's AL, as decode points are) and never by the rule.
        self.mixed_measured = bool(mixed)
        self.mixed = [r for r in mixed if r.acceptance_length == acceptance_length]
        self.lattice, self.lattice_context = lattice_of(self.mixed)

    @classmethod
    def from_artifact(cls, artifact: Artifact) -> Interpolator:
        return cls(profile_points(artifact), artifact.speculative.draft_depth,
                   artifact.speculative.synthetic_acceptance_length, mixed_rows(artifact))

    @property
    def mixed_basis(self) -> str:
        """How this profile prices a mixed step: BASIS_ROWS, or BASIS_RULE without rows."""
        return BASIS_ROWS if self.mixed_measured else BASIS_RULE

    def price(self, step: StepRecord) -> Priced:
        basis = self.mixed_basis if step.kind == PHASE_MIXED else None
        try:
            if step.graph_mode == UNKNOWN_GRAPH_MODE:
                raise _Unpriced(NO_MODE, "the step did not report how it ran")
            if step.kind == PHASE_DECODE:
                return self._decode(step.decode_requests, step.decode_kv_tokens, step.graph_mode)
            if step.kind == PHASE_PREFILL:
                return self._prefill(step.prefill_requests, step.prefill_tokens,
                                     step.prefill_kv_tokens, step.graph_mode)
            if step.kind == PHASE_MIXED and self.mixed_measured:
                return self._mixed(step.decode_requests, step.decode_kv_tokens,
                                   step.prefill_requests, step.prefill_tokens,
                                   step.prefill_kv_tokens, step.graph_mode)
            if step.kind == PHASE_MIXED:
                return dataclasses.replace(self._prefill(
                    step.requests, step.prefill_tokens + step.decode_requests
                    + step.draft_tokens, step.prefill_kv_tokens, step.graph_mode), basis=basis)
            raise _Unpriced(NO_PHASE, f"step kind {step.kind!r}")
        except _Unpriced as no:
            return Priced(category=no.category, detail=no.detail, basis=basis)

    def price_mixed(self, decode_requests: int, prefill_requests: int, prefill_tokens: int,
                    mode: str, *, decode_kv_tokens: float | None = None,
                    prefill_kv_tokens: int = 0) -> Priced:
        """A mixed step from its totals: from the profile's mixed rows where it has any
        (MIXED_RULE; the decoding requests' KV together is then needed), else by the rule
        (MIXED_FALLBACK_RULE: one prefill step of all its requests and scheduled tokens,
        each decoding request's 1 + K among them; uncached prompts), labelled so."""
        basis = self.mixed_basis
        try:
            if self.mixed_measured:
                if decode_kv_tokens is None:
                    raise _Unpriced(OFF_DECODE_CONTEXT, "the decoding requests' KV was not "
                                    "given")
                return self._mixed(decode_requests, decode_kv_tokens, prefill_requests,
                                   prefill_tokens, prefill_kv_tokens, mode)
            return dataclasses.replace(self._prefill(
                decode_requests + prefill_requests,
                prefill_tokens + decode_requests * (1 + self.draft_depth), 0, mode),
                basis=basis)
        except _Unpriced as no:
            return Priced(category=no.category, detail=no.detail, basis=basis)

    def mixed_mode(self, scheduled_tokens: int) -> str | None:
        """The graph mode a mixed step of `scheduled_tokens` runs (vLLM picks it by the
        step's tokens): that of the profile's mixed row of the fewest scheduled tokens at or
        above it, else of the most; without mixed rows, the prefill points' (prefill_mode),
        as the rule prices it as a prefill step."""
        if not self.mixed:
            return self.prefill_mode(scheduled_tokens)
        ranked = sorted(self.mixed, key=lambda r: r.scheduled_tokens)
        return next((r for r in ranked if r.scheduled_tokens >= scheduled_tokens),
                    ranked[-1]).graph_mode

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
        except _Unpriced as no:
            return Priced(category=no.category, detail=no.detail)

    # ---- the rule ---------------------------------------------------------------------
    @staticmethod
    def _in_mode(points: list[MeasuredPoint], mode: str, phase: str) -> list[MeasuredPoint]:
        if not points:
            raise _Unpriced(NO_PHASE, f"the profile has no {phase} point"
                            + (" at the run's acceptance length" if phase == PHASE_DECODE
                               else ""))
        chosen = [p for p in points if p.graph_mode == mode]
        if not chosen:
            modes = sorted({p.graph_mode for p in points})
            raise _Unpriced(NO_MODE, f"the step ran {mode}; the profile's {phase} points "
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
            raise _Unpriced(OFF_BATCH, f"batch {batch} outside the {phase} batches measured "
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
                raise _Unpriced(OFF_TOKENS, f"{tokens} prefill tokens outside the "
                                f"{_span(plain)} measured at batch {b} ({mode}, no prefix)")
            if kv == 0:
                return t0
            cached = [p for p in here if p.kv > 0]
            t1 = interpolate([(p.tokens, p.seconds) for p in cached], tokens)
            reach = interpolate([(p.tokens, p.kv) for p in cached], tokens)
            if t1 is None or reach is None:
                raise _Unpriced(OFF_CACHED, f"{tokens} prefill tokens with {kv} cached KV: "
                                f"the cached-prefix points at batch {b} ({mode}) span "
                                f"{_span([(p.tokens, 0.0) for p in cached])} tokens")
            if kv > reach:
                raise _Unpriced(OFF_CACHED, f"{kv} cached KV tokens beyond the {reach:g} "
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
                raise _Unpriced(OFF_CONTEXT, f"{total:g} KV tokens at batch {b} outside the "
                                f"{_span(curve)} measured ({mode})")
            return y
        return self._across(batch, batches, PHASE_DECODE, mode, at)

    def _mixed(self, decode_batch: int, decode_kv: float, prefill_batch: int, tokens: int,
               cached: int, mode: str) -> Priced:
        """MIXED_RULE: the lattice's base, then the decodes' context and the prompts."""
        if not self.mixed:
            raise _Unpriced(NO_PHASE, "the profile has no mixed row at the run's acceptance "
                            "length")
        if not self.lattice:
            raise _Unpriced(NO_PHASE, "the profile's mixed rows hold no lattice (no row of "
                            "one uncached prompt)")
        if decode_batch < 1 or prefill_batch < 1:
            raise _Unpriced(OFF_DECODE_BATCH, f"{decode_batch} decoding and {prefill_batch} "
                            "prefilling requests: not a mixed step")
        rows = [r for r in self.lattice if r.graph_mode == mode]
        if not rows:
            modes = sorted({r.graph_mode for r in self.lattice})
            raise _Unpriced(NO_MODE, f"the step ran {mode}; the profile's mixed lattice rows "
                            f"ran {', '.join(modes)}")
        base, lattice_context, how = self._mixed_base(rows, decode_batch, tokens, mode)
        how = f"lattice (context {self.lattice_context}) {how}"
        context = decode_kv / decode_batch
        dc = 0.0
        if context != lattice_context:
            dc = self._mixed_context(decode_batch, context, lattice_context, mode)
            how += f"; decodes' context {context:g} against {lattice_context:g}: " \
                   f"{1e3 * dc:+.4f} ms"
        dp = 0.0
        if prefill_batch != 1 or cached != 0:
            dp = self._mixed_prompts(prefill_batch, tokens, cached)
            how += f"; {prefill_batch} prompt(s) over {cached} cached KV: {1e3 * dp:+.4f} ms"
        return Priced(seconds=base + dc + dp, how=how, basis=BASIS_ROWS)

    def _mixed_base(self, rows: list[MixedRow], decode_batch: int, tokens: int,
                    mode: str) -> tuple[float, float, str]:
        """MIXED_RULE 1: the lattice rows (in the step's mode) at (B_d, T): the seconds, the
        context their decodes read, and how."""
        per = 1 + self.draft_depth
        batches = sorted({r.decode_batch for r in rows})

        def read(b: int, t: float) -> tuple[float, float] | None:
            here = [r for r in rows if r.decode_batch == b]
            y = interpolate([(r.prefill_tokens, r.seconds) for r in here], t)
            c = interpolate([(r.prefill_tokens, r.context) for r in here], t)
            return None if y is None or c is None else (y, c)

        def span(b: int, every_mode: bool = False) -> list[tuple[float, float]]:
            here = self.lattice if every_mode else rows
            return [(r.prefill_tokens, 0.0) for r in here if r.decode_batch == b]

        def covered_elsewhere(b: int, t: float) -> bool:
            """T at batch b lies within the lattice's rows of every mode (not this one's):
            it ran the other graph mode there."""
            return interpolate(span(b, every_mode=True), t) is not None

        if decode_batch in batches:
            got = read(decode_batch, tokens)
            if got is None:
                category = (OFF_GRAPH_EDGE if covered_elsewhere(decode_batch, tokens)
                            else OFF_PREFILL_TOKENS)
                raise _Unpriced(category, f"{tokens} prefill tokens outside the "
                                f"{_span(span(decode_batch))} measured {mode} at decode batch "
                                f"{decode_batch}")
            return got[0], got[1], f"at decode batch {decode_batch}"
        lower = [b for b in batches if b < decode_batch]
        upper = [b for b in batches if b > decode_batch]
        if not lower or not upper:
            raise _Unpriced(OFF_DECODE_BATCH, f"decode batch {decode_batch} outside the mixed "
                            f"lattice's decode batches measured {mode}: {batches}")
        b0, b1 = lower[-1], upper[0]
        g0, g1 = read(b0, tokens), read(b1, tokens)
        how = f"between decode batches {b0} and {b1}"
        if g0 is None or g1 is None:
            missing = [b for b, g in ((b0, g0), (b1, g1)) if g is None]
            off = [b for b in missing if not covered_elsewhere(b, tokens)]
            if off:
                raise _Unpriced(OFF_PREFILL_TOKENS, f"{tokens} prefill tokens outside the "
                                f"{_span(span(off[0], every_mode=True))} measured at decode "
                                f"batch {off[0]}")
            # T at a neighbour ran the other graph mode: both at the step's own S instead
            scheduled = decode_batch * per + tokens
            g0, g1 = (read(b0, scheduled - b0 * per), read(b1, scheduled - b1 * per))
            if g0 is None or g1 is None:
                b = b0 if g0 is None else b1
                raise _Unpriced(OFF_GRAPH_EDGE, f"{tokens} prefill tokens at decode batch "
                                f"{decode_batch} ({scheduled} scheduled, {mode}): decode batch "
                                f"{b} ran {mode} over {_span(span(b))} prefill tokens, neither "
                                f"{tokens} nor {scheduled - b * per} (the same scheduled "
                                "tokens)")
            how += f" at the step's {scheduled} scheduled tokens (the graph edge)"
        share = (decode_batch - b0) / (b1 - b0)
        return (g0[0] + (g1[0] - g0[0]) * share, g0[1] + (g1[1] - g0[1]) * share, how)

    def _decode_mode(self, mode: str) -> str:
        """The decode points' mode for a mixed step's context term: the step's, where
        decode points ran it, else the one most of them ran."""
        modes = [p.graph_mode for p in self.decode]
        return mode if mode in modes or not modes else max(set(modes), key=modes.count)

    def _mixed_context(self, decode_batch: int, context: float, lattice_context: float,
                       mode: str) -> float:
        """MIXED_RULE 2: D(B_d, C) - D(B_d, C0') from the decode points."""
        decode_mode = self._decode_mode(mode)
        try:
            at = _value(self._decode(decode_batch, decode_batch * context, decode_mode))
            lattice = _value(self._decode(decode_batch, decode_batch * lattice_context,
                                          decode_mode))
        except _Unpriced as no:
            raise _Unpriced(OFF_DECODE_CONTEXT, f"the decodes' context {context:g} against "
                            f"the lattice's {lattice_context:g}: {no.detail}") from None
        return at - lattice

    def _mixed_prompts(self, prefill_batch: int, tokens: int, cached: int) -> float:
        """MIXED_RULE 3: Pf(B_p, T, P) - Pf(1, T, 0) from the prefill points."""
        mode = self.prefill_mode(tokens)
        try:
            if mode is None:
                raise _Unpriced(NO_PHASE, "the profile has no prefill point")
            step = _value(self._prefill(prefill_batch, tokens, cached, mode))
            lattice = _value(self._prefill(1, tokens, 0, mode))
        except _Unpriced as no:
            raise _Unpriced(OFF_PROMPTS, f"{prefill_batch} prompt(s) of {tokens} new tokens "
                            f"over {cached} cached against the lattice's one uncached: "
                            f"{no.detail}") from None
        return step - lattice
