"""A served run's requests as vLLM's client recorded them (`vllm bench serve
--save-detailed`: each request's send time, TTFT and chunk gaps), and the profile's own price
of the decode and mixed steps they show. The server is `vllm serve` with no code of this
project inside it, so there are no step records: only the client's timings.

A request's chunks arrive at start + TTFT, then one ITL after another: one chunk a step (a
step delivers a request's bonus token and accepted drafts at once). The gap before a chunk
is the period of the step that made it. It is a decode-only step when no request was being
prefilled in that window (no request's [start, start + TTFT] overlaps it); those gaps are
the ones compared, the others are counted as mixed and left out. For a decode-only gap, at
its midpoint:
- the batch is every request between its first and its last chunk;
- each of them has read its prompt and the tokens delivered so far (its chunks so far x its
  own tokens a chunk, (output - 1) / gaps).
The profile prices that decode step with the in-process fidelity's rule (predict.RULE, in
the graph mode most of its decode points ran in); e = predicted / served gap - 1.

A gap that a prefill window overlaps is a mixed step when a request's prefill ended in it:
that request's first chunk comes from the step that computed its prompt, so it is assigned
to the gap whose closing chunk lies nearest its own (a tie to the later). The step then holds
those prompts (uncached: their whole input) beside the requests decoding at the gap's
midpoint (counted as above, with the KV they read), and the profile prices it as the
in-process fidelity prices a mixed step: from its mixed rows (predict_mixed.MIXED_RULE, in
the graph mode its mixed rows ran at that many scheduled tokens) where it has any, else by
the rule (predict_mixed.MIXED_FALLBACK_RULE, in the mode its prefill points ran at that many
tokens), labelled a rule; the report counts the gaps priced each way and those outside, by
why. A mixed step shows once in the gaps of each request decoding beside it: the figures
count gaps (where steps are estimated, a gap is 1 / its decoding requests of a step). A gap
that a window overlaps with no prefill ending in it (the lag's step after a prefill, a request
waiting, or one prefilled in chunks) is left out.

What a client gap holds beyond the step: the server's output path (detokenizing, streaming)
when it is slower than the step. It is the serving period a user sees, which is what a plan
prices."""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ..wire.contract import PHASE_DECODE
from ..wire.model import Artifact
from .predict import Interpolator
from .predict_mixed import BASIS_ROWS, BASIS_RULE, MIXED_FALLBACK_RULE
from .predict_mixed import MIXED_RULE as PRICING_RULE
from .predict_phases import Priced
from .serving_records import batch_bucket, bucket_label


@dataclass(frozen=True)
class ServedRequest:
    start: float          # the client's send time (its perf_counter, seconds)
    input_tokens: int
    output_tokens: int
    ttft: float
    itls: tuple[float, ...]

    @property
    def e2e(self) -> float:
        return self.ttft + sum(self.itls)

    @property
    def tpot(self) -> float | None:
        return (self.e2e - self.ttft) / (self.output_tokens - 1) if self.output_tokens > 1 \
            else None


def served_requests(result: dict) -> list[ServedRequest]:
    """The requests of a `vllm bench serve --save-detailed` result that succeeded."""
    missing = [k for k in ("start_times", "input_lens", "output_lens", "ttfts", "itls")
               if k not in result]
    if missing:
        raise ValueError(f"the result holds no {', '.join(missing)} (run `vllm bench serve` "
                         "with --save-detailed)")
    errors = result.get("errors") or [""] * len(result["ttfts"])
    return [ServedRequest(float(start), int(i), int(o), float(ttft), tuple(map(float, itl)))
            for start, i, o, ttft, itl, error in zip(
                result["start_times"], result["input_lens"], result["output_lens"],
                result["ttfts"], result["itls"], errors, strict=True)
            if not error and ttft and ttft > 0]


RULE, MIXED_RULE = (part.replace("\n", " ") for part in __doc__.split("\n\n")[1:3])


@dataclass(frozen=True)
class ServedGap:
    seconds: float        # the gap before a chunk: the period of the step that made it
    batch: int            # requests decoding at its midpoint
    kv_tokens: int        # their prompts and delivered tokens, together


@dataclass(frozen=True)
class MixedGap:
    seconds: float        # the gap before a chunk: the period of the mixed step
    decoding: int         # requests decoding at its midpoint
    prompts: tuple[int, ...]   # the input tokens of the requests whose prefill ended in it
    kv_tokens: int = 0    # the decoding requests' prompts and delivered tokens, together


def chunk_times(r: ServedRequest) -> list[float]:
    times = [r.start + r.ttft]
    for itl in r.itls:
        times.append(times[-1] + itl)
    return times


class PrefillWindows:
    """Every request's prefill window, [send, first chunk], sorted by start."""

    def __init__(self, requests: Sequence[ServedRequest]):
        self.windows = sorted((r.start, r.start + r.ttft, i) for i, r in enumerate(requests))
        self.starts = [begin for begin, _, _ in self.windows]
        self.longest = max((end - begin for begin, end, _ in self.windows), default=0.0)

    def overlap(self, lo: float, hi: float, besides: int | None = None) -> bool:
        """Whether any window (but request `besides`'s) overlaps (lo, hi)."""
        first = bisect.bisect_left(self.starts, lo - self.longest)
        return any(end > lo and i != besides for _, end, i in
                   self.windows[first:bisect.bisect_left(self.starts, hi)])


def decode_gaps(requests: Sequence[ServedRequest]) -> tuple[list[ServedGap], int]:
    """The decode-only gaps of a served run, and how many gaps were left out as mixed."""
    chunks = [chunk_times(r) for r in requests]
    windows = PrefillWindows(requests)
    per_chunk = tokens_per_chunk(requests)
    gaps, mixed = [], 0
    for times in chunks:
        for lo, hi in itertools.pairwise(times):
            if windows.overlap(lo, hi):
                mixed += 1
                continue
            batch, kv = decoding_at(requests, chunks, per_chunk, (lo + hi) / 2, frozenset())
            gaps.append(ServedGap(hi - lo, batch, kv))
    return gaps, mixed


def tokens_per_chunk(requests: Sequence[ServedRequest]) -> list[float]:
    return [(r.output_tokens - 1) / len(r.itls) if r.itls else 0.0 for r in requests]


def decoding_at(requests: Sequence[ServedRequest], chunks: Sequence[list[float]],
                per_chunk: Sequence[float], mid: float,
                leave_out: frozenset[int]) -> tuple[int, int]:
    """The requests between their first and last chunk at `mid`, less `leave_out`, and the
    KV they read together: each its prompt and its tokens delivered by then (its chunks so
    far x its own tokens a chunk)."""
    batch, kv = 0, 0.0
    for i, (r, times, tpc) in enumerate(zip(requests, chunks, per_chunk, strict=True)):
        if i not in leave_out and times[0] <= mid < times[-1]:
            batch += 1
            delivered = bisect.bisect_right(times, mid)   # chunks by the midpoint
            kv += r.input_tokens + 1 + (delivered - 1) * tpc
    return batch, round(kv)


LAGS = (0, 1, 2)   # chunks between a prefill step's close and its request's first chunk


def nearest_chunks(chunks: Sequence[list[float]]) -> list[tuple[int, int, int]]:
    """(q, r, j): request q's first chunk lies nearest r's chunk j (a tie to the later), for
    every r decoding when q's first chunk came, but where that is r's first chunk (j = 0:
    it closes no gap)."""
    found = []
    for q, first in enumerate(c[0] for c in chunks):
        for r, times in enumerate(chunks):
            if r == q or not times[0] < first <= times[-1]:
                continue
            j = bisect.bisect_left(times, first)   # times[j - 1] < first <= times[j]
            if first - times[j - 1] < times[j] - first:
                if j == 1:   # nearest r's first chunk, which closes no gap
                    continue
                j -= 1
            found.append((q, r, j))
    return found


def prefill_lag(chunks: Sequence[list[float]],
                nearest: Sequence[tuple[int, int, int]]) -> tuple[int, dict[int, float]]:
    """How many chunks a request's first chunk comes after the step that computed its
    prompt, read from the run: the lag (of LAGS) at which the gaps of the decoding requests
    are longest (median), and those medians in ms by lag. (1 in real vLLM's runs: it hands
    a step's output on after launching the next step, served_windows.py says why; 0 in the
    emulated server's, whose launches take no time.)"""
    medians = {}
    for lag in LAGS:
        seconds = [chunks[r][j - lag] - chunks[r][j - lag - 1] for _, r, j in nearest
                   if j - lag >= 1]
        if seconds:
            medians[lag] = 1e3 * statistics.median(seconds)
    return max(medians, key=lambda lag: medians[lag], default=0), medians


def mixed_gaps(requests: Sequence[ServedRequest]) -> tuple[list[MixedGap], int, dict]:
    """The gaps a prefill window overlaps that are mixed steps (a request's prefill ended in
    them), how many such gaps held none (left out), and the prefill lag read from the run
    (prefill_lag: the lag, and the median gap in ms by lag)."""
    chunks = [chunk_times(r) for r in requests]
    per_chunk = tokens_per_chunk(requests)
    windows = PrefillWindows(requests)
    nearest = nearest_chunks(chunks)
    lag, medians = prefill_lag(chunks, nearest)
    ended: dict[tuple[int, int], list[int]] = {}   # (request, closing chunk): prefilled ones
    for q, r, j in nearest:
        if j - lag >= 1:
            ended.setdefault((r, j - lag), []).append(q)
    gaps, waiting = [], 0
    for r, times in enumerate(chunks):
        for j in range(1, len(times)):
            lo, hi = times[j - 1], times[j]
            if not windows.overlap(lo, hi):
                continue
            prefilled = ended.get((r, j))
            if not prefilled:
                waiting += 1
                continue
            decoding, kv = decoding_at(requests, chunks, per_chunk, (lo + hi) / 2,
                                       frozenset(prefilled))
            gaps.append(MixedGap(hi - lo, decoding,
                                 tuple(requests[q].input_tokens for q in prefilled), kv))
    return gaps, waiting, {"lag_chunks": lag, "median_gap_ms_by_lag": medians}


def ttft_parts(requests: Sequence[ServedRequest]) -> dict:
    """Each request's TTFT in three parts, by the client's clock, for the requests whose
    prefill step shows in another request's gaps (at the run's prefill lag; the first such
    request's): from its send to that step's start (the server's frontend and the
    scheduler's admission), the step itself (what a profile row prices), and from the
    step's end to its first chunk (the lag's steps and the output path). Medians in ms; the
    requests whose prefill step shows in no other request's gaps are counted (unread)."""
    chunks = [chunk_times(r) for r in requests]
    nearest = nearest_chunks(chunks)
    lag, _ = prefill_lag(chunks, nearest)
    parts: dict[int, tuple[float, float, float]] = {}
    for q, r, j in nearest:
        end = j - lag
        if end >= 1 and q not in parts:
            times = chunks[r]
            parts[q] = (times[end - 1] - requests[q].start, times[end] - times[end - 1],
                        chunks[q][0] - times[end])
    if not parts:
        return {"requests": 0, "unread": len(requests)}
    column = list(zip(*parts.values(), strict=True))
    return {"requests": len(parts), "unread": len(requests) - len(parts), "lag_chunks": lag,
            "ttft_ms": 1e3 * statistics.median(requests[q].ttft for q in parts),
            "before_step_ms": 1e3 * statistics.median(column[0]),
            "prefill_step_ms": 1e3 * statistics.median(column[1]),
            "after_step_ms": 1e3 * statistics.median(column[2])}


def decode_mode(artifact: Artifact) -> str:
    modes = [o.graph_mode for o in artifact.decode]
    return max(set(modes), key=modes.count)


def error_summary(rows: list[tuple[float, float]]) -> dict:
    errors = [p / s - 1 for s, p in rows]
    return {"gaps": len(rows),
            "served_median_ms": 1e3 * statistics.median(s for s, _ in rows),
            "predicted_median_ms": 1e3 * statistics.median(p for _, p in rows),
            "bias": statistics.median(errors),
            "median_abs_error": statistics.median(abs(e) for e in errors)}


def price_served_steps(artifact: Artifact, requests: Sequence[ServedRequest]) -> dict:
    """Every decode-only gap priced by the profile: the figures overall and by batch."""
    interpolator = Interpolator.from_artifact(artifact)
    mode = decode_mode(artifact)
    gaps, mixed = decode_gaps(requests)
    priced: dict[tuple[int, int], list[tuple[float, float]]] = {}
    unpriced: dict[str, int] = {}
    for gap in gaps:
        price = interpolator.price_decode(gap.batch, gap.kv_tokens, mode)
        if price.seconds is None:
            unpriced[price.category or "?"] = unpriced.get(price.category or "?", 0) + 1
            continue
        priced.setdefault(batch_bucket(gap.batch), []).append((gap.seconds, price.seconds))
    every = [row for rows in priced.values() for row in rows]
    return {"rule": RULE, "graph_mode": mode, "phase": PHASE_DECODE,
            "gaps": len(gaps) + mixed, "mixed_left_out": mixed, "unpriced": unpriced,
            "overall": error_summary(every) if every else None,
            "by_batch": {bucket_label(b): error_summary(rows)
                         for b, rows in sorted(priced.items())},
            "mixed": _price_mixed(interpolator, requests), "ttft_parts": ttft_parts(requests)}


def price_mixed_gap(interpolator: Interpolator, gap: MixedGap) -> tuple[str, Priced]:
    """A served mixed step's price (MIXED_RULE), in the graph mode the profile's mixed rows
    ran at its scheduled tokens (its prompts and each decoding request's 1 + K), and that
    mode."""
    tokens = sum(gap.prompts) + gap.decoding * (1 + interpolator.draft_depth)
    mode = interpolator.mixed_mode(tokens) or "?"
    return mode, interpolator.price_mixed(gap.decoding, len(gap.prompts), sum(gap.prompts),
                                          mode, decode_kv_tokens=gap.kv_tokens)


def _price_mixed(interpolator: Interpolator, requests: Sequence[ServedRequest]) -> dict:
    """The mixed gaps priced from the profile's mixed rows (predict_mixed.MIXED_RULE) where
    it has any, else by the rule (predict_mixed.MIXED_FALLBACK_RULE), by their whole batch
    (decoding and prefilled requests); the gaps priced each way and those outside, by why
    (about how many steps each: a gap counts 1 / its decoding requests)."""
    gaps, waiting, lag = mixed_gaps(requests)
    priced: dict[tuple[int, int], list[tuple[float, float]]] = {}
    unpriced: dict[str, int] = {}
    examples: dict[str, str] = {}
    modes: dict[str, int] = {}
    basis = interpolator.mixed_basis
    counted = {BASIS_ROWS: 0, BASIS_RULE: 0}
    steps = {BASIS_ROWS: 0.0, BASIS_RULE: 0.0, "outside": 0.0}
    for gap in gaps:
        mode, price = price_mixed_gap(interpolator, gap)
        modes[mode] = modes.get(mode, 0) + 1
        if price.seconds is None:
            why = price.category or "?"
            unpriced[why] = unpriced.get(why, 0) + 1
            examples.setdefault(why, price.detail or "")
            steps["outside"] += 1 / gap.decoding
            continue
        counted[basis] += 1
        steps[basis] += 1 / gap.decoding
        batch = gap.decoding + len(gap.prompts)
        priced.setdefault(batch_bucket(batch), []).append((gap.seconds, price.seconds))
    every = [row for rows in priced.values() for row in rows]
    return {"rule": MIXED_RULE, "basis": basis,
            "pricing_rule": PRICING_RULE if basis == BASIS_ROWS else MIXED_FALLBACK_RULE,
            "prefill_lag": lag, "gaps": len(gaps), "waiting_left_out": waiting,
            "graph_modes": modes, "priced_from_rows": counted[BASIS_ROWS],
            "priced_by_rule": counted[BASIS_RULE], "unpriced": unpriced,
            "unpriced_examples": examples,
            "steps_about": {k: round(v, 1) for k, v in steps.items()},
            "overall": error_summary(every) if every else None,
            "by_batch": {bucket_label(b): error_summary(rows)
                         for b, rows in sorted(priced.items())}}
