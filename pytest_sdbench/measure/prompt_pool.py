"""The prompt pool of a collection, and where its wall time goes.

Where POOL_CACHE_SHARE of the KV cache holds it, a collection's prompts come from one pool
of distinct prompts: a decode point's B prompts are the first B pool prompts cut to its
context (where the share holds fewer prompts than the widest batch, the pool is that wide,
and a wider decode point takes every pool prompt plus prompts of its own for the rest,
seeded before each of its passes: B - width prompts computed, not B, evicting that much less
of the pool: the H100 run of the consumer's grid, whose pool was narrower than its widest
batch, re-seeded 272 runs when such points seeded all B, 8 with this; plan-grade evidence),
and a cached-prefix prefill point's shared prefix is pool prompt 0 cut to its prefix (+ the
block EAGLE recomputes). One unbooked run of the whole pool before the decode points of each
pass (a pass runs its prefill points first, whose fresh prompts evict) makes its blocks the
cache's newest, computing only what was evicted; the decode points then seed nothing, and
nor do the cached-prefix prefill points (each of them reads pool prompt 0, which keeps it
recent; a seed before each of their measurements cost the H200's plan-grade profile 30 s
of 829, docs/evidence/h200/plan-grade). Every run checks the cache hits the engine reports
(missed_the_cache; a decode run, stopped before its requests finish, reads them from the
step that admitted it: admission_hits): a run whose admission missed is discarded, its
prompts are computed again (only the missing blocks are) and the run is repeated; a second
miss fails the point. Requests of one batch never share a block (distinct pool prompts).
Without the pool (not one prompt fits), each point has prompts of its own, seeded again
before each round's measurement."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..wire.points import Grid

# The pool is used where it takes at most this share of the KV cache's tokens; the rest
# holds one run's own tokens (at most one step's budget, or a decode batch's growth).
# qwen3-0.6b as served on the H200: 64 prompts x 9,204 tokens = 51% of 1,143,792.
POOL_CACHE_SHARE = 0.6


def full_cache_hit(prompt_tokens: int, block_size: int) -> int:
    """Tokens vLLM serves from the prefix cache for a prompt whose every full block is
    cached, with EAGLE: at most prompt - 1 tokens (one is computed for its logits), in whole
    blocks, less the last matched block, which EAGLE recomputes for the draft's hidden
    states (vLLM's single_type_kv_cache_manager)."""
    return max(((prompt_tokens - 1) // block_size - 1) * block_size, 0)


def missed_the_cache(hits: Sequence[int], prompts: Sequence[Sequence[int]],
                     block_size: int) -> bool:
    """A run whose requests were served fewer cached tokens than their prompts' full hit."""
    return any(h < full_cache_hit(len(p), block_size)
               for h, p in zip(hits, prompts, strict=True))


def admitted_kv(steps) -> dict[str, int]:
    """Each scheduled request's prefix-cache hit, as the engine's num_cached_tokens counts
    it: the KV tokens it read in the step that admitted it, by request ID."""
    first: dict[str, int] = {}
    for step in steps:
        for r in step.snapshot.requests:
            first.setdefault(r.request_id, r.kv_tokens)
    return first


def admission_hits(steps, requests: int) -> list[int]:
    """Each request's prefix-cache hit (admitted_kv), in admission order, 0 for one never
    scheduled."""
    first = admitted_kv(steps)
    return [*first.values(), *[0] * (requests - len(first))]


@dataclass(frozen=True)
class PromptPool:
    prompts: tuple[list[int], ...]

    @classmethod
    def fitting(cls, grid: Grid, block_size: int, cache_tokens: int,
                fresh: Callable[[int], list[int]]) -> PromptPool | None:
        """The pool the grid needs (the widest decode batch, a mixed point's among them, the
        longest context or cached prefix + a block), as many of its prompts as
        POOL_CACHE_SHARE of the cache holds (the decode points wider than that seed prompts
        of their own); None where not one prompt fits."""
        prefixes = [p.cached_prefix_tokens + block_size for p in grid.prefill
                    if p.cached_prefix_tokens]
        batches = [(d.batch_size, d.context_tokens) for d in grid.decode] + \
            [(m.decode_batch_size, m.context_tokens) for m in grid.mixed]
        widest = max([b for b, _ in batches] + ([1] if prefixes else []), default=0)
        length = max([c for _, c in batches] + prefixes, default=0)
        width = min(widest, int(POOL_CACHE_SHARE * cache_tokens) // length) if length else 0
        if width < 1:
            return None
        return cls(tuple(fresh(length) for _ in range(width)))

    def covers(self, batch_size: int) -> bool:
        """Whether a decode point of this batch takes all its prompts from the pool."""
        return batch_size <= len(self.prompts)

    def batch(self, batch_size: int, context_tokens: int) -> list[list[int]]:
        """A decode point's pool prompts: the first batch_size (at most the pool's width),
        cut to its context."""
        return [prompt[:context_tokens] for prompt in self.prompts[:batch_size]]

    def prefix(self, tokens: int) -> list[int]:
        """A cached-prefix prefill point's shared prefix: pool prompt 0, cut."""
        return self.prompts[0][:tokens]


@dataclass
class TimeBreakdown:
    """Where a collection's wall time went (host perf_counter seconds, by section)."""
    seconds: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    @contextmanager
    def section(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
            self.count(name)

    def count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
