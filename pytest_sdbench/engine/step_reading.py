"""Reading a step (the producer side): the SchedulerOutput as schedule() returned it, the
ModelRunnerOutput before the scheduler consumes it, and the graph mode the step ran in."""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

from .compat import worker

# The observer's hot path: schedule() and update_from_output() run once a step, so what they
# read is copied as plain tuples with C-level loops only (tuple(), map()); the per-request
# rows, dicts and names are derived from those copies later, after the window.

class ScheduledRow(NamedTuple):
    """One scheduled request as schedule() emitted it: plain values, so that the observer's
    hot path builds no typed objects."""
    request_id: str
    prompt_tokens: int
    computed_tokens: int     # KV tokens already in the cache, read by this step
    scheduled_tokens: int    # new tokens this step, drafts included
    draft_tokens: int
    preemptions: int


class FrozenSchedule(NamedTuple):
    """A SchedulerOutput and the scheduler's state as they were when schedule() returned,
    copied without a Python-level loop over the requests (see scheduled_rows). The hot path
    builds it as a plain tuple in this order; FrozenSchedule(*frozen) names it later."""
    scheduled: dict[str, int]                        # new tokens a request, drafts included
    draft_ids: tuple[str, ...]                       # the requests that verify drafts
    draft_tokens: tuple[int, ...]                    # aligned with draft_ids
    new_computed: tuple[tuple[str, int], ...]        # (request id, computed) of new requests
    cached_ids: tuple[str, ...]
    cached_computed: tuple[int, ...]                 # aligned with cached_ids
    requests: tuple[Any, ...]                        # the scheduler's Request objects (or None)
    preemptions: tuple[Any, ...]                     # each request's count at schedule() time
    waiting: int
    running: int
    total_scheduled_tokens: int


_PREEMPTIONS = operator.attrgetter("num_preemptions")
_NEW_COMPUTED = operator.attrgetter("req_id", "num_computed_tokens")


def freeze_schedule(scheduler_output, sched) -> tuple:
    """Everything the snapshot needs, read at schedule() time before anything runs, as a
    plain tuple in FrozenSchedule's order. The engine may change the output's token counts,
    its draft lists and its requests afterwards, so the numbers are copied now (a dict copy,
    tuples, lengths; no live container is kept); what never changes (a request's prompt
    length) is read later from the request."""
    scheduled = scheduler_output.num_scheduled_tokens
    drafts = scheduler_output.scheduled_spec_decode_tokens
    cached = scheduler_output.scheduled_cached_reqs
    new = scheduler_output.scheduled_new_reqs
    requests = tuple(map(sched.requests.get, scheduled))
    try:
        preemptions = tuple(map(_PREEMPTIONS, requests))
    except AttributeError:  # a request unknown to the scheduler, or a release without it
        preemptions = tuple(getattr(r, "num_preemptions", 0) for r in requests)
    return (scheduled.copy(),
            tuple(drafts) if drafts else (), tuple(map(len, drafts.values())) if drafts else (),
            tuple(map(_NEW_COMPUTED, new)) if new else (),
            tuple(cached.req_ids), tuple(cached.num_computed_tokens), requests, preemptions,
            len(sched.waiting), len(sched.running), scheduler_output.total_num_scheduled_tokens)


def scheduled_rows(frozen: FrozenSchedule) -> tuple[ScheduledRow, ...]:
    """Every scheduled request of a frozen schedule, as rows (derived off the hot path)."""
    computed = dict(frozen.new_computed)
    computed.update(zip(frozen.cached_ids, frozen.cached_computed, strict=True))
    drafts = dict(zip(frozen.draft_ids, frozen.draft_tokens, strict=True))
    return tuple(
        ScheduledRow(req_id, request.num_prompt_tokens if request is not None else -1,
                     computed[req_id], scheduled, drafts.get(req_id, 0),
                     (preemptions or 0) if request is not None else 0)
        for (req_id, scheduled), request, preemptions in zip(
            frozen.scheduled.items(), frozen.requests, frozen.preemptions, strict=True))


class FrozenOutput(NamedTuple):
    """What update_from_output() needs of a step's ModelRunnerOutput, copied before the
    scheduler consumes it (it trims a stopping request's sampled tokens in place). Built
    as a plain tuple in this order on the hot path."""
    request_ids: tuple[str, ...]
    gained: tuple[int, ...]          # tokens each request gained, by position
    graph_stats: Any                 # the V1 runner's cudagraph_stats (None: not reported)


def freeze_output(model_runner_output) -> tuple:
    return (tuple(model_runner_output.req_ids),
            tuple(map(len, model_runner_output.sampled_token_ids or ())),
            getattr(model_runner_output, "cudagraph_stats", None))


def gained_tokens(frozen: FrozenOutput) -> dict[str, int]:
    """Tokens each request gained from one step, as the host-side output carried them."""
    gained = frozen.gained
    return {req_id: gained[i] if i < len(gained) else 0
            for i, req_id in enumerate(frozen.request_ids)}


def graph_mode_name(mode) -> str:
    """vLLM's CUDAGraphMode (enum or its str) as 'eager', 'piecewise' or 'full'."""
    name = str(getattr(mode, "name", mode)).rsplit(".", 1)[-1].lower()
    return "eager" if name == "none" else name


def graph_mode_of_stats(stats) -> str | None:
    """The graph mode a step's cudagraph_stats report; None without them."""
    mode = getattr(stats, "runtime_mode", None)
    return None if mode is None else graph_mode_name(mode)


def graph_dispatcher(llm):
    """The V2 model runner (vLLM 0.26's default on CUDA) reports no per-step graph mode in
    its output; it chooses one in cudagraph_manager.dispatch(), whose result the observer
    reads. None for the V1 runner, which reports it in the output."""
    manager = getattr(worker(llm).model_runner, "cudagraph_manager", None)
    return manager if manager is not None and hasattr(manager, "dispatch") else None
