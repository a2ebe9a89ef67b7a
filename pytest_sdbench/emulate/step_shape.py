"""A step of the emulated engine as the collector's snapshot reads a step
(measure/iteration.py), the shape that pricing.ProfilePrice prices.

A step is read per scheduled request: its new tokens (drafts excluded), the KV it reads (the
scheduler's num_computed_tokens, less the drafts a step still in flight rejected: the
rejection-corrected snapshot), its drafts; it is prefilling while that KV is short of its
prompt. A step is decode-only, prefill-only or mixed by its requests
(wire.records.Snapshot.phase_of).

Pure: plain numbers; no vLLM."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from ..wire.contract import PHASE_DECODE, PHASE_IDLE, PHASE_MIXED, PHASE_PREFILL


@dataclass(frozen=True)
class StepShape:
    """One step as the collector's snapshot reads it (totals over its requests)."""
    prefill_requests: int = 0
    prefill_tokens: int = 0        # new prompt tokens of the prefilling requests
    prefill_kv_tokens: int = 0     # KV they read (cached prefix, earlier chunks)
    decode_requests: int = 0
    decode_kv_tokens: int = 0      # KV the decoding requests read
    draft_tokens: int = 0          # drafts they verify (-1 placeholders counted)
    total_scheduled_tokens: int = 0

    @property
    def kind(self) -> str:
        kinds = [k for k, n in ((PHASE_PREFILL, self.prefill_requests),
                                (PHASE_DECODE, self.decode_requests)) if n]
        return PHASE_IDLE if not kinds else kinds[0] if len(kinds) == 1 else PHASE_MIXED

    @property
    def requests(self) -> int:
        return self.prefill_requests + self.decode_requests


def shape_of(rows: Iterable[tuple[int, int, int, int]]) -> StepShape:
    """A step's shape from its requests: (prompt tokens, KV read, scheduled tokens with
    drafts, drafts) each."""
    counts = {f.name: 0 for f in dataclasses.fields(StepShape)}
    for prompt, kv, scheduled, drafts in rows:
        side = "prefill" if kv < prompt else "decode"
        counts[f"{side}_requests"] += 1
        counts[f"{side}_kv_tokens"] += kv
        counts["total_scheduled_tokens"] += scheduled
        if side == "prefill":
            counts["prefill_tokens"] += scheduled - drafts
        else:
            counts["draft_tokens"] += drafts
    return StepShape(**counts)
