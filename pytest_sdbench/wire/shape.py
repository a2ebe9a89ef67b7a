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


def decode_mismatch(point: DecodePoint, snapshot: Snapshot) -> str | None:
    return _mismatch(snapshot, PHASE_DECODE, point.batch_size,
                     {"new_tokens": 1, "kv_tokens": point.context_tokens,
                      "draft_tokens": point.draft_depth})
