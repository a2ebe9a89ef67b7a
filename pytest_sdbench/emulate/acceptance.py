"""Draft acceptance at the profile's acceptance length, as vLLM's synthetic rejection sampler
draws it.

vLLM (0.26 and 0.32 alike) resolves `synthetic_acceptance_length` AL to unconditional
per-position rates with its minimum-variance schedule (SpeculativeConfig.
_acceptance_length_to_rates), converts them to conditional rates c_i = p_i / p_{i-1}
(vllm/v1/spec_decode/utils.py unconditional_to_conditional_rates), and its rejection kernel
accepts position i iff u_i < c_i and the draft id is >= 0, stopping at the first rejection
(vllm/v1/sample/rejection_sampler.py). The bonus (or recovered) token follows, so a verifying
request gains 1 + accepted tokens.

The rates are vLLM's own (engine.compat.acceptance_rates_for calls those two functions);
this module only draws from them. Its import is free of vLLM: the worker asks for the rates
in the engine core."""

from __future__ import annotations

import random
from collections.abc import Sequence


def expected_acceptance_length(unconditional_rates: Sequence[float]) -> float:
    """E[1 + accepted] over a full K-draft verification = 1 + the sum of the unconditional
    rates."""
    return 1.0 + float(sum(unconditional_rates))


class AcceptanceSampler:
    """Draws the number of accepted drafts of one verification, as vLLM's kernel does."""

    def __init__(self, conditional_rates: Sequence[float], rng: random.Random) -> None:
        self.conditional_rates = [float(c) for c in conditional_rates]
        self._rng = rng

    def draw(self, draft_ids: Sequence[int]) -> int:
        """Accepted prefix length for these scheduled drafts (a -1 id is never accepted, as
        in vLLM; a request may be scheduled fewer than K drafts near max_model_len)."""
        accepted = 0
        for pos, draft in enumerate(draft_ids):
            if pos >= len(self.conditional_rates) or draft < 0:
                break
            if not self._rng.random() < self.conditional_rates[pos]:
                break
            accepted += 1
        return accepted
