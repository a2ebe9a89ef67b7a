"""A served prefill priced over a window of steps around it, so that when the engine hands a
step's output on does not move time between the gaps compared.

vLLM's engine core (async scheduling, its batch queue: `vllm/v1/engine/core.py`
`step_with_batch_queue` in vLLM 0.26.0) launches step N+1 before it waits for step N's
output, and the launch runs on the engine core's own thread (the executor calls the worker
there): a step's chunks reach the client at the later of its own end and the next step's
launch. (This module is that reading's one home; it is from vLLM's code and the client's
timings, not from a trace of the server.) Next to a prefill, whose
eager launch takes about as long as the step, the long client gap closes one chunk early
(served_steps.prefill_lag reads it as lag 1), and the chunks after it come closer together
than their steps. A window of WINDOW_GAPS of a decoding request's gaps (two before the chunk
nearest the prefilled request's first chunk, that one, and one after) holds the mixed step
and its neighbours whichever gap each chunk closed, so its length is theirs together.

WINDOW_RULE is the rule; served_steps.py the gaps, the decoding batch and the prices."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..wire.model import Artifact
from . import served_steps as steps
from .predict import Interpolator

WINDOW_GAPS = 4
# the mixed gap (j - lag) must fall inside the window's gaps j - WINDOW_GAPS + 2 .. j + 1
assert WINDOW_GAPS >= max(steps.LAGS) + 2
WINDOW_RULE = (
    "A window is WINDOW_GAPS consecutive gaps of one request decoding while another's "
    "prefill ended (the two before its chunk nearest the prefilled request's first chunk, "
    "that one and the one after), kept only where no other request's prefill window (send "
    "to first chunk) overlaps it; one window a prefilled request (the first decoding "
    "request that gives one). Its price: the gap at the run's prefill lag priced as the "
    "mixed step (served_steps.MIXED_RULE: the decoding requests beside the prompt), the "
    "others as decode steps (served_steps.RULE; the prefilled request decoding in the gaps "
    "after its first chunk). e = price / window - 1, and the same for the mixed gap alone.")


@dataclass(frozen=True)
class MixedWindow:
    seconds: float          # the window as served: WINDOW_GAPS gaps of one decoding request
    price: float            # the profile's price of its steps, together
    mixed_seconds: float    # the mixed gap alone (at the run's prefill lag)
    mixed_price: float


def mixed_windows(interpolator: Interpolator, decode_mode: str,
                  requests: Sequence[steps.ServedRequest]) -> tuple[list[MixedWindow], dict]:
    """The priced window of every prefill alone in its window, and how many prefills gave
    none, by why."""
    chunks = [steps.chunk_times(r) for r in requests]
    per_chunk = steps.tokens_per_chunk(requests)
    prefills = steps.PrefillWindows(requests)
    nearest = steps.nearest_chunks(chunks)
    lag, _ = steps.prefill_lag(chunks, nearest)
    found: dict[int, MixedWindow] = {}
    left_out: dict[int, str] = {}
    for q, r, j in nearest:
        if q in found:
            continue
        times = chunks[r]
        first, last = j - WINDOW_GAPS + 1, j + 1      # the window's chunks, times[first..last]
        if first < 0 or last >= len(times):
            left_out.setdefault(q, "the decoding request's chunks do not span it")
            continue
        if prefills.overlap(times[first], times[last], besides=q):
            left_out[q] = "another prefill overlaps it"
            continue
        window = _priced(interpolator, decode_mode, requests, chunks, per_chunk,
                         (q, r, j - lag), range(first + 1, last + 1))
        if window is None:
            left_out[q] = "a step outside what was measured"
            continue
        found[q] = window
    why: dict[str, int] = {}
    for q, reason in left_out.items():
        if q not in found:
            why[reason] = why.get(reason, 0) + 1
    return list(found.values()), why


def _priced(interpolator: Interpolator, decode_mode: str,
            requests: Sequence[steps.ServedRequest], chunks: Sequence[list[float]],
            per_chunk: Sequence[float], mixed: tuple[int, int, int],
            gaps: range) -> MixedWindow | None:
    """The window's gaps priced: the mixed one (request q's prompt beside the decoding
    requests), the others as decode steps; None where a step is outside the rows."""
    q, r, at = mixed
    times, total, mixed_price = chunks[r], 0.0, 0.0
    for g in gaps:
        mid = (times[g - 1] + times[g]) / 2
        prefilled = frozenset() if g > at else frozenset([q])
        batch, kv = steps.decoding_at(requests, chunks, per_chunk, mid, prefilled)
        if g == at:
            gap = steps.MixedGap(times[g] - times[g - 1], batch, (requests[q].input_tokens,), kv)
            price = steps.price_mixed_gap(interpolator, gap)[1]
        else:
            price = interpolator.price_decode(batch, kv, decode_mode)
        if price.seconds is None:
            return None
        total += price.seconds
        if g == at:
            mixed_price = price.seconds
    return MixedWindow(times[gaps[-1]] - times[gaps[0] - 1], total,
                       times[at] - times[at - 1], mixed_price)


def price_mixed_windows(artifact: Artifact,
                        requests: Sequence[steps.ServedRequest]) -> dict:
    """The windows of a served run priced by the profile (WINDOW_RULE): the figures of the
    windows and of their mixed gaps alone, side by side."""
    interpolator = Interpolator.from_artifact(artifact)
    found, left_out = mixed_windows(interpolator, steps.decode_mode(artifact), requests)
    return {"rule": WINDOW_RULE, "windows": len(found), "left_out": left_out,
            "overall": steps.error_summary([(w.seconds, w.price) for w in found])
            if found else None,
            "mixed_gap_alone": steps.error_summary([(w.mixed_seconds, w.mixed_price)
                                                    for w in found]) if found else None}
