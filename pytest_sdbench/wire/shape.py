"""Does a snapshot have exactly the shape of its point? One definition per phase, used by the
collector when it retains a step and by the validator when it reads an artifact."""

from __future__ import annotations

from collections import Counter

from .contract import PHASE_DECODE, PHASE_MIXED, PHASE_PREFILL
from .points import DecodePoint, MixedPoint, PrefillPoint
from .records import RequestSnapshot, Snapshot


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
    return _context_mismatch(snapshot.requests, point.context_tokens, point.draft_depth,
                             step_index)


def _context_mismatch(requests: tuple[RequestSnapshot, ...], context: int, draft_depth: int,
                      step_index: int, kind: str = "") -> str | None:
    """Each decoding request's KV at run step `step_index`: the context grown since step 2
    by what each step computed, at least 1 and at most K+1 tokens a step."""
    grown = step_index - 2
    low = context + grown
    high = context + grown * (draft_depth + 1)
    for i, request in enumerate(requests):
        if request.in_prefill:
            continue
        if not low <= request.kv_tokens <= high:
            want = low if low == high else f"{low}..{high}"
            return (f"requests[{i}]{kind}.kv_tokens is {request.kv_tokens}, step {step_index} "
                    f"of the point (context {context}, K={draft_depth}) reads {want}")
    return None


def mixed_mismatch(point: MixedPoint, snapshot: Snapshot, step_index: int) -> str | None:
    """mixed_step: one step holding exactly the point's two kinds of request. The
    prefilling ones (KV short of their prompt): prefill_batch_size of them, each its whole
    prompt in this step (prefill_tokens new after cached_prefix_tokens, no drafts). The
    decoding ones: decode_batch_size of them, each 1 new token and K drafts, KV in the decode
    range of run step `step_index` (decode_mismatch's). The step's scheduled tokens are
    exactly their sum."""
    requests = snapshot.requests
    if snapshot.phase != PHASE_MIXED:
        return f"phase is {snapshot.phase!r}, the point is 'mixed'"
    ids = Counter(r.request_id for r in requests)
    if len(ids) != len(requests):
        return f"lists a request twice ({sorted(i for i, n in ids.items() if n > 1)})"
    prefilling = sum(r.in_prefill for r in requests)
    decoding = len(requests) - prefilling
    if (decoding, prefilling) != (point.decode_batch_size, point.prefill_batch_size):
        return (f"holds {decoding} decoding and {prefilling} prefilling requests, the point "
                f"{point.decode_batch_size} and {point.prefill_batch_size}")
    wants = {True: {"new_tokens": point.prefill_tokens,
                    "kv_tokens": point.cached_prefix_tokens, "draft_tokens": 0,
                    "prompt_tokens": point.cached_prefix_tokens + point.prefill_tokens},
             False: {"new_tokens": 1, "draft_tokens": point.draft_depth}}
    for i, request in enumerate(requests):
        kind = "prefilling" if request.in_prefill else "decoding"
        for name, value in wants[request.in_prefill].items():
            got = getattr(request, name)
            if got != value:
                return f"requests[{i}] ({kind}).{name} is {got}, the point needs {value}"
    found = _context_mismatch(requests, point.context_tokens, point.draft_depth, step_index,
                              " (decoding)")
    if found:
        return found
    if snapshot.total_scheduled_tokens != point.scheduled_tokens:
        return (f"total_scheduled_tokens is {snapshot.total_scheduled_tokens}, the point's "
                f"decode_batch_size*(1+draft_depth) + prefill_batch_size*prefill_tokens = "
                f"{point.scheduled_tokens}")
    return None
