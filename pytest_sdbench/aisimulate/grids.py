"""Grids for the consumer, AISimulate (aisimulate==0.13.0.dev202610270000000085): the grid its
direct FPM interpolation needs, its own planned prefill axis, and the points of a plan it
wrote. Pure: no engine, and no AISimulate import (the plugin's environment never has it); the
consumer's rules are re-implemented here and checked against its own code by
tests/consumer/test_aisimulate_plan.py.

The consumer's coordinates are iteration totals: prefill (batch, total new tokens, total KV
read), decode (batch, total KV read). Ours are per request: prefill (batch, new tokens, cached
prefix), decode (batch, context). A consumer point maps onto ours exactly when its totals
divide by its batch; any other is refused, named.

Spellings of --sdbench-grid (--grid in the CLI):
  aisimulate          the grid its direct interpolation needs for the engine's limits
                      (direct_grid; docs/export.md)
  aisimulate-native   its planner's own prefill new-token axis for the engine's limits
                      (PrefillSamplingProfile, as build_collection_plan freezes it), batch 1
  aisimulate:PATH     the points of its plan: a collection-plan.json whose point_generation
                      froze an explicit manifest, or that benchmark-points manifest itself
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..grid.choice import GridChoice
from ..grid.defaults import read_json
from ..wire import typed
from ..wire.points import (
    DecodePoint,
    EngineLimits,
    Grid,
    GridError,
    PrefillPoint,
    decode_max_tokens,
    parse_grid,
)

CONSUMER_GRID, NATIVE_GRID, PLAN_PREFIX = "aisimulate", "aisimulate-native", "aisimulate:"

# --- The consumer's planner: collector/fpm_forward/config.py ---------------------------------
FPM_MAX_PREFILL_CUDAGRAPH_SIZE = 2048   # its explicit prefill capture limit
FPM_MAX_PREFILL_ISL = 8192              # its new-token limit when no token budget is known


def _powers_of_two_up_to(limit: int) -> tuple[int, ...]:
    values, value = [], 1
    while value <= limit:
        values.append(value)
        value *= 2
    return tuple(values)


def prefill_capture_sizes(max_isl: int, limit: int = FPM_MAX_PREFILL_CUDAGRAPH_SIZE
                          ) -> tuple[int, ...]:
    """Its formal prefill capture axis (_prefill_cudagraph_capture_sizes): 1, 2, 4, a stride
    of 8 to 248, 16 to 512, 32 above, and the exact maximum."""
    top = min(max_isl, limit)
    sizes = [v for v in (1, 2, 4) if v <= top]
    sizes += range(8, min(top + 1, 256), 8)
    if top >= 256:
        sizes += range(256, min(top + 1, 513), 16)
    if top > 512:
        sizes += range(544, top + 1, 32)
    sizes.append(top)
    return tuple(sorted(set(sizes)))


def cudagraph_axis_points(capture_sizes: tuple[int, ...], limit: int) -> tuple[int, ...]:
    """Its new-token axis (_dynamo_cudagraph_axis_points): every capture size C and C+1 within
    the limit, doublings past the largest, and the limit itself."""
    configured = tuple(sorted({s for s in capture_sizes if s >= 1}))
    if not configured:
        return tuple(sorted({*_powers_of_two_up_to(limit), limit}))
    points: set[int] = set()
    for size in configured:
        if size > limit:
            continue
        points.add(size)
        if size < limit:
            points.add(size + 1)
    if configured[-1] <= limit:
        value = configured[-1] * 2
        while value < limit:
            points.add(value)
            value *= 2
    points.add(limit)
    return tuple(sorted(points))


@dataclass(frozen=True)
class PrefillSampling:
    """Its PrefillSamplingProfile: the inputs it gives Dynamo's native prefill grid generator,
    frozen into its plan (options.prefill_sampling, point_generation.prefill_sampling). With
    its explicit capture policy it plans the prefill captures and the new-token axis; with
    the runtime policy the engine's own graphs apply and it plans neither."""
    max_isl: int
    max_batch_size: int | None
    capture_sizes: tuple[int, ...] | None
    new_token_axis_points: tuple[int, ...] | None
    max_kv_read_token_samples: int
    policy: str = "explicit"

    def to_dict(self) -> dict[str, object]:
        """As its to_dict writes it into collection-plan.json."""
        captures, axis = self.capture_sizes, self.new_token_axis_points
        payload: dict[str, object] = {
            "max_isl": self.max_isl, "max_batch_size": self.max_batch_size,
            "max_total_prefill_tokens": self.max_isl,
            "cudagraph_capture_sizes": list(captures) if captures is not None else None,
            "cudagraph_capture_size_count": len(captures) if captures is not None else None,
            "max_cudagraph_capture_size": captures[-1] if captures is not None else None,
            "new_token_axis_points": list(axis) if axis is not None else None,
            "new_token_axis_point_count": len(axis) if axis is not None else None,
            "prefill_max_new_token_samples": max(2, len(axis)) if axis is not None else None,
            "prefill_max_kv_read_token_samples": self.max_kv_read_token_samples,
        }
        if self.policy == "runtime":
            payload["cudagraph_policy"] = "runtime"
        return payload


def prefill_sampling(max_isl: int, max_batch_size: int | None,
                     policy: str = "explicit") -> PrefillSampling:
    """PrefillSamplingProfile.build (its default capture limit). Its planner passes the
    shared token budget as max_isl and max_num_seqs as the batch bound."""
    if max_isl < 2:
        raise GridError(f"the consumer's prefill plan needs max_isl >= 2, got {max_isl}")
    captures = prefill_capture_sizes(max_isl) if policy == "explicit" else None
    axis = cudagraph_axis_points(captures, max_isl) if captures is not None else None
    # Its KV sample cap: zero, a batch-aligned minimum, powers of two in block units and an
    # exact maximum, all below max_isl * batch_upper_bound.
    batch_bound = min(max_isl, max_batch_size or max_isl)
    return PrefillSampling(max_isl, max_batch_size, captures, axis,
                           (max_isl * batch_bound).bit_length() + 2, policy)


def engine_prefill_sampling(limits: EngineLimits) -> PrefillSampling:
    """The consumer's prefill plan for an engine's limits (FPMCollectionOptions with the
    engine's max_num_batched_tokens and max_num_seqs as the shared limits)."""
    return prefill_sampling(limits.max_num_batched_tokens, limits.max_num_seqs)


def native_grid(limits: EngineLimits) -> Grid:
    """aisimulate-native: every total of its planned new-token axis as one request without a
    cached prefix (batch 1: every total maps exactly), where the engine runs it in one step
    (total <= max_model_len - 1). Its batch and KV axes are Dynamo's, chosen at run time
    inside the engine; its own code does not hold them (its plan says 'runtime-determined')."""
    axis = engine_prefill_sampling(limits).new_token_axis_points or ()
    prefill = tuple(PrefillPoint(1, t, 0) for t in axis if t + 1 <= limits.max_model_len)
    return parse_grid(typed.encode(Grid(prefill, ())))


# --- The grid its direct interpolation needs ---------------------------------------------
# Read from its Rust loader (aisimulate/_runtime.abi3.so; the rule probed with its own
# predict calls in tests/consumer): a prefill query (B, T, KV) is answered only from rows of
# the same batch B, either along a token curve (rows of one KV total, whose tokens span T
# inclusively) at its own KV or between two such curves strictly below and above KV
# ("token-first"), or along a KV curve (rows of one token total, spanning KV) at its own T or
# between two such curves around T ("KV-first"); a decode query (B, KV) from batch B's KV curve
# spanning KV (or, off-lattice, two batches of one capture regime). Nothing is extrapolated.

# Per-request new tokens at which a KV curve is measured: enough near the small end for the
# host-bound region, then one every KV_LINE_SPACING tokens, so that KV-first interpolation
# covers every query whose requests' prompts stay KV_LINE_SPACING + a block below
# max_model_len (a curve reaches the longest prefix the engine takes beside its tokens).
KV_LINE_SPACING = 1024
PREFILL_LADDER = (1, 256)
DECODE_LADDER = (512, 2048)


def _capped(values, low: int, high: int) -> list[int]:
    return sorted({v for v in values if low <= v <= high} | ({low, high} if low <= high
                                                             else set()))


def prefill_lines(limits: EngineLimits, batch: int) -> list[int]:
    """Per-request new-token values measured at one batch: 1 and the largest the step budget
    and max_model_len allow (the span of every query), a small ladder, the first count that can
    follow a cached prefix (a block + 1: with EAGLE vLLM recomputes the last matched block),
    every KV_LINE_SPACING tokens, and both sides of the engine's CUDA-graph limit (the largest
    count whose step is captured, and one past it), so that no interpolation interval spans
    two graph modes."""
    top = min(limits.max_num_batched_tokens // batch, limits.max_model_len - 1)
    if top < 1:
        return []
    values = set(PREFILL_LADDER) | {limits.block_size + 1}
    values |= set(range(KV_LINE_SPACING, top + 1, KV_LINE_SPACING))
    if limits.capture_sizes:
        edge = max(limits.capture_sizes) // batch
        values |= {edge, edge + 1}
    return _capped(values, 1, top)


def longest_prefix(limits: EngineLimits, batch: int, new_tokens: int) -> int:
    """The longest cached prefix (whole blocks) beside new_tokens per request: within
    max_model_len and the KV capacity; 0 where a prefix cannot precede them."""
    block = limits.block_size
    if new_tokens <= block:
        return 0
    room = min(limits.max_model_len - 1 - new_tokens,
               limits.kv_tokens // batch - new_tokens - block)
    return max(0, room // block * block)


def decode_contexts(limits: EngineLimits, batch: int, policy: str | None = None) -> list[int]:
    """Contexts measured at one batch: from one block to the longest the engine runs a full
    K-draft retained step at (max_model_len less the run's output and its drafts, the run of
    the decode policy: settled_steps unless a legacy one is named) and the KV capacity holds
    for the batch, with a ladder between."""
    k, block = limits.draft_depth, limits.block_size
    room = decode_max_tokens(k, policy) + k
    top = min(limits.max_model_len - room, limits.kv_tokens // batch - room - block)
    contexts = _capped(DECODE_LADDER, block, top) if top >= block else []
    # re-admitting the cached prompts takes up to 3 blocks a request in one step
    return [c for c in contexts if batch * min(c, 3 * block) <= limits.max_num_batched_tokens]


def direct_grid(limits: EngineLimits, acceptance_length: float | None = None,
                policy: str | None = None) -> Grid:
    """aisimulate: for every batch 1..max_num_seqs, prefill token curves without a cached
    prefix over the whole span (1 .. the budget's share, within max_model_len), each line from
    a block + 1 on also with its longest cached prefix (its KV curve spans 0 .. that maximum),
    and decode KV curves from one block to the longest context. Decode points carry the run's
    synthetic acceptance length (the consumer has no AL axis)."""
    prefill, decode = [], []
    for batch in range(1, limits.max_num_seqs + 1):
        for new in prefill_lines(limits, batch):
            prefill.append(PrefillPoint(batch, new, 0))
            prefix = longest_prefix(limits, batch, new)
            if prefix:
                prefill.append(PrefillPoint(batch, new, prefix))
        decode += [DecodePoint(batch, c, limits.draft_depth, acceptance_length)
                   for c in decode_contexts(limits, batch, policy)]
    return parse_grid(typed.encode(Grid(tuple(prefill), tuple(decode))))


# --- The points of a consumer plan ---------------------------------------------------------

def plan_points(data: object, where: str) -> tuple[dict, str]:
    """The benchmark-points payload of a consumer plan: a collection-plan.json (schema 11)
    whose point_generation froze an explicit manifest, or the manifest itself."""
    if isinstance(data, dict) and data.get("schema_name") == "aic_fpm_collection_plan":
        generation = data.get("point_generation") or {}
        if generation.get("source") != "frozen_explicit_manifest":
            raise GridError(f"{where}: point_generation.source is "
                            f"{generation.get('source')!r}; a native auto grid's points are "
                            "chosen inside Dynamo at run time and the plan holds none; use "
                            f"--grid {CONSUMER_GRID} or {NATIVE_GRID}, or a plan with a frozen "
                            "manifest")
        frozen = (data.get("options") or {}).get("benchmark_points") or {}
        data, where = frozen.get("payload"), f"{where}: options.benchmark_points.payload"
    if not isinstance(data, dict) or not {"prefill", "decode"} <= set(data):
        raise GridError(f"{where}: expected the consumer's benchmark-points manifest "
                        "(schema_version, prefill, decode) or a collection-plan.json")
    return data, where


def _total(point: object, name: str, minimum: int, where: str) -> int:
    value = point.get(name, 0 if name == "total_prefill_tokens" else None) \
        if isinstance(point, dict) else None
    if type(value) is not int or value < minimum:
        raise GridError(f"{where}.{name}: must be an integer >= {minimum}, got {value!r}")
    return value


def map_plan(payload: dict, draft_depth: int, acceptance_length: float | None,
             where: str) -> Grid:
    """Each consumer point as ours, in the plan's order (our prefill[i] is its prefill[i]):
    per-request tokens = totals / batch. Refused, every point named, where a total does not
    divide by the batch (ours are uniform batches) or a decode point has prefill tokens."""
    errors, prefill, decode = [], [], []
    for phase in ("prefill", "decode"):
        points = payload.get(phase)
        if not isinstance(points, list):
            raise GridError(f"{where}.{phase}: expected a list of points")
        for i, point in enumerate(points):
            at = f"{where}.{phase}[{i}]"
            batch = _total(point, "batch_size", 1, at)
            new = _total(point, "total_prefill_tokens", 1 if phase == "prefill" else 0, at)
            kv = _total(point, "total_kv_read_tokens", 0, at)
            shown = (f"{at} (batch_size {batch}, total_prefill_tokens {new}, "
                     f"total_kv_read_tokens {kv})")
            uneven = [n for n, v in (("total_prefill_tokens", new),
                                     ("total_kv_read_tokens", kv)) if v % batch]
            if uneven:
                errors.append(f"{shown}: {' and '.join(uneven)} not a multiple of batch_size "
                              "(our points are uniform batches)")
            elif phase == "prefill":
                prefill.append(PrefillPoint(batch, new // batch, kv // batch))
            elif new:
                errors.append(f"{shown}: a decode point schedules no prefill tokens")
            elif kv == 0:
                errors.append(f"{shown}: a decode point reads a context (total_kv_read_tokens "
                              ">= batch_size)")
            else:
                decode.append(DecodePoint(batch, kv // batch, draft_depth, acceptance_length))
    if errors:
        raise GridError(f"{len(errors)} point(s) of the consumer's plan cannot be ours: "
                        + "; ".join(errors))
    return parse_grid(typed.encode(Grid(tuple(prefill), tuple(decode))))


def plan_grid(path: str | Path, draft_depth: int, acceptance_length: float | None) -> Grid:
    payload, where = plan_points(read_json(path, "consumer plan"),
                                 f"consumer plan {path}")
    return map_plan(payload, draft_depth, acceptance_length, where)


def plan_path(source: str | None) -> str | None:
    return source[len(PLAN_PREFIX):] if source and source.startswith(PLAN_PREFIX) else None


def _native_rule(limits: EngineLimits, acceptance_length: float | None) -> Grid:
    return native_grid(limits)   # prefill points only: no acceptance length


def consumer_choice(source: str, depths: tuple[int, ...],
                    acceptance_length: float | None) -> GridChoice | None:
    """The grid a consumer spelling of --grid chooses, read now (a plan: its points for each
    K of the run) or as the rule that derives it from the started engine's limits; None for
    any other spelling (a manifest). GridError names what a plan holds wrong."""
    if source == NATIVE_GRID:
        return GridChoice(source, derive=_native_rule)
    if source == CONSUMER_GRID:
        return GridChoice(source, derive=direct_grid)
    path = plan_path(source)
    if path is None:
        return None
    return GridChoice(source, by_depth={k: plan_grid(path, k, acceptance_length)
                                        for k in depths})
