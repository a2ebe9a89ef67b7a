"""A mixed step priced from the profile's measured mixed rows (MIXED_RULE), or by the rule
where it has none (MIXED_FALLBACK_RULE): the rows (MixedRow, mixed_rows), their lattice
(lattice_of) and the rule's terms over the prefill and decode prices of predict_phases.py.
RULE, which quotes both texts, has its one home in predict.py.

Pure: reads the artifact (wire types); no engine, no consumer."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ..wire.model import Artifact
from .predict_phases import (
    NO_MODE,
    NO_PHASE,
    MeasuredPoint,
    PhaseInterpolator,
    Priced,
    Unpriced,
    interpolate,
    seconds_of,
    span_of,
)

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

# How a mixed step was priced (Priced.basis): from measured mixed rows, or by the rule.
BASIS_ROWS, BASIS_RULE = "mixed rows", "rule: no mixed rows"
# A mixed step outside its rows (MIXED_RULE), by the coordinate that fell outside.
OFF_DECODE_BATCH, OFF_PREFILL_TOKENS, OFF_GRAPH_EDGE = (
    "off-grid: decode batch", "off-grid: prefill tokens", "off-grid: graph edge")
OFF_DECODE_CONTEXT, OFF_PROMPTS = "off-grid: decodes' context", "off-grid: prompts"


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


class MixedInterpolator(PhaseInterpolator):
    """PhaseInterpolator with the mixed step: from the profile's mixed rows where it has any
    (MIXED_RULE), else by MIXED_FALLBACK_RULE."""

    def __init__(self, points: Sequence[MeasuredPoint], draft_depth: int,
                 acceptance_length: float | None, mixed: Sequence[MixedRow] = ()):
        super().__init__(points, draft_depth, acceptance_length)
        # Mixed rows: where the profile has any, a mixed step is priced from them (at the
        # run's AL, as decode points are) and never by the rule.
        self.mixed_measured = bool(mixed)
        self.mixed = [r for r in mixed if r.acceptance_length == acceptance_length]
        self.lattice, self.lattice_context = lattice_of(self.mixed)

    @property
    def mixed_basis(self) -> str:
        """How this profile prices a mixed step: BASIS_ROWS, or BASIS_RULE without rows."""
        return BASIS_ROWS if self.mixed_measured else BASIS_RULE

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
                    raise Unpriced(OFF_DECODE_CONTEXT, "the decoding requests' KV was not "
                                   "given")
                return self._mixed(decode_requests, decode_kv_tokens, prefill_requests,
                                   prefill_tokens, prefill_kv_tokens, mode)
            return dataclasses.replace(self._prefill(
                decode_requests + prefill_requests,
                prefill_tokens + decode_requests * (1 + self.draft_depth), 0, mode),
                basis=basis)
        except Unpriced as no:
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

    # ---- the mixed rule -----------------------------------------------------------------
    def _mixed(self, decode_batch: int, decode_kv: float, prefill_batch: int, tokens: int,
               cached: int, mode: str) -> Priced:
        """MIXED_RULE: the lattice's base, then the decodes' context and the prompts."""
        if not self.mixed:
            raise Unpriced(NO_PHASE, "the profile has no mixed row at the run's acceptance "
                           "length")
        if not self.lattice:
            raise Unpriced(NO_PHASE, "the profile's mixed rows hold no lattice (no row of "
                           "one uncached prompt)")
        if decode_batch < 1 or prefill_batch < 1:
            raise Unpriced(OFF_DECODE_BATCH, f"{decode_batch} decoding and {prefill_batch} "
                           "prefilling requests: not a mixed step")
        rows = [r for r in self.lattice if r.graph_mode == mode]
        if not rows:
            modes = sorted({r.graph_mode for r in self.lattice})
            raise Unpriced(NO_MODE, f"the step ran {mode}; the profile's mixed lattice rows "
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
                raise Unpriced(category, f"{tokens} prefill tokens outside the "
                               f"{span_of(span(decode_batch))} measured {mode} at decode batch "
                               f"{decode_batch}")
            return got[0], got[1], f"at decode batch {decode_batch}"
        lower = [b for b in batches if b < decode_batch]
        upper = [b for b in batches if b > decode_batch]
        if not lower or not upper:
            raise Unpriced(OFF_DECODE_BATCH, f"decode batch {decode_batch} outside the mixed "
                           f"lattice's decode batches measured {mode}: {batches}")
        b0, b1 = lower[-1], upper[0]
        g0, g1 = read(b0, tokens), read(b1, tokens)
        how = f"between decode batches {b0} and {b1}"
        if g0 is None or g1 is None:
            missing = [b for b, g in ((b0, g0), (b1, g1)) if g is None]
            off = [b for b in missing if not covered_elsewhere(b, tokens)]
            if off:
                raise Unpriced(OFF_PREFILL_TOKENS, f"{tokens} prefill tokens outside the "
                               f"{span_of(span(off[0], every_mode=True))} measured at decode "
                               f"batch {off[0]}")
            # T at a neighbour ran the other graph mode: both at the step's own S instead
            scheduled = decode_batch * per + tokens
            g0, g1 = (read(b0, scheduled - b0 * per), read(b1, scheduled - b1 * per))
            if g0 is None or g1 is None:
                b = b0 if g0 is None else b1
                raise Unpriced(OFF_GRAPH_EDGE, f"{tokens} prefill tokens at decode batch "
                               f"{decode_batch} ({scheduled} scheduled, {mode}): decode batch "
                               f"{b} ran {mode} over {span_of(span(b))} prefill tokens, neither "
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
            at = seconds_of(self._decode(decode_batch, decode_batch * context, decode_mode))
            lattice = seconds_of(self._decode(decode_batch, decode_batch * lattice_context,
                                              decode_mode))
        except Unpriced as no:
            raise Unpriced(OFF_DECODE_CONTEXT, f"the decodes' context {context:g} against "
                           f"the lattice's {lattice_context:g}: {no.detail}") from None
        return at - lattice

    def _mixed_prompts(self, prefill_batch: int, tokens: int, cached: int) -> float:
        """MIXED_RULE 3: Pf(B_p, T, P) - Pf(1, T, 0) from the prefill points."""
        mode = self.prefill_mode(tokens)
        try:
            if mode is None:
                raise Unpriced(NO_PHASE, "the profile has no prefill point")
            step = seconds_of(self._prefill(prefill_batch, tokens, cached, mode))
            lattice = seconds_of(self._prefill(1, tokens, 0, mode))
        except Unpriced as no:
            raise Unpriced(OFF_PROMPTS, f"{prefill_batch} prompt(s) of {tokens} new tokens "
                           f"over {cached} cached against the lattice's one uncached: "
                           f"{no.detail}") from None
        return step - lattice
