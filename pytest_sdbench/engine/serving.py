"""Serving step by step (the fidelity run and the stopped generate): requests added at their
arrival times, the engine stepped, what each step delivered."""

from __future__ import annotations

from .compat import engine_core


def streaming_params(max_tokens: int):
    """A served request's sampling parameters: the run's generation sampling, each step's
    new tokens only (as a streaming server sends them)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    from ..wire.contract import GENERATION_SAMPLING
    return SamplingParams(max_tokens=max_tokens, output_kind=RequestOutputKind.DELTA,
                          **GENERATION_SAMPLING)


def add_request(llm, request_id: str, token_ids: list[int], params) -> None:
    """Queue one token-id prompt on the engine (LLMEngine.add_request, V1)."""
    llm.llm_engine.add_request(request_id, {"prompt_token_ids": token_ids}, params)


def generate_until(llm, prompts: list[list[int]], params, stop) -> list:
    """LLM.generate's loop, stopped early: the requests are added as LLM.enqueue adds them
    and the engine is stepped (LLMEngine.step) until none is unfinished; after every step
    `stop()` is asked, and once it holds, every request still running is aborted. The
    engine is then stepped until its core runs no request and holds no batch (async
    scheduling queues the next step before the last one's output), so the next run starts
    on an idle engine. Returns the outputs of the requests that finished before the stop,
    in LLM.generate's order."""
    engine = llm.llm_engine
    ids = llm.enqueue([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    finished: list = []
    stopped = False
    while engine.has_unfinished_requests() or not core_idle(llm):
        finished.extend(o for o in engine.step() if o.finished)
        if not stopped and stop():
            engine.abort_request(ids, internal=True)   # enqueue returns internal ids
            stopped = True
    return sorted(finished, key=lambda o: int(o.request_id))


def generate_admitting(llm, prompts: list[list[int]], params, later: list[list[int]],
                       later_params, admit, done, most_steps: int = 64
                       ) -> tuple[list[str], list[str]]:
    """A run of `prompts` into which `later` is added once `admit()` holds (asked between
    engine steps: the scheduler admits them in its next step, under sync and async
    scheduling alike); the engine is stepped until `done(later's ids)` holds, then every
    request is aborted and the engine stepped until idle (core_idle). A run that never
    admits, or never gets done, stops after `most_steps` steps (its records then say
    what happened). Returns the internal ids of `prompts` and of `later`."""
    engine = llm.llm_engine
    ids = llm.enqueue([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    steps = 0
    while not admit() and steps < most_steps and engine.has_unfinished_requests():
        engine.step()
        steps += 1
    later_ids = llm.enqueue([{"prompt_token_ids": p} for p in later], later_params,
                            use_tqdm=False)
    while not done(later_ids) and steps < most_steps and engine.has_unfinished_requests():
        engine.step()
        steps += 1
    engine.abort_request([*ids, *later_ids], internal=True)   # enqueue gives internal ids
    while engine.has_unfinished_requests() or not core_idle(llm):
        engine.step()
    return list(ids), list(later_ids)


def core_idle(llm) -> bool:
    """The engine core holds no unfinished request and no batch in flight (the ids of
    finished ones may wait for its next schedule, as after LLM.generate)."""
    core = engine_core(llm)
    return (not core.scheduler.has_unfinished_requests()
            and not getattr(core, "batch_queue", None))


def engine_step(llm) -> list:
    """One engine step (LLMEngine.step): the RequestOutputs it returned."""
    return llm.llm_engine.step()


def delivered(output) -> tuple[str, int, bool]:
    """(the id the request was added under, tokens this step delivered, finished) of a
    streamed RequestOutput."""
    return output.request_id, len(output.outputs[0].token_ids), bool(output.finished)
