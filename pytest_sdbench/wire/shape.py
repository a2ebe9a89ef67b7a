"""Does a snapshot have exactly the shape of its point? One definition, used by the
collector when it retains a step and by the validator when it reads an artifact."""

from __future__ import annotations

from collections import Counter

from .contract import PHASE_DECODE, PHASE_PREFILL
from .points import DecodePoint, PrefillPoint
from .records import Snapshot


def _mismatch(snapshot: Snapshot, phase: str, batch: int, want: dict) -> str | None:
    if snapshot.phase != phase:
        return f"phase is {snapshot.phase!r}, the point is {phase!r}"
    if len(snapshot.requests) != batch:
        return f"holds {len(snapshot.requests)} requests, the point's batch_size is {batch}"
    ids = Counter(r.request_id for r in snapshot.requests)
    if len(ids) != len(snapshot.requests):
        return f"lists a request twice ({sorted(i for i, n in ids.items() if n > 1)})"
    for i, request in enumerate(snapshot.requests):
        for name, value in want.items():
            got = getattr(request, name)
            if got != value:
                return f"requests[{i}].{name} is {got}, the point needs {value}"
    return None


def prefill_mismatch(point: PrefillPoint, snapshot: Snapshot) -> str | None:
    """single_step: the whole prompt in one step, so prompt = cached prefix + new tokens (a
    chunk of a longer prompt is not the point's step)."""
    return _mismatch(snapshot, PHASE_PREFILL, point.batch_size,
                     {"new_tokens": point.new_tokens, "kv_tokens": point.cached_prefix_tokens,
                      "draft_tokens": 0,
                      "prompt_tokens": point.cached_prefix_tokens + point.new_tokens})


def decode_mismatch(point: DecodePoint, snapshot: Snapshot, step_index: int) -> str | None:
    """Run step `step_index` (1-based; step 1 admits the batch, step 2 is the first decode
    step, which reads exactly the point's context) of a decode point: one new token and K
    drafts per request, and a context grown since step 2 by what each step computed, at
    least 1 and at most K+1 tokens a step. The nominal context stays the point's; the
    snapshot holds the context the step really read."""
    found = _mismatch(snapshot, PHASE_DECODE, point.batch_size,
                      {"new_tokens": 1, "draft_tokens": point.draft_depth})
    if found:
        return found
    grown = step_index - 2
    low = point.context_tokens + grown
    high = point.context_tokens + grown * (point.draft_depth + 1)
    for i, request in enumerate(snapshot.requests):
        if not low <= request.kv_tokens <= high:
            want = low if low == high else f"{low}..{high}"
            return (f"requests[{i}].kv_tokens is {request.kv_tokens}, step {step_index} of the "
                    f"point (context {point.context_tokens}, K={point.draft_depth}) reads {want}")
    return None
