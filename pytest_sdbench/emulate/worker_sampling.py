"""The emulated worker's requests and what it samples for them, as an EAGLE3 GPU worker
does (worker.py's docstring): per SchedulerOutput, each request's state updated (admitted,
resumed, preempted, finished), 1 + accepted tokens for a request past its prompt (the
accepted drafts drawn at the profile's acceptance length with vLLM's rates), nothing for a
prefill chunk that does not finish its prompt, and K new draft ids for every request that
sampled; the ids are random tokens of the model's vocabulary, never an EOS id.

EmulatedWorker (worker.py) is a RequestSampling."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput

    from .acceptance import AcceptanceSampler


@dataclass
class _RequestState:
    """What a real worker keeps per request, reduced to what sampling and pricing need."""

    prompt_len: int            # the request's prompt (the collector's prompt_tokens)
    target_len: int            # tokens to compute before the request samples (prompt,
                               # or prompt + outputs when recomputing after preemption)
    past_prompt: bool = False  # has sampled at least once since (re)admission
    drafts: list[int] = field(default_factory=list)   # proposed for its next step


class RequestSampling:
    """The requests' states and the step's sampled tokens and drafts."""

    _requests: dict[str, _RequestState]
    _rng: random.Random
    _acceptance: AcceptanceSampler
    _vocab_size: int
    _eos_ids: set[int]
    async_scheduling: bool      # the scheduler sends -1 draft placeholders
    num_spec_tokens: int

    def _forget(self, so: SchedulerOutput) -> None:
        for req_id in so.finished_req_ids:
            self._requests.pop(req_id, None)
        for req_id in getattr(so, "preempted_req_ids", None) or ():
            state = self._requests.get(req_id)
            if state is not None:        # recomputed from scratch when resumed
                state.past_prompt = False
                state.drafts = []

    def _admit(self, so: SchedulerOutput) -> dict[str, int]:
        """Update request states from the step; return computed tokens before the step."""
        computed: dict[str, int] = {}
        for new in so.scheduled_new_reqs:
            # V2 runner: resumed requests come back as new ones with all their tokens.
            prompt = new.prompt_token_ids
            tokens = getattr(new, "prefill_token_ids", None) or prompt
            if tokens is not None:
                target = len(tokens)
            elif new.prompt_embeds is not None:   # (NewRequestData.prompt_len: 0.32 only)
                target = int(new.prompt_embeds.shape[0])
            else:
                target = 0
            prompt_len = len(prompt) if prompt is not None else target
            self._requests[new.req_id] = _RequestState(prompt_len=prompt_len,
                                                       target_len=target)
            computed[new.req_id] = int(new.num_computed_tokens)
        cached = so.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", None) or set()
        for i, req_id in enumerate(cached.req_ids):
            computed[req_id] = int(cached.num_computed_tokens[i])
            state = self._requests.get(req_id)
            if req_id in resumed or state is None:
                all_tokens = cached.all_token_ids.get(req_id)
                target = (len(all_tokens) if all_tokens is not None
                          else (state.target_len if state else 0)
                          + int(cached.num_output_tokens[i]))
                prompt_len = state.prompt_len if state else target
                self._requests[req_id] = _RequestState(prompt_len=prompt_len,
                                                       target_len=target)
        return computed

    def _sample(self, so: SchedulerOutput, computed: dict[str, int]
                ) -> tuple[ModelRunnerOutput, DraftTokenIds | None, tuple[int, int, int],
                           dict[str, int]]:
        """The step's ModelRunnerOutput, the drafts proposed for the next step, the step's
        (accepted, verified, sampled) token counts and each request's rejected drafts."""
        req_ids = list(so.num_scheduled_tokens)
        sampled: list[list[int]] = []
        draft_req_ids: list[str] = []
        draft_lists: list[list[int]] = []
        rejected: dict[str, int] = {}
        accepted_total = verified_total = sampled_total = 0
        placeholders = self.async_scheduling
        for req_id in req_ids:
            state = self._requests[req_id]
            n = int(so.num_scheduled_tokens[req_id])
            scheduled = so.scheduled_spec_decode_tokens.get(req_id, ())
            if not state.past_prompt:
                # Prefill: samples only when this chunk reaches the end of the prompt.
                if computed[req_id] + n - len(scheduled) < state.target_len:
                    sampled.append([])
                    continue
                state.past_prompt = True
                tokens = [self._token()]
            else:
                drafts = [d if d >= 0 or not placeholders
                          else (state.drafts[i] if i < len(state.drafts) else -1)
                          for i, d in enumerate(scheduled)]
                accepted = self._acceptance.draw(drafts)
                accepted_total += accepted
                verified_total += len(drafts)
                if len(scheduled) > accepted:
                    rejected[req_id] = len(scheduled) - accepted
                tokens = [*drafts[:accepted], self._token()]
            sampled.append(tokens)
            sampled_total += len(tokens)
            if self.num_spec_tokens:
                state.drafts = [self._token() for _ in range(self.num_spec_tokens)]
                draft_req_ids.append(req_id)
                draft_lists.append(list(state.drafts))
        output = ModelRunnerOutput(req_ids=req_ids,
                                   req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                   sampled_token_ids=sampled)
        drafts_out = DraftTokenIds(draft_req_ids, draft_lists) if draft_req_ids else None
        return output, drafts_out, (accepted_total, verified_total, sampled_total), rejected

    def _token(self) -> int:
        while True:
            token = self._rng.randrange(3, self._vocab_size) if self._vocab_size > 3 else 0
            if token not in self._eos_ids:
                return token
