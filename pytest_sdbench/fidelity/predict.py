"""Our prediction of a step from the profile: a simple interpolation over the artifact's
measured points, stated in RULE below (the one home of its words: served_steps.py and the
reports quote them). No extrapolation: a step outside what was measured is not priced, and
says why (its category and the coordinates that fell outside).

The rule's parts: prefill-only and decode-only steps (PHASES_RULE, Priced and its categories,
the interpolation) in predict_phases.py; the mixed step (MIXED_RULE, MIXED_FALLBACK_RULE, the
mixed rows and their lattice) in predict_mixed.py.

Pure: reads the artifact (wire types) and StepRecords; no engine, no consumer."""

from __future__ import annotations

import dataclasses

from ..wire.contract import PHASE_DECODE, PHASE_MIXED, PHASE_PREFILL
from ..wire.model import Artifact
from .predict_mixed import MIXED_FALLBACK_RULE, MIXED_RULE, MixedInterpolator, mixed_rows
from .predict_phases import NO_MODE, NO_PHASE, PHASES_RULE, Priced, Unpriced, profile_points
from .serving_records import UNKNOWN_GRAPH_MODE, StepRecord

RULE = (f"{PHASES_RULE} {MIXED_RULE} {MIXED_FALLBACK_RULE} Nothing is extrapolated: "
        "coordinates outside the measured range are not priced.")


class Interpolator(MixedInterpolator):
    """Prices StepRecords from a profile by RULE."""
    rule = RULE

    @classmethod
    def from_artifact(cls, artifact: Artifact) -> Interpolator:
        return cls(profile_points(artifact), artifact.speculative.draft_depth,
                   artifact.speculative.synthetic_acceptance_length, mixed_rows(artifact))

    def price(self, step: StepRecord) -> Priced:
        basis = self.mixed_basis if step.kind == PHASE_MIXED else None
        try:
            if step.graph_mode == UNKNOWN_GRAPH_MODE:
                raise Unpriced(NO_MODE, "the step did not report how it ran")
            if step.kind == PHASE_DECODE:
                return self._decode(step.decode_requests, step.decode_kv_tokens, step.graph_mode)
            if step.kind == PHASE_PREFILL:
                return self._prefill(step.prefill_requests, step.prefill_tokens,
                                     step.prefill_kv_tokens, step.graph_mode)
            if step.kind == PHASE_MIXED and self.mixed_measured:
                return self._mixed(step.decode_requests, step.decode_kv_tokens,
                                   step.prefill_requests, step.prefill_tokens,
                                   step.prefill_kv_tokens, step.graph_mode)
            if step.kind == PHASE_MIXED:
                return dataclasses.replace(self._prefill(
                    step.requests, step.prefill_tokens + step.decode_requests
                    + step.draft_tokens, step.prefill_kv_tokens, step.graph_mode), basis=basis)
            raise Unpriced(NO_PHASE, f"step kind {step.kind!r}")
        except Unpriced as no:
            return Priced(category=no.category, detail=no.detail, basis=basis)
