"""The built-in sweeps and grid manifests read from files."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from ..wire import typed
from ..wire.points import (
    DecodePoint,
    EngineLimits,
    Grid,
    GridError,
    MixedPoint,
    PrefillPoint,
    decode_max_tokens,
    mixed_fit_errors,
    parse_grid,
)


def read_json(path: str | Path, what: str) -> object:
    """A JSON file a grid comes from; GridError names it (`what` and the path) and why not."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise GridError(f"{what} {path}: no such file") from None
    except IsADirectoryError:
        raise GridError(f"{what} {path}: is a directory, not a JSON file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GridError(f"{what} {path}: cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise GridError(f"{what} {path}: not JSON ({exc})") from None


def load_grid(path: str | Path) -> Grid:
    data = read_json(path, "grid manifest")   # read first, then parsed: the walk goes down
    if isinstance(data, dict) and ("kind" in data or "schema_version" in data):
        raise GridError(f"grid manifest {path}: is an artifact (kind {data.get('kind')!r}), "
                        "not a grid manifest; the grid it was collected on is its 'grid' "
                        "field")
    return parse_grid(data)


def default_grid(draft_depth: int, block_size: int, acceptance_lengths=(None,),
                 large: bool = False, max_batched_tokens: int | None = None) -> Grid:
    """The built-in sweep. Cached prefixes are whole KV blocks (two), so that a real prefix
    is a cache hit of exactly that many tokens. Points whose batch would not fit the
    engine's token budget in one step are left out."""
    batches: tuple[int, ...]
    if large:  # a real-width model on a GPU
        batches, news, contexts = (1, 4, 8), (128, 256), (256, 1024)
    else:      # the tiny preset on a CPU
        batches, news, contexts = (1, 4), (64, 256), (128, 512)
    budget = max_batched_tokens or 1 << 62
    prefixes = (0, 2 * block_size)
    prefill = tuple(PrefillPoint(b, n, p) for b, n, p in itertools.product(batches, news, prefixes)
                    if b * n <= budget)
    decode = tuple(DecodePoint(b, c, draft_depth, al)
                   for al, b, c in itertools.product(acceptance_lengths, batches, contexts)
                   if b * c <= budget)
    return parse_grid(typed.encode(Grid(prefill, decode)))


def _log_spaced(low: int, high: int, factor: int) -> list[int]:
    out, value = [], low
    while value <= high:
        out.append(value)
        value *= factor
    return out


def derived_batches(limits: EngineLimits) -> list[int]:
    """Decode batches at every CUDA-graph boundary: a uniform decode step of B requests is
    B*(1+K) tokens and runs in the smallest captured size that holds it, so for each capture
    size the largest B it holds (C, the fullest graph) and C+1 beside it (the first batch
    past that graph), up to max_num_seqs; powers of two with +1 when the engine captures
    nothing (eager)."""
    per_request = limits.draft_depth + 1
    captured = {min(s // per_request, limits.max_num_seqs) for s in limits.capture_sizes
                if s >= per_request}
    if not captured:
        captured = set(_log_spaced(1, limits.max_num_seqs, 2))
    beside = {b + 1 for b in captured if b + 1 <= limits.max_num_seqs}
    return sorted(captured | beside)


def derived_grid(limits: EngineLimits, acceptance_length: float | None = None) -> Grid:
    """The grid derived from the engine as it serves:
    - decode: derived_batches x contexts 256, 1k, 4k, 16k, ... and the longest power of two
      within max_model_len (less room for the run's output), where the batch's KV fits the
      capacity; on CUDA with synthetic acceptance, the engine's AL everywhere plus AL 1
      and K+1 at the context nearest 1k;
    - prefill: batches 1, 4, 16 x new tokens 64, 256, 1k, ... up to the step budget, with a
      cached prefix of 0 and of one share of the context (the new tokens' length, in whole
      blocks)."""
    k, block = limits.draft_depth, limits.block_size
    room = decode_max_tokens(k) + k + block   # the run's output, its drafts, a block
    contexts = [c for c in _log_spaced(256, limits.max_model_len, 4)
                if c + room <= limits.max_model_len]
    longest = 1 << (limits.max_model_len - room).bit_length() - 1   # a power of two
    if contexts and longest > contexts[-1]:
        contexts.append(longest)
    als: tuple[float | None, ...] = (acceptance_length,)
    # The AL range 1..K+1 at one context: 1k, or the nearest when max_model_len is short.
    al_context = min(contexts, key=lambda c: abs(c - 1024), default=None)
    decode = []
    for b in derived_batches(limits):
        for c in contexts:
            if b * (c + room) > limits.kv_tokens or b * min(c, 3 * block) > \
                    limits.max_num_batched_tokens:
                continue
            sweep = (1.0, acceptance_length, float(k + 1)) \
                if limits.synthetic and c == al_context else als
            for al in dict.fromkeys(sweep):
                decode.append(DecodePoint(b, c, k, al))
    prefill = []
    for b in (1, 4, 16):
        if b > limits.max_num_seqs:
            continue
        for n in _log_spaced(64, limits.max_num_batched_tokens // b, 4):
            for prefix in dict.fromkeys((0, (n // block) * block)):
                fits = (prefix + n + 1 <= limits.max_model_len and
                        b * (prefix + n + block) <= limits.kv_tokens and
                        (prefix == 0 or n > block))
                if fits:
                    prefill.append(PrefillPoint(b, n, prefix))
    return parse_grid(typed.encode(Grid(tuple(prefill), tuple(decode))))


# The default mixed grid: what `vllm serve` runs under load is one prompt (sometimes a few)
# admitted beside up to max_num_seqs - 1 running decodes (the served H200 runs: one prompt
# in 82-98% of mixed steps, docs/evidence/h200/served-aisimulate). A lattice over the decode
# batch and the prompt's new tokens at one context (priced bilinearly), and three columns
# that test what the lattice holds fixed: the decodes' context, a cached prefix, the prompts
# split in several.
MIXED_BATCHES = (1, 4, 16, 32)          # + max_num_seqs - 1, the widest a prompt joins
MIXED_CONTEXT = 2048                     # the lattice's context (decode rows hold it too)
MIXED_NEW_TOKENS = (128, 2048, 4096)     # + block+1, the piecewise-graph edge, the top
MIXED_COLUMN_BATCHES = (4, 32)
MIXED_COLUMN_CONTEXTS = (512, 8192)
MIXED_COLUMN_NEW_TOKENS = (128, 2048)
MIXED_SPLITS = ((2, 1024), (4, 512))    # (prompts, new tokens each): 2048 in all
LONGEST_PROMPT = 8192                    # the longest prompt a consumer's case serves


def derived_mixed_grid(limits: EngineLimits, acceptance_length: float | None = None) -> Grid:
    """The mixed points derived from the engine as it serves (wire.points.mixed_fit_errors
    drops what cannot be one step of it): a lattice of decode batches (MIXED_BATCHES and
    max_num_seqs - 1) x one prompt's new tokens (block + 1, 128, both sides of the largest
    CUDA-graph capture size in the step's tokens, 2048, 4096, the most one step admits) at
    MIXED_CONTEXT (or the longest context the engine's length allows); the context column
    (MIXED_COLUMN_CONTEXTS), the cached-prefix column (MIXED_CONTEXT cached) and the split
    column (MIXED_SPLITS) at MIXED_COLUMN_BATCHES x MIXED_COLUMN_NEW_TOKENS."""
    k, block, budget = limits.draft_depth, limits.block_size, limits.max_num_batched_tokens
    per = 1 + k
    context = min(MIXED_CONTEXT, limits.max_model_len // 2)
    edge = max(limits.capture_sizes, default=0)
    batches = sorted({b for b in (*MIXED_BATCHES, limits.max_num_seqs - 1)
                      if 1 <= b < limits.max_num_seqs})
    points: list[MixedPoint] = []
    for b in batches:
        top = min(LONGEST_PROMPT, budget - b * per, limits.max_model_len - 1)
        news = {block + 1, *MIXED_NEW_TOKENS, top}
        if edge:
            news |= {edge - b * per, edge - b * per + 1}
        points += [MixedPoint(b, context, k, 1, n, 0, acceptance_length)
                   for n in sorted(news) if 1 <= n <= top]
    for b, n in itertools.product(MIXED_COLUMN_BATCHES, MIXED_COLUMN_NEW_TOKENS):
        points += [MixedPoint(b, c, k, 1, n, 0, acceptance_length)
                   for c in MIXED_COLUMN_CONTEXTS]
        points.append(MixedPoint(b, context, k, 1, n, (context // block) * block,
                                 acceptance_length))
    for b, (prompts, n) in itertools.product(MIXED_COLUMN_BATCHES, MIXED_SPLITS):
        points.append(MixedPoint(b, context, k, prompts, n, 0, acceptance_length))
    kept = [p for p in dict.fromkeys(points) if not mixed_fit_errors([p], limits)]
    return parse_grid(typed.encode(Grid(mixed=tuple(kept))))
