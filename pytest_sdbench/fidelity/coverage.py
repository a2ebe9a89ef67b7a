"""The default workload of `sdbench fidelity PROFILE`: drawn from what the profile covers, so
that our interpolation (predict.py, which never extrapolates) can price its steps; or a
WorkloadError in one line saying what the profile does not cover.

The rule (COVERAGE_RULE): a fixed concurrency C, the largest decode batch measured, so that
every decode step's batch lies at or between measured batches (the run ends at C-1, ..., 1);
prompts no shorter than the shortest decode context measured at every batch nor than the
shortest uncached prefill measured at batch 1, and no longer than the longest such prefill;
outputs short enough that a request's context (prompt + output, + K+1 for the drafts in
flight) stays within the longest decode context measured at every batch. The steps this
leaves unpriced are the mixed ones (a request admitted beside C-1 decoding ones), about one
a request, where the profile's mixed rows (if any) do not reach them. Pure: reads the
artifact only."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..wire.model import Artifact
from .predict import Interpolator
from .workload import ARRIVAL_CONCURRENCY, Lengths, Workload, WorkloadError

COVERAGE_RULE = __doc__.split("The rule (COVERAGE_RULE): ", 1)[1].split(" Pure:")[0]
REQUESTS_PER_SLOT = 3   # requests a run: this many times the concurrency


@dataclass(frozen=True)
class Coverage:
    """What the profile prices, per request: decode contexts and batches, prefill prompts."""
    batches: tuple[int, ...]            # the decode batches measured (at the run's AL)
    context: tuple[float, float]        # decode context per request, at every batch
    prompt: tuple[int, int]             # uncached prefill tokens at batch 1
    draft_depth: int


def coverage(artifact: Artifact) -> Coverage:
    """The profile's coverage, or WorkloadError naming what it lacks."""
    interp = Interpolator.from_artifact(artifact)
    al = artifact.speculative.synthetic_acceptance_length
    if not interp.decode:
        raise WorkloadError(
            f"the profile (mode {artifact.mode}) covers no decode step"
            + (f" at its acceptance length {al:g}" if al is not None else "")
            + ", so a default serving run would price none; give the workload "
            "(--rate or --concurrency with --requests, --input-len, --output-len)")
    single = [p for p in interp.prefill if p.batch == 1 and p.kv == 0]
    if not single:
        raise WorkloadError(
            f"the profile (mode {artifact.mode}) covers no uncached prefill step at batch 1, "
            "so a default serving run could not price its prompts; give the workload "
            "(--rate or --concurrency with --requests, --input-len, --output-len)")
    batches = sorted({p.batch for p in interp.decode})
    per_batch = [[p.kv / b for p in interp.decode if p.batch == b] for b in batches]
    low = max(min(c) for c in per_batch)
    high = min(max(c) for c in per_batch)
    return Coverage(tuple(batches), (low, high),
                    (min(p.tokens for p in single), max(p.tokens for p in single)),
                    artifact.speculative.draft_depth)


def covered_lengths(cover: Coverage) -> tuple[Lengths, Lengths]:
    """Prompt and output lengths within the coverage (COVERAGE_RULE), or WorkloadError."""
    low, high = cover.context
    first = max(math.ceil(low), cover.prompt[0])
    room = math.floor(high) - (cover.draft_depth + 1) - first   # context left above a prompt
    last = min(cover.prompt[1], first + room // 4)
    outputs = math.floor(high) - (cover.draft_depth + 1) - last
    if last < first or outputs < 2:
        raise WorkloadError(
            f"the profile covers decode contexts {low:g}-{high:g} per request (at every batch "
            f"of {list(cover.batches)}) and prompts {cover.prompt[0]}-{cover.prompt[1]} "
            "(prefill at batch 1): no request fits both; give --input-len and --output-len")
    return Lengths(first, last), Lengths(max(1, outputs // 2), outputs)


def covered_workload(artifact: Artifact, seed: int = 0, requests: int | None = None,
                     inputs: Lengths | None = None, outputs: Lengths | None = None,
                     concurrency: int | None = None) -> Workload:
    """The default workload (COVERAGE_RULE); what the user gave is kept as given."""
    cover = coverage(artifact)
    if inputs is None or outputs is None:
        drawn_in, drawn_out = covered_lengths(cover)
        inputs, outputs = inputs or drawn_in, outputs or drawn_out
    slots = concurrency or max(cover.batches)
    return Workload(ARRIVAL_CONCURRENCY, inputs, outputs, seed=seed, concurrency=slots,
                    requests=requests or REQUESTS_PER_SLOT * slots)
