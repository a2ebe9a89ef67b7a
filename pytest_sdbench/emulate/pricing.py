"""The price of an emulated step: the SchedulerOutput read as the collector's snapshot reads
a step, looked up in the profile exactly as `sdbench fidelity` prices a step
(fidelity.predict.Interpolator over a serving_records.StepRecord), in the graph mode the
profile's rows of that kind ran at that size.

A step is read per scheduled request, as measure/iteration.py's snapshot reads it
(step_shape.py: StepShape, shape_of). Its graph mode, as vLLM picks it by the step's size:
decode, the mode of the profile's decode rows at the fewest requests at or above its batch
(else at the most); prefill, Interpolator.prefill_mode of its tokens; mixed,
Interpolator.mixed_mode of its scheduled tokens.

A step outside the measured ranges (the interpolator's "off-grid" answers) is priced by the
nearest rows: its coordinates are clamped into the measured range (batch into the measured
batches; then tokens, cached KV and context into what was measured at that batch, or at both
neighbouring batches) and priced there; the step is counted (its record names the category
and the coordinates it was priced at). A prompt longer than the rows measured (a step's
new tokens above the top of its batch's rows: several long prompts admitted at once) is
not clamped down to the top, which would price it as the shorter step: it is priced at the
top and extended along the line through the two highest measured rows (extend_tokens; its
record names both and the tokens asked). A mixed step of more prompt tokens than its lattice
measured, whose prompts the prefill rows measured as they are, is priced from those rows plus
the decodes' share at the lattice's top (_prompts_beside_decodes; its record names the top as
decodes_beside_at): a line through one long prompt's rows priced 7 prompts of 2,048 tokens
beside one decode below the prefill row of those 7 prompts alone (30 against 42 ms, H100,
qwen3-0.6b). What clamping cannot reach (a mixed step whose terms
fall apart) is priced by the rule of a mixed step without rows, then by the nearest
measured point, each said so. The engine never stops on a price.

Pure: the artifact and plain numbers; no vLLM."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from ..fidelity.predict import Interpolator
from ..fidelity.predict_mixed import BASIS_ROWS
from ..fidelity.predict_phases import MeasuredPoint, Priced, interpolate
from ..fidelity.serving_records import StepRecord
from ..wire.contract import (
    DEVICE_CUDA,
    PHASE_DECODE,
    PHASE_IDLE,
    PHASE_MIXED,
    PHASE_PREFILL,
    SOURCE_CUDA_EVENT,
)
from ..wire.model import Artifact
from .outside import extend_tokens, near_batch
from .step_shape import StepShape

BASIS_PHASE_ROWS = "rows"                   # a prefill or decode step, from its phase's rows
BASIS_NEAREST = "nearest measured point"    # nothing else reached it
CLAMPED = "outside: priced at the nearest measured coordinates"


class Unpriceable(ValueError):
    """The profile cannot price an emulation; the message says why, in one line."""


@dataclass(frozen=True)
class PricedStep:
    seconds: float
    kind: str
    graph_mode: str
    basis: str                     # BASIS_PHASE_ROWS, predict_mixed's bases, BASIS_NEAREST
    how: str | None = None
    outside: str | None = None     # the interpolator's category where the step fell outside
    outside_detail: str | None = None
    priced_at: dict | None = None  # the coordinates it was priced at, where clamped
    clamped: tuple[str, ...] = field(default=())


def _record(kind: str, mode: str, shape: StepShape) -> StepRecord:
    """The serving-run record fidelity prices (no time, no queue: the price needs neither)."""
    return StepRecord(native_iteration_id=0, kind=kind, graph_mode=mode, seconds=0.0,
                      prefill_requests=shape.prefill_requests,
                      prefill_tokens=shape.prefill_tokens,
                      prefill_kv_tokens=shape.prefill_kv_tokens,
                      decode_requests=shape.decode_requests,
                      decode_kv_tokens=shape.decode_kv_tokens, draft_tokens=shape.draft_tokens,
                      full_depth_requests=0, accepted_drafts=None,
                      total_scheduled_tokens=shape.total_scheduled_tokens, waiting=0, running=0)


def check_priceable(artifact: Artifact) -> None:
    """Unpriceable unless every step an emulated engine runs can be priced from device-timed
    rows at the profile's K and acceptance length."""
    spec = artifact.speculative
    sources = sorted({o.timing.source for phase in (artifact.prefill, artifact.decode,
                                                    artifact.mixed) for o in phase})
    if artifact.device != DEVICE_CUDA or sources != [SOURCE_CUDA_EVENT]:
        raise Unpriceable(f"device {artifact.device}, timing {', '.join(sources) or 'none'}: "
                          "the profile's rows are host-timed on a CPU; an emulation stands in "
                          "for a device-timed engine (collect the profile on a GPU)")
    if spec.method != "eagle3":
        raise Unpriceable(f"speculative.method {spec.method!r}: the emulated worker drafts "
                          "as EAGLE3 does")
    if not artifact.decode:
        raise Unpriceable("the profile holds no decode rows: no decode step can be priced")
    depths = sorted({o.point.draft_depth for o in artifact.decode})
    if depths != [spec.draft_depth]:
        raise Unpriceable(f"K: the profile's decode rows are at K={depths}, its engine at "
                          f"K={spec.draft_depth}")
    lengths = {o.point.acceptance_length for o in artifact.decode}
    if spec.synthetic_acceptance_length is None or \
            spec.synthetic_acceptance_length not in lengths:
        raise Unpriceable(f"acceptance length {spec.synthetic_acceptance_length}: the decode "
                          f"rows are at {sorted(map(str, lengths))}; the emulation draws at "
                          "the synthetic acceptance length its rows were measured at")
    if not artifact.prefill:
        raise Unpriceable("the profile holds no prefill rows: no prompt can be priced")


class ProfilePrice:
    """Prices StepShapes from one profile (see the module docstring)."""

    def __init__(self, artifact: Artifact, check: bool = True) -> None:
        if check:   # off only to exercise the rule on rows of another kind (tests)
            check_priceable(artifact)
        self.interpolator = Interpolator.from_artifact(artifact)
        self.draft_depth = artifact.speculative.draft_depth
        self.acceptance_length = artifact.speculative.synthetic_acceptance_length
        self.kv_capacity = artifact.kv_capacity
        ranked = sorted(self.interpolator.decode, key=lambda p: p.batch)
        self._decode_modes = [(p.batch, p.graph_mode) for p in ranked]

    @classmethod
    def from_path(cls, path: str | Path) -> ProfilePrice:
        from ..artifact import validate_path
        report = validate_path(path)
        if not report.ok or report.artifact is None:
            raise Unpriceable(f"{path} is not a valid artifact ({len(report.errors)} "
                              f"violation(s); run `sdbench validate {path}`)")
        return cls(report.artifact)

    def __repr__(self) -> str:
        i = self.interpolator
        return (f"ProfilePrice(K={self.draft_depth}, AL={self.acceptance_length}, "
                f"{len(i.prefill)} prefill, {len(i.decode)} decode, {len(i.mixed)} mixed "
                f"points; mixed steps by {i.mixed_basis})")

    # ---- the step's graph mode ------------------------------------------------------------
    def decode_mode(self, batch: int) -> str:
        """The mode of the decode rows at the fewest requests at or above `batch` (vLLM
        picks the graph by the batch's tokens), else at the most."""
        return next((m for b, m in self._decode_modes if b >= batch),
                    self._decode_modes[-1][1])

    def mode(self, shape: StepShape) -> str:
        i = self.interpolator
        if shape.kind == PHASE_DECODE:
            return self.decode_mode(shape.decode_requests)
        found = (i.prefill_mode(shape.total_scheduled_tokens) if shape.kind == PHASE_PREFILL
                 else i.mixed_mode(shape.total_scheduled_tokens))
        return found or self.decode_mode(shape.decode_requests)

    # ---- the price --------------------------------------------------------------------------
    def __call__(self, shape: StepShape) -> PricedStep:
        kind, mode = shape.kind, self.mode(shape)
        if kind == PHASE_IDLE:
            return PricedStep(0.0, kind, mode, BASIS_PHASE_ROWS)
        priced = self.interpolator.price(_record(kind, mode, shape))
        if priced.seconds is not None:
            return PricedStep(priced.seconds, kind, mode, priced.basis or BASIS_PHASE_ROWS,
                              priced.how)
        outside = {"outside": priced.category, "outside_detail": priced.detail}
        if kind == PHASE_DECODE:
            found = self._decode_near(shape.decode_requests, shape.decode_kv_tokens, mode)
        elif kind == PHASE_PREFILL:
            found = self._prefill_near(shape.prefill_requests, shape.prefill_tokens,
                                       shape.prefill_kv_tokens, mode)
        else:
            found = self._mixed_near(shape, mode)
        if found is not None:
            price, at, notes, basis = found
            return PricedStep(price.seconds or 0.0, kind, mode, basis, price.how,
                              priced_at=at, clamped=tuple(notes), **outside)
        point = self._nearest_point(shape, mode)
        return PricedStep(point.seconds, kind, mode, BASIS_NEAREST,
                          f"{point.phase} point {point.point_index}",
                          priced_at={"phase": point.phase, "batch": point.batch,
                                     "tokens": point.tokens, "kv": point.kv,
                                     "graph_mode": point.graph_mode},
                          clamped=(f"nothing measured reaches it: the nearest {point.phase} "
                                   f"point ({point.batch} requests, {point.tokens} tokens, "
                                   f"{point.kv} KV, {point.graph_mode})",), **outside)

    # ---- outside: the nearest measured coordinates ------------------------------------------
    def _decode_near(self, batch: int, kv: float, mode: str):
        """Decode (batch, KV) clamped: the batch into the measured batches, then the context
        a request into what both neighbouring batches measured (else the nearer batch)."""
        points = [p for p in self.interpolator.decode if p.graph_mode == mode]
        if not points or batch < 1:
            return None
        b, context, notes, (lo, hi) = near_batch(points, batch, kv / batch,
                                                  lambda p: (p.kv / p.batch, p.kv / p.batch),
                                                  "decode", "KV tokens a request")
        # whole KV tokens, rounded into the range (between batches each neighbour reads
        # its batch x (kv / b): rounding toward the inside keeps both within their own)
        kv_at = math.floor(b * context) if context >= hi else \
            math.ceil(b * context) if context <= lo else round(b * context)
        price = self.interpolator.price_decode(b, kv_at, mode)
        measured = sorted({p.batch for p in points})
        if price.seconds is None and b not in measured:
            nearer = min(measured, key=lambda x: (abs(x - b), -x))
            kvs = [p.kv for p in points if p.batch == nearer]
            notes.append(f"decode batch {b} not priceable between its neighbours: at "
                         f"{nearer}")
            b, kv_at = nearer, min(max(round(nearer * context), min(kvs)), max(kvs))
            price = self.interpolator.price_decode(b, kv_at, mode)
        if price.seconds is None:
            return None
        return price, {"decode_requests": b, "decode_kv_tokens": kv_at}, notes, \
            BASIS_PHASE_ROWS

    def _prefill_near(self, batch: int, tokens: int, kv: int, mode: str):
        """Prefill (batch, tokens, cached KV) clamped: the batch into the measured batches,
        the tokens into what the uncached rows measured there (and the cached rows, where
        the step reads cached KV), the cached KV up to what they reached."""
        points = [p for p in self.interpolator.prefill if p.graph_mode == mode]
        if not points or batch < 1:
            return None
        plain = [p for p in points if p.kv == 0]
        if not plain:
            return None
        b, t, notes, _ = near_batch(plain, batch, tokens, lambda p: (p.tokens, p.tokens),
                                     "prefill", "prefill tokens")
        t = round(t)
        near = sorted({p.batch for p in plain if p.batch <= b})[-1:] + \
            sorted({p.batch for p in plain if p.batch >= b})[:1]
        kv_at = 0
        if kv > 0:
            kv_at, more = self._cached_near(points, near, t, kv)
            notes += more

        def at(x: int) -> Priced:
            return self.interpolator.price(_record(PHASE_PREFILL, mode, StepShape(
                prefill_requests=b, prefill_tokens=x, prefill_kv_tokens=kv_at,
                total_scheduled_tokens=x)))
        price = at(t)
        if price.seconds is None:
            return None
        where = {"prefill_requests": b, "prefill_tokens": t, "prefill_kv_tokens": kv_at}
        if tokens > t and b in {p.batch for p in plain}:
            measured = [p.tokens for p in plain if p.batch == b]
            price, where = extend_tokens(price, where, at, measured, tokens, notes)
        return price, where, notes, BASIS_PHASE_ROWS

    @staticmethod
    def _cached_near(points: list[MeasuredPoint], batches: list[int], tokens: int,
                     kv: int) -> tuple[int, list[str]]:
        """The cached KV a prefill of `tokens` new tokens is priced at: up to what the
        cached-prefix rows of each neighbouring batch reached at those tokens; none where a
        batch has no cached rows that span them (the tokens stay: a prompt's new tokens
        weigh more than its cached prefix)."""
        reach = float("inf")
        for b in batches:
            curve = [(p.tokens, p.kv) for p in points if p.batch == b and p.kv > 0]
            at = interpolate(curve, tokens)
            if at is None:
                return 0, [f"no cached-prefix rows at batch {b} span {tokens} tokens: {kv} "
                           "cached KV priced as none"]
            reach = min(reach, at)
        kv_at = min(kv, math.floor(reach))
        if kv_at == kv:
            return kv, []
        return kv_at, [f"{kv} cached KV beyond the {reach:g} measured at {tokens} tokens: at "
                       f"{kv_at}"]

    def _mixed_near(self, shape: StepShape, mode: str):
        """A mixed step outside: from the mixed rows with its coordinates clamped (decode
        batch, tokens, the decodes' context, the prompts), else by the rule of a profile
        without mixed rows (one prefill step of all its tokens), clamped as a prefill."""
        i = self.interpolator
        if i.mixed_measured:
            found = self._mixed_rows_near(shape, mode)
            if found is not None:
                return found
        requests = shape.requests
        tokens = shape.prefill_tokens + shape.decode_requests + shape.draft_tokens
        prefill_mode = i.prefill_mode(tokens) or mode
        found = self._prefill_near(requests, tokens, shape.prefill_kv_tokens, prefill_mode)
        if found is None:
            return None
        price, at, notes, _ = found
        basis = i.mixed_basis if not i.mixed_measured else "rule: outside the mixed rows"
        return price, {**at, "as": "one prefill step of all its tokens"}, notes, basis

    def _mixed_rows_near(self, shape: StepShape, mode: str):
        i = self.interpolator
        rows = [r for r in i.lattice if r.graph_mode == mode]
        if not rows or not shape.decode_requests or not shape.prefill_requests:
            return None
        batches = sorted({r.decode_batch for r in rows})
        notes: list[str] = []
        bd = min(batches, key=lambda b: (abs(b - shape.decode_requests), -b)) \
            if not batches[0] <= shape.decode_requests <= batches[-1] \
            else shape.decode_requests
        if bd not in batches:   # between lattice batches: each side's own span must hold T
            bd = min(batches, key=lambda b: (abs(b - bd), -b))
        if bd != shape.decode_requests:
            notes.append(f"decode batch {shape.decode_requests} at the mixed lattice's "
                         f"measured {bd}")
        spans = [r.prefill_tokens for r in rows if r.decode_batch == bd]
        t = min(max(shape.prefill_tokens, min(spans)), max(spans))
        if t != shape.prefill_tokens:
            notes.append(f"{shape.prefill_tokens} prefill tokens outside {min(spans)}-"
                         f"{max(spans)} at decode batch {bd}: at {t}")
        context = shape.decode_kv_tokens / shape.decode_requests
        decode_mode = self.decode_mode(bd)
        near = self._decode_near(bd, bd * context, decode_mode)
        kv_decode = near[1]["decode_kv_tokens"] if near else bd * (i.lattice_context or 0)
        if shape.prefill_tokens > max(spans):
            composed = self._prompts_beside_decodes(shape, bd, kv_decode, max(spans), mode)
            if composed is not None:   # its own notes: the ones above describe the clamping
                return composed[0], composed[1], composed[2], BASIS_ROWS
        prompts, cached = shape.prefill_requests, shape.prefill_kv_tokens
        if (prompts, cached) != (1, 0):
            found = self._prefill_near(prompts, t, cached, i.prefill_mode(t) or mode)
            if found is None or found[1]["prefill_tokens"] != t:
                notes.append(f"{prompts} prompt(s) over {cached} cached KV priced as one "
                             "uncached prompt")
                prompts, cached = 1, 0
            else:
                prompts, cached = found[1]["prefill_requests"], found[1]["prefill_kv_tokens"]

        def at(x: int) -> Priced:
            return i.price_mixed(bd, prompts, x, mode, decode_kv_tokens=kv_decode,
                                 prefill_kv_tokens=cached)
        price = at(t)
        if price.seconds is None:
            return None
        where = {"decode_requests": bd, "decode_kv_tokens": kv_decode,
                 "prefill_requests": prompts, "prefill_tokens": t, "prefill_kv_tokens": cached}
        if shape.prefill_tokens > t:
            price, where = extend_tokens(price, where, at, spans, shape.prefill_tokens, notes)
        return price, where, notes, BASIS_ROWS

    def _prompts_beside_decodes(self, shape: StepShape, decode_batch: int, decode_kv: int,
                                top: int, mode: str) -> tuple[Priced, dict, list[str]] | None:
        """A mixed step of more prompt tokens than the lattice measured (several long prompts
        admitted at once), whose prompts the prefill rows measured as they are: MIXED_RULE's
        terms with the decodes' share read at the lattice's top. The prefill rows' price of
        the step's prompts, plus what the decodes added beside one uncached prompt of `top`
        tokens (the lattice's price there less the prefill rows' price of that prompt; none
        where the two rows' noise leaves less than nothing), at the step's own decodes where
        the lattice prices them, else at `decode_batch` (the nearest it measured).
        Extending the lattice's line instead priced 7 prompts of 2,048 tokens beside one
        decode at 30 ms, where the prefill row of those 7 prompts alone measured 42 (H100,
        qwen3-0.6b). None where the prefill rows do not reach the prompts unclamped."""
        i = self.interpolator
        tokens, cached = shape.prefill_tokens, shape.prefill_kv_tokens
        prompts = self._prefill_near(shape.prefill_requests, tokens, cached,
                                     i.prefill_mode(tokens) or mode)
        alone = self._prefill_near(1, top, 0, i.prefill_mode(top) or mode)
        if prompts is None or prompts[2] or alone is None or alone[2]:
            return None   # a prefill row clamped: not the prompts as they are
        beside = i.price_mixed(shape.decode_requests, 1, top, mode,
                               decode_kv_tokens=shape.decode_kv_tokens)
        notes = [f"{tokens} prefill tokens beyond the lattice's {top}: the prompts from the "
                 "prefill rows, the decodes' share at the top"]
        if beside.seconds is None:   # the decodes outside the lattice: at its nearest batch
            beside = i.price_mixed(decode_batch, 1, top, mode, decode_kv_tokens=decode_kv)
            notes.append(f"decode batch {shape.decode_requests} at the mixed lattice's "
                         f"measured {decode_batch}")
        else:
            decode_batch, decode_kv = shape.decode_requests, shape.decode_kv_tokens
        if beside.seconds is None:
            return None
        decodes = max(0.0, beside.seconds - (alone[0].seconds or 0.0))
        seconds = (prompts[0].seconds or 0.0) + decodes
        how = (f"{shape.prefill_requests} prompt(s) of {tokens} tokens over {cached} cached "
               f"KV from the prefill rows: {1e3 * (prompts[0].seconds or 0.0):.4f} ms; "
               f"{decode_batch} decode(s) beside one prompt at the lattice's top {top}: "
               f"+{1e3 * decodes:.4f} ms")
        where = {"decode_requests": decode_batch, "decode_kv_tokens": decode_kv,
                 **prompts[1], "decodes_beside_at": top}
        return Priced(seconds=seconds, how=how, basis=BASIS_ROWS), where, notes

    def _nearest_point(self, shape: StepShape, mode: str) -> MeasuredPoint:
        i = self.interpolator
        phase = i.decode if shape.kind == PHASE_DECODE else i.prefill or i.decode
        pool = [p for p in phase if p.graph_mode == mode] or phase
        tokens = shape.prefill_tokens if shape.kind == PHASE_PREFILL else \
            shape.total_scheduled_tokens if shape.kind == PHASE_MIXED else 0
        kv = shape.decode_kv_tokens if shape.kind == PHASE_DECODE else shape.prefill_kv_tokens

        def distance(p: MeasuredPoint) -> float:
            return (abs(math.log(max(p.batch, 1) / max(shape.requests, 1)))
                    + abs(math.log((p.tokens + 1) / (tokens + 1)))
                    + abs(math.log((p.kv + 1) / (kv + 1))))
        return min(pool, key=distance)
