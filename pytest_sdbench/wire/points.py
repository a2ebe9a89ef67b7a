"""Points of the sweep. A prefill point is (batch, new tokens, cached prefix); a decode point
is (batch, context, draft depth K, acceptance length); a mixed point is a decode batch (its
batch, context, K, acceptance length) and the prefills admitted beside it in one step (their
batch, new tokens, cached prefix). A grid manifest is JSON:

    {"prefill": [{"batch_size": 1, "new_tokens": 64, "cached_prefix_tokens": 0}, ...],
     "decode":  [{"batch_size": 4, "context_tokens": 512, "draft_depth": 3,
                  "acceptance_length": null}, ...],
     "mixed":   [{"decode_batch_size": 4, "context_tokens": 512, "draft_depth": 3,
                  "prefill_batch_size": 1, "prefill_tokens": 256,
                  "cached_prefix_tokens": 0, "acceptance_length": null}, ...]}

(each phase optional).
Errors name the exact field, e.g. ``decode[3].batch_size: must be >= 1, got 0``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from . import typed
from .contract import (
    CUDAGRAPH_NONE,
    GRAPH_EAGER,
    MIXED_STEP_INDEX,
    PHASE_DECODE,
    PHASE_MIXED,
    PHASE_PREFILL,
    PHASES_BY_MODE,
    POLICY_STEADY_STEP,
    SETTLED_FIRST_STEP,
    SETTLED_STEPS,
    STEADY_STEP_INDEX,
    collected_phases,
)
from .identity import IdentityField


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
class MixedPoint:
    """One mixed coordinate, one engine step: decode_batch_size requests decoding at
    context_tokens with draft_depth drafts each (acceptance_length as a decode point's), and
    prefill_batch_size requests prefilling prefill_tokens new tokens each after
    cached_prefix_tokens cached ones, admitted beside them."""
    decode_batch_size: int
    context_tokens: int
    draft_depth: int
    prefill_batch_size: int
    prefill_tokens: int
    cached_prefix_tokens: int = 0
    acceptance_length: float | None = None

    @property
    def scheduled_tokens(self) -> int:
        """The step's tokens: each decoding request's 1 + K, each prefill's new tokens."""
        return (self.decode_batch_size * (1 + self.draft_depth)
                + self.prefill_batch_size * self.prefill_tokens)


Point = PrefillPoint | DecodePoint | MixedPoint


@dataclass(frozen=True)
class Grid:
    """The points of a collection, in order."""
    prefill: tuple[PrefillPoint, ...] = ()
    decode: tuple[DecodePoint, ...] = ()
    mixed: tuple[MixedPoint, ...] = ()

    def __len__(self) -> int:
        return len(self.prefill) + len(self.decode) + len(self.mixed)

    def only(self, phases) -> Grid:
        return Grid(prefill=self.prefill if "prefill" in phases else (),
                    decode=self.decode if "decode" in phases else (),
                    mixed=self.mixed if "mixed" in phases else ())


def point_errors(grid: Grid) -> list[str]:
    """Each point's own range errors and the points listed twice, named relative to the grid
    (prefill[i].field); the validator checks an artifact's grid by them too."""
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
    for i, m in enumerate(grid.mixed):
        for name in ("decode_batch_size", "context_tokens", "draft_depth",
                     "prefill_batch_size", "prefill_tokens"):
            if getattr(m, name) < 1:
                errors.append(f"mixed[{i}].{name}: must be >= 1, got {getattr(m, name)}")
        if m.cached_prefix_tokens < 0:
            errors.append(f"mixed[{i}].cached_prefix_tokens: must be >= 0, "
                          f"got {m.cached_prefix_tokens}")
        al = m.acceptance_length
        if al is not None and not (1.0 <= al <= m.draft_depth + 1):
            errors.append(f"mixed[{i}].acceptance_length: must lie in [1, draft_depth+1 = "
                          f"{m.draft_depth + 1}], got {al}")
    for phase, points in (("prefill", grid.prefill), ("decode", grid.decode),
                          ("mixed", grid.mixed)):
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
    errors = point_errors(grid)
    if errors:
        raise GridError("invalid grid: " + "; ".join(errors))
    return grid


def check_grid_for_mode(grid: Grid, mode: str | None) -> None:
    """A grid with no point of the mode's phases would make a 0/0 'complete' artifact."""
    known = mode if mode is not None and mode in PHASES_BY_MODE else "agg"
    phases = collected_phases(known, bool(grid.mixed))
    if not len(grid.only(phases)):
        raise GridError(f"the grid holds no {' or '.join(phases)} point, so mode "
                        f"{mode or 'agg'} has nothing to measure")


@dataclass(frozen=True)
class EngineLimits:
    """What a started engine allows: the grid derivation and the fit rules read it."""
    draft_depth: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    kv_tokens: int
    capture_sizes: tuple[int, ...]   # CUDA graph capture sizes in tokens (empty: eager)
    synthetic: bool                  # synthetic acceptance (CUDA): an AL per decode point


def engine_limits(identity, kv_capacity, draft_depth: int,
                  synthetic: bool) -> EngineLimits | None:
    """The limits an engine runs under, as its identity (settings, graph mode) and KV
    capacity state them: a started engine's or an artifact's. None where a limit is
    unresolved or not a positive integer (legacy artifacts recorded none). An eager engine
    captures no size."""
    settings = identity.settings
    seqs, budget, max_len = (settings.max_num_seqs.value, settings.max_num_batched_tokens.value,
                             settings.max_model_len.value)
    if any(type(v) is not int or v <= 0 for v in (seqs, budget, max_len)) or \
            min(kv_capacity.block_size, kv_capacity.tokens) <= 0:
        return None
    sizes = settings.cudagraph_capture_sizes.value   # None: unresolved
    eager = identity.cudagraph_mode.value in (CUDAGRAPH_NONE, None)
    return EngineLimits(
        draft_depth=draft_depth, block_size=kv_capacity.block_size, max_num_seqs=seqs,
        max_num_batched_tokens=budget, max_model_len=max_len, kv_tokens=kv_capacity.tokens,
        capture_sizes=() if eager or not isinstance(sizes, tuple) else sizes,
        synthetic=synthetic)


def decode_max_tokens(draft_depth: int, policy: str | None = None) -> int:
    """Output tokens of a decode run: enough for its last retained step (settled_steps; the
    legacy steady_step retained step 2) to verify a full K drafts. After run step s at most
    1 + (s-1)(K+1) tokens are out; step s drafts K only while K+1 more are still to come."""
    last = STEADY_STEP_INDEX if policy == POLICY_STEADY_STEP else \
        SETTLED_FIRST_STEP + SETTLED_STEPS - 1
    return 1 + last * (draft_depth + 1)


def decode_run_tokens(point: DecodePoint, output_tokens: int) -> int:
    """The sequence length a decode run of `output_tokens` reaches: the context, the output
    and the K drafts its last step verifies (what max_model_len must hold)."""
    return point.context_tokens + output_tokens + point.draft_depth


@dataclass(frozen=True)
class KnownLimits:
    """The limits of an engine known before it starts (a preset's oracle limits, the user's
    engine arguments); None: known only once it runs. fit_errors checks what is known."""
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    kv_tokens: int | None = None


def point_label(point: Point) -> str:
    """A point's coordinates as tables, logs and plots print them."""
    if isinstance(point, PrefillPoint):
        return (f"B={point.batch_size} new={point.new_tokens} "
                f"prefix={point.cached_prefix_tokens}")
    al = "natural" if point.acceptance_length is None else f"{point.acceptance_length:g}"
    if isinstance(point, MixedPoint):
        return (f"Bd={point.decode_batch_size} ctx={point.context_tokens} "
                f"K={point.draft_depth} AL={al} + Bp={point.prefill_batch_size} "
                f"new={point.prefill_tokens} prefix={point.cached_prefix_tokens}")
    return f"B={point.batch_size} ctx={point.context_tokens} K={point.draft_depth} AL={al}"


def capture_sizes(field: IdentityField) -> tuple[int, ...] | None:
    """The engine's CUDA graph capture sizes (identity.settings.cudagraph_capture_sizes),
    or None where unresolved."""
    value = field.value if field.resolved else None
    return tuple(int(n) for n in value) if isinstance(value, (list, tuple)) else None


def compiled_shape(point: Point, graph_mode: str,
                   capture_sizes: Sequence[int] | None) -> tuple[str, str, int]:
    """The compiled shape a point's retained step runs (the by_shape warm-up's key): its
    phase, its graph mode and its token count (prefill B x new tokens, decode B x (K+1),
    mixed both), padded up to the next capture size when it ran in a graph, as vLLM pads a
    graph's batch. Without capture sizes the count stays exact (a stricter key, never a
    looser)."""
    if isinstance(point, PrefillPoint):
        phase, tokens = PHASE_PREFILL, point.batch_size * point.new_tokens
    elif isinstance(point, MixedPoint):
        phase, tokens = PHASE_MIXED, point.scheduled_tokens
    else:
        phase, tokens = PHASE_DECODE, point.batch_size * (point.draft_depth + 1)
    sizes = sorted(capture_sizes or ())
    if graph_mode != GRAPH_EAGER and sizes and tokens <= sizes[-1]:
        tokens = sizes[bisect.bisect_left(sizes, tokens)]
    return phase, graph_mode, tokens


def fit_errors(grid: Grid, limits: EngineLimits | KnownLimits,
               decode_tokens: int | None = None, policy: str | None = None) -> list[str]:
    """Every point an engine of these limits cannot run exactly, one message each: a prefill
    point must be one step of whole cached blocks; a decode point must fit max_num_seqs, the
    context length and the KV capacity over its whole run (``decode_tokens`` output tokens,
    at least decode_max_tokens), and its cached re-admission one step's token budget. A
    limit that is None (KnownLimits, before an engine starts) is not checked."""
    block, budget = limits.block_size, limits.max_num_batched_tokens
    seqs, max_len, capacity = limits.max_num_seqs, limits.max_model_len, limits.kv_tokens
    errors = []
    for i, p in enumerate(grid.prefill):
        where = f"prefill[{i}]"
        if seqs is not None and p.batch_size > seqs:
            errors.append(f"{where}.batch_size: {p.batch_size} exceeds max_num_seqs {seqs}")
        if budget is not None and p.batch_size * p.new_tokens > budget:
            errors.append(f"{where}: batch_size*new_tokens = {p.batch_size * p.new_tokens} "
                          f"exceeds max_num_batched_tokens {budget}; the step would be chunked")
        if block is not None and p.cached_prefix_tokens % block:
            errors.append(f"{where}.cached_prefix_tokens: must be a multiple of the KV block "
                          f"size {block} to be an exact cache hit, got {p.cached_prefix_tokens}")
        if block is not None and p.cached_prefix_tokens and p.new_tokens <= block:
            errors.append(f"{where}.new_tokens: a cached prefix needs new_tokens > the KV block "
                          f"size {block} (with EAGLE vLLM recomputes the last matched block), "
                          f"got {p.new_tokens}")
        if max_len is not None and p.cached_prefix_tokens + p.new_tokens + 1 > max_len:
            errors.append(f"{where}: cached_prefix_tokens+new_tokens = "
                          f"{p.cached_prefix_tokens + p.new_tokens} exceeds max_model_len "
                          f"{max_len}")
        need = p.batch_size * (p.cached_prefix_tokens + p.new_tokens + (block or 0))
        if capacity is not None and need > capacity:
            errors.append(f"{where}: the batch needs more KV than the engine holds "
                          f"({capacity} tokens): batch_size*(cached_prefix_tokens+new_tokens"
                          f"+block_size) = {need}")
    for i, d in enumerate(grid.decode):
        where = f"decode[{i}]"
        if seqs is not None and d.batch_size > seqs:
            errors.append(f"{where}.batch_size: {d.batch_size} exceeds max_num_seqs {seqs}")
        output = max(decode_tokens or 0, decode_max_tokens(d.draft_depth, policy))
        if max_len is not None and decode_run_tokens(d, output) > max_len:
            errors.append(f"{where}.context_tokens: {d.context_tokens} leaves no room for the "
                          f"run of {output} output tokens within max_model_len {max_len}")
        need = d.batch_size * (decode_run_tokens(d, output) + (block or 0))
        if capacity is not None and need > capacity:
            errors.append(f"{where}: batch_size*(context+output) needs {need} KV tokens, the "
                          f"engine holds {capacity}")
        if block is not None and budget is not None:
            readmit = d.batch_size * min(d.context_tokens, 3 * block)
            if readmit > budget:
                errors.append(f"{where}.batch_size: re-admitting {d.batch_size} cached prompts "
                              f"takes up to {readmit} tokens in one step, over "
                              f"max_num_batched_tokens {budget}")
    errors += mixed_fit_errors(grid.mixed, limits, decode_tokens)
    return errors


def mixed_run_tokens(point: MixedPoint) -> int:
    """Output tokens of a mixed point's decode batch: enough for its run to pass the mixed
    step (MIXED_STEP_INDEX) and the step after it with a full K drafts."""
    return 1 + (MIXED_STEP_INDEX + 1) * (point.draft_depth + 1)


def mixed_fit_errors(points: Sequence[MixedPoint], limits: EngineLimits | KnownLimits,
                     decode_tokens: int | None = None) -> list[str]:
    """Every mixed point an engine of these limits cannot run as one exact step: the step's
    tokens within one step's budget (a prompt over what is left would wait, or be chunked),
    its requests within max_num_seqs, a cached prefix of whole blocks and more new tokens
    than a block, the lengths within max_model_len, the KV of the whole run within the
    capacity, and the decode batch's cached re-admission within one step's budget."""
    block, budget = limits.block_size, limits.max_num_batched_tokens
    seqs, max_len, capacity = limits.max_num_seqs, limits.max_model_len, limits.kv_tokens
    errors = []
    for i, m in enumerate(points):
        where = f"mixed[{i}]"
        if budget is not None and m.scheduled_tokens > budget:
            errors.append(f"{where}: decode_batch_size*(1+draft_depth) + prefill_batch_size*"
                          f"prefill_tokens = {m.scheduled_tokens} exceeds "
                          f"max_num_batched_tokens {budget}; it would not be one step")
        if seqs is not None and m.decode_batch_size + m.prefill_batch_size > seqs:
            errors.append(f"{where}: decode_batch_size + prefill_batch_size = "
                          f"{m.decode_batch_size + m.prefill_batch_size} exceeds "
                          f"max_num_seqs {seqs}")
        if block is not None and m.cached_prefix_tokens % block:
            errors.append(f"{where}.cached_prefix_tokens: must be a multiple of the KV block "
                          f"size {block} to be an exact cache hit, got {m.cached_prefix_tokens}")
        if block is not None and m.cached_prefix_tokens and m.prefill_tokens <= block:
            errors.append(f"{where}.prefill_tokens: a cached prefix needs prefill_tokens > the "
                          f"KV block size {block} (with EAGLE vLLM recomputes the last matched "
                          f"block), got {m.prefill_tokens}")
        output = max(decode_tokens or 0, mixed_run_tokens(m))
        if max_len is not None:
            if m.cached_prefix_tokens + m.prefill_tokens + 1 > max_len:
                errors.append(f"{where}: cached_prefix_tokens+prefill_tokens = "
                              f"{m.cached_prefix_tokens + m.prefill_tokens} exceeds "
                              f"max_model_len {max_len}")
            if m.context_tokens + output + m.draft_depth > max_len:
                errors.append(f"{where}.context_tokens: {m.context_tokens} leaves no room for "
                              f"the run of {output} output tokens within max_model_len "
                              f"{max_len}")
        need = (m.decode_batch_size * (m.context_tokens + output + m.draft_depth + (block or 0))
                + m.prefill_batch_size * (m.cached_prefix_tokens + m.prefill_tokens
                                          + (block or 0)))
        if capacity is not None and need > capacity:
            errors.append(f"{where}: the step's requests need {need} KV tokens, the engine "
                          f"holds {capacity}")
        if block is not None and budget is not None:
            readmit = m.decode_batch_size * min(m.context_tokens, 3 * block)
            if readmit > budget:
                errors.append(f"{where}.decode_batch_size: re-admitting {m.decode_batch_size} "
                              f"cached prompts takes up to {readmit} tokens in one step, over "
                              f"max_num_batched_tokens {budget}")
    return errors


def grid_digest(grid: Grid) -> str:
    """sha256 of the canonical grid JSON: the identity of what was asked for."""
    return typed.digest(grid)
