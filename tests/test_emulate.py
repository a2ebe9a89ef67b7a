"""`sdbench emulate` (issue 54): vLLM's own server with each forward pass replaced by the
profile's price of the step.

Without an engine: the pieces (acceptance at vLLM's rates; the KV capacity, async scheduling,
sampling, drafts and the rejection-corrected KV of the in-process executor on a real
VllmConfig, hand-built SchedulerOutputs; the price inside and outside the measured rows, the
mixed rows of the v7 CPU fixture; the refusals; the check of step times, shown to fail on a
wrong price and on a skipped sleep).

With an engine (sdbench_engine; one server for the module's fixture tests, on one xdist
worker): the sdbench_emulated_server fixture serves a committed H200 profile (qwen3-8b, K=3,
AL 2.78: served-aisimulate) on this CPU host; vLLM's own client completes requests through
it (streaming chunks, token counts, finish reasons); every step took the profile's price of
it; `sdbench emulate --case` writes `sdbench serve`'s folder."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_sdbench.emulate import EXECUTOR_QUALNAME, SETTINGS_KEY
from pytest_sdbench.emulate.acceptance import AcceptanceSampler
from pytest_sdbench.emulate.pricing import ProfilePrice, Unpriceable, check_priceable
from pytest_sdbench.emulate.step_shape import StepShape, shape_of
from pytest_sdbench.emulate.steplog import StepLogData, read_step_log
from pytest_sdbench.fidelity.predict import Interpolator
from pytest_sdbench.fidelity.serving_records import StepRecord
from pytest_sdbench.run.profile import read_profile

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "docs/evidence/h200/served-aisimulate/sdbench-agg-k3-893a0f15199c.json.xz"
CPU_V7 = ROOT / "tests/fixtures/cpu-agg-v7.json"
# the H100 qwen3-8b profile with mixed rows (issue 53's lease): its lattice stops at 8192
H100_MIXED = ROOT / "docs/evidence/h100/serving-under-load/sdbench-agg-k3-292b5bf1ed5f.json.xz"
K, AL = 3, 2.78
GROUP = "emulated-server"   # the fixture's server starts once, on one xdist worker


@functools.cache
def profile():
    return read_profile(PROFILE)


@functools.cache
def profile_price() -> ProfilePrice:
    return ProfilePrice(profile())


@pytest.fixture
def shared_price(monkeypatch):
    """The worker's price, read once for the module (ProfilePrice is pure)."""
    monkeypatch.setattr(ProfilePrice, "from_path", classmethod(lambda cls, path:
                                                               profile_price()))


def make_executor(async_on: bool = True, **settings):
    from vllm.engine.arg_utils import EngineArgs

    from pytest_sdbench.emulate.executor import EmulatedExecutor
    from pytest_sdbench.emulate.server import prepare
    kwargs = dict(prepare(PROFILE).kwargs)
    for name in ("skip_tokenizer_init", "disable_log_stats"):
        kwargs.pop(name, None)
    kwargs.update(block_size=16, distributed_executor_backend=EXECUTOR_QUALNAME,
                  additional_config={SETTINGS_KEY: {"profile": str(PROFILE),
                                                    "async_scheduling": async_on,
                                                    **settings}})
    return EmulatedExecutor(EngineArgs(**kwargs).create_engine_config())


def new_req(req_id: str, prompt_len: int, computed: int = 0) -> SimpleNamespace:
    return SimpleNamespace(req_id=req_id, prompt_token_ids=list(range(10, 10 + prompt_len)),
                           prefill_token_ids=None, num_computed_tokens=computed,
                           prompt_embeds=None)


def step(new=(), cached=None, scheduled=None, spec=None, finished=()) -> SimpleNamespace:
    from vllm.v1.core.sched.output import CachedRequestData
    scheduled = scheduled or {}
    return SimpleNamespace(
        scheduled_new_reqs=list(new),
        scheduled_cached_reqs=cached or CachedRequestData.make_empty(),
        num_scheduled_tokens=scheduled, total_num_scheduled_tokens=sum(scheduled.values()),
        scheduled_spec_decode_tokens=spec or {}, finished_req_ids=set(finished),
        preempted_req_ids=None)


def cached(req_ids, computed, outputs):
    from vllm.v1.core.sched.output import CachedRequestData
    return CachedRequestData(req_ids=list(req_ids), resumed_req_ids=set(), new_token_ids=[],
                             all_token_ids={}, new_block_ids=[None] * len(req_ids),
                             num_computed_tokens=list(computed),
                             num_output_tokens=list(outputs))


def run(ex, so):
    first = ex.execute_model(so, non_block=True).result()
    if first is not None:
        return first
    return ex.sample_tokens(None, non_block=True).result()


# ---- the step-time check (used on the served log, and shown to fail when it should) --------

def _mode(interp: Interpolator, kind: str, batch: int, tokens: int) -> str | None:
    """The graph mode of a step, read from the profile independently of the emulator:
    decode, the mode of the decode rows at the fewest requests >= batch (else the most)."""
    if kind == "decode":
        ranked = sorted(interp.decode, key=lambda p: p.batch)
        return next((p for p in ranked if p.batch >= batch), ranked[-1]).graph_mode
    return interp.prefill_mode(tokens) if kind == "prefill" else interp.mixed_mode(tokens)


def profile_price_of(s: dict, interp: Interpolator) -> float | None:
    """fidelity's price of a logged step: of its shape where it was inside the rows, of the
    coordinates it was priced at where it was outside (which the rows must then cover)."""
    at = dict(s["priced_at"] or {})
    if "decodes_beside_at" in at:
        return prompts_beside_decodes(s, at, interp)
    kind = "prefill" if at.pop("as", None) else s["kind"]
    lower, asked = at.pop("extended_from", None), at.pop("extended_to", None)
    shape = {**{k: s[k] for k in ("prefill_requests", "prefill_tokens", "prefill_kv_tokens",
                                  "decode_requests", "decode_kv_tokens", "draft_tokens",
                                  "total_scheduled_tokens")}, **at}
    if kind == "prefill" and at:
        shape.update(decode_requests=0, decode_kv_tokens=0, draft_tokens=0,
                     total_scheduled_tokens=shape["prefill_tokens"])

    def price_at(tokens: int) -> float | None:
        here = {**shape, "prefill_tokens": tokens}
        if kind == "prefill" and at:
            here["total_scheduled_tokens"] = tokens
        return interp.price(StepRecord(native_iteration_id=0, kind=kind,
                                       graph_mode=s["graph_mode"], seconds=0.0,
                                       full_depth_requests=0, accepted_drafts=None, waiting=0,
                                       running=0, **here)).seconds
    top = price_at(shape["prefill_tokens"])
    if lower is None or top is None:
        return top
    base = price_at(lower)      # beyond the rows: along the line through the top two
    assert base is not None
    return top + (top - base) / (shape["prefill_tokens"] - lower) * \
        (asked - shape["prefill_tokens"])


def prompts_beside_decodes(s: dict, at: dict, interp: Interpolator) -> float | None:
    """A mixed step beyond its lattice's tokens, priced from the prefill rows: fidelity's
    price of its prompts alone, plus that of its decodes beside one prompt of the lattice's
    top less that prompt alone (never below none)."""
    top = at["decodes_beside_at"]

    def prefill(requests: int, tokens: int, kv: int) -> float | None:
        return interp.price(StepRecord(
            native_iteration_id=0, kind="prefill", graph_mode=interp.prefill_mode(tokens),
            seconds=0.0, prefill_requests=requests, prefill_tokens=tokens,
            prefill_kv_tokens=kv, decode_requests=0, decode_kv_tokens=0, draft_tokens=0,
            full_depth_requests=0, accepted_drafts=None, total_scheduled_tokens=tokens,
            waiting=0, running=0)).seconds
    prompts = prefill(at["prefill_requests"], at["prefill_tokens"], at["prefill_kv_tokens"])
    alone = prefill(1, top, 0)
    beside = interp.price_mixed(at["decode_requests"], 1, top, s["graph_mode"],
                                decode_kv_tokens=at["decode_kv_tokens"]).seconds
    if prompts is None or alone is None or beside is None:
        return None
    return prompts + max(0.0, beside - alone)


def step_time_problems(log: StepLogData, interp: Interpolator) -> list[str]:
    """Why the log's steps did not each take the profile's price of them (empty: they did):
    - the virtual timeline, exactly: start = max(launch, previous deadline) and deadline =
      start + price, each step;
    - the price, exactly: the profile's price of the step (fidelity's Interpolator), in the
      graph mode the profile's rows of that kind ran at that size;
    - the observed time of the steps whose output was waited for (woke - start): median
      |error| <= 1% of the price and 80% of them within 5%. A step's sleep can overshoot
      on a busy 2-core host (the API server, the client, the engine core and another xdist
      worker's engine share it: a tail, seen up to +27% on single steps here); a wrong sleep
      moves every step (a skipped one: -100%; 1.2x: +20%), which the median catches."""
    problems = []
    steps = sorted(log.steps, key=lambda s: s["step"])
    busy = None
    for s in steps:
        n = s["step"]
        if abs(s["deadline_t"] - s["start_t"] - s["price_s"]) > 1e-9:
            problems.append(f"step {n}: deadline - start != price")
        if busy is not None and abs(s["start_t"] - max(s["launch_t"], busy)) > 1e-9:
            problems.append(f"step {n}: start is not max(launch, previous deadline)")
        busy = s["deadline_t"]
        mode = _mode(interp, s["kind"], s["num_reqs"] if s["kind"] != "decode"
                     else s["decode_requests"], s["total_scheduled_tokens"])
        if s["graph_mode"] != mode:
            problems.append(f"step {n}: graph mode {s['graph_mode']}, the profile's {mode}")
        want = profile_price_of(s, interp)
        if want is None or abs(want - s["price_s"]) > 1e-12 + 1e-9 * want:
            problems.append(f"step {n}: priced {s['price_s']}, the profile's price {want}")
    waited = [s for s in steps if s["waited"]]
    if len(waited) < len(steps) / 2:
        problems.append(f"only {len(waited)} of {len(steps)} steps were waited for")
    errors = [(s["measured_s"] - s["price_s"]) / s["price_s"] for s in waited]
    if errors:
        median = statistics.median(abs(e) for e in errors)
        within = sum(abs(e) <= 0.05 for e in errors) / len(errors)
        if median > 0.01:
            problems.append(f"median |measured - price| / price {median:.1%} > 1%")
        if within < 0.8:
            problems.append(f"{within:.0%} of the waited steps within 5% of their price")
    return problems


# ---- the pieces, without an engine ---------------------------------------------------------

def test_acceptance_is_drawn_at_vllms_rates():
    from vllm.config import SpeculativeConfig

    from pytest_sdbench.engine.compat import acceptance_rates_for
    unconditional, conditional = acceptance_rates_for(AL, K)
    assert unconditional == SpeculativeConfig._acceptance_length_to_rates(AL, K)
    assert conditional == pytest.approx([1.0, 0.78, 0.0])
    sampler = AcceptanceSampler(conditional, random.Random(1))
    n = 100_000
    assert 1 + sum(sampler.draw([5, 6, 7]) for _ in range(n)) / n == pytest.approx(AL, abs=0.01)
    assert sampler.draw([5, -1, 7]) <= 1          # a -1 draft is never accepted


def test_kv_capacity_is_the_profiles(shared_price):
    ex = make_executor()
    worker = ex.driver_worker
    specs = ex.get_kv_cache_specs()[0]
    assert len(specs) == 36 + 1                               # target layers + draft layer
    # qwen3-8b + a 1-layer EAGLE3 head, bf16, block 16: the profile's bytes a token
    assert worker.bytes_per_block() == 16 * profile().kv_capacity.bytes_per_token.value
    assert ex.determine_available_memory() == [48763 * worker.bytes_per_block()]
    assert ex.vllm_config.cache_config.num_gpu_blocks_override == 48763


def test_async_scheduling_is_turned_on_over_the_cpu_platform(shared_price):
    ex = make_executor(async_on=True)
    assert ex.vllm_config.scheduler_config.async_scheduling is True
    assert ex.driver_worker.async_scheduling is True
    assert ex.driver_worker.async_scheduling_turned_on is True
    assert ex.vllm_config.max_concurrent_batches == 2
    assert make_executor(async_on=False).vllm_config.max_concurrent_batches == 1


def test_prefill_chunks_decode_and_drafts_async(shared_price):
    ex = make_executor(async_on=True)
    w = ex.driver_worker
    # A 10-token prompt in chunks of 6 and 4: the first chunk samples nothing.
    assert run(ex, step(new=[new_req("a", 10)], scheduled={"a": 6})).sampled_token_ids == [[]]
    assert ex.take_draft_token_ids() is None
    out = run(ex, step(cached=cached(["a"], [6], [0]), scheduled={"a": 4}))
    assert len(out.sampled_token_ids[0]) == 1
    drafts = list(w._requests["a"].drafts)
    assert len(drafts) == K
    # Decode with -1 placeholders (async): the accepted tokens are the worker's drafts.
    out = run(ex, step(cached=cached(["a"], [10], [1]), scheduled={"a": 1 + K},
                       spec={"a": [-1] * K}))
    tokens = out.sampled_token_ids[0]
    assert tokens[:-1] == drafts[:len(tokens) - 1]
    assert 2 <= len(tokens) <= 3     # AL 2.78 -> [1, .78, 0]: first always, third never
    assert not w._eos_ids & set(tokens)
    run(ex, step(finished=["a"]))    # a finished request is forgotten
    assert "a" not in w._requests


def test_sync_drafts_are_handed_back(shared_price):
    ex = make_executor(async_on=False)
    run(ex, step(new=[new_req("b", 4)], scheduled={"b": 4}))
    handed = ex.take_draft_token_ids()
    assert handed.req_ids == ["b"]
    assert len(handed.draft_token_ids[0]) == K
    out = run(ex, step(cached=cached(["b"], [4], [1]), scheduled={"b": 1 + K},
                       spec={"b": handed.draft_token_ids[0]}))
    tokens = out.sampled_token_ids[0]
    assert tokens[:-1] == handed.draft_token_ids[0][:len(tokens) - 1]


def test_empty_step_is_empty_output_at_once(shared_price):
    from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT
    ex = make_executor()
    assert ex.execute_model(step(), non_block=True).result() is EMPTY_MODEL_RUNNER_OUTPUT


def test_kv_is_corrected_for_drafts_a_step_in_flight_rejected(shared_price, tmp_path):
    """Under async scheduling step N+1 is scheduled before N's output: its KV counts all
    of N's drafts. The worker drew N's rejections, and prices N+1 at the KV it really
    reads (the collector's rejection-corrected snapshot); once N's output is taken, none."""
    log = tmp_path / "steps.jsonl"
    ex = make_executor(step_log=str(log))
    w = ex.driver_worker
    run(ex, step(new=[new_req("c", 100)], scheduled={"c": 100}))           # prefill
    ex.execute_model(step(cached=cached(["c"], [100], [1]), scheduled={"c": 1 + K},
                          spec={"c": [-1] * K}))                           # decode N
    n = ex.sample_tokens(None, non_block=True)
    rejected = w._in_flight[-1][1].get("c", 0)
    assert rejected in (1, 2)        # rates [1, .78, 0]: the third draft never
    ex.execute_model(step(cached=cached(["c"], [104], [2]), scheduled={"c": 1 + K},
                          spec={"c": [-1] * K}))                           # N+1, N in flight
    n1 = ex.sample_tokens(None, non_block=True)
    n.result()
    n1.result()
    ex.execute_model(step(cached=cached(["c"], [108 - rejected], [3]), scheduled={"c": 1 + K},
                          spec={"c": [-1] * K}))                           # N+2: N taken
    n2 = ex.sample_tokens(None, non_block=True)
    ex.execute_model(step(finished=["c"]))
    n2.result()
    ex.shutdown()
    steps = read_step_log(log).steps
    assert [s["kind"] for s in steps] == ["prefill", "decode", "decode", "decode"]
    assert [s["overlapped"] for s in steps] == [False, False, True, False]
    assert steps[2]["kv_correction"] == rejected
    assert steps[2]["decode_kv_tokens"] == 104 - rejected
    assert steps[2]["price_s"] == profile_price().interpolator.price_decode(
        1, 104 - rejected, "full").seconds
    assert (steps[3]["kv_correction"], steps[3]["decode_kv_tokens"]) == (0, 108 - rejected)


def test_importing_the_executor_reads_nothing_and_touches_no_device():
    """vLLM's API server imports the executor class by its qualified name: that import
    starts no thread, reads no profile and initialises no CUDA."""
    code = ("import threading, sys; n = threading.active_count(); "
            "import pytest_sdbench.emulate.executor as e; import torch; "
            "print(threading.active_count() - n, torch.cuda.is_initialized(), "
            "'pytest_sdbench.artifact.validate' in sys.modules, "
            "'pytest_sdbench.run.profile' in sys.modules, e.EmulatedExecutor.__module__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0", "False", "False", "False",
                                   EXECUTOR_QUALNAME.rsplit(".", 1)[0]]


def test_the_virtual_device_absorbs_a_late_launch():
    from pytest_sdbench.emulate.clock import VirtualDevice
    device = VirtualDevice()
    _, _s1, d1 = device.launch(0.002)
    _, s2, d2 = device.launch(0.003)
    assert s2 == d1
    assert d2 == pytest.approx(d1 + 0.003)
    time.sleep(0.01)                                   # host late: the device idled
    launched, s3, _ = device.launch(0.001)
    assert s3 == launched


def _interp_price(kind: str, mode: str, **shape) -> float | None:
    fields = {"prefill_requests": 0, "prefill_tokens": 0, "prefill_kv_tokens": 0,
              "decode_requests": 0, "decode_kv_tokens": 0, "draft_tokens": 0,
              "total_scheduled_tokens": 0, **shape}
    return profile_price().interpolator.price(StepRecord(
        native_iteration_id=0, kind=kind, graph_mode=mode, seconds=0.0,
        full_depth_requests=0, accepted_drafts=None, waiting=0, running=0, **fields)).seconds


def test_a_step_inside_is_priced_as_fidelity_prices_it():
    price = profile_price()
    decode = shape_of([(600, 700, 1 + K, K)] * 4)     # 4 decoding at KV 700 each
    assert (decode.kind, decode.decode_requests, decode.decode_kv_tokens) == ("decode", 4, 2800)
    got = price(decode)
    assert (got.kind, got.graph_mode, got.basis, got.outside) == ("decode", "full", "rows", None)
    assert got.seconds == _interp_price("decode", "full", decode_requests=4,
                                        decode_kv_tokens=2800, draft_tokens=12,
                                        total_scheduled_tokens=16)
    # prefill: uncached 128 tokens (piecewise: 256 and fewer), cached 64, eager above 256
    for tokens, kv, mode in ((128, 0, "piecewise"), (128, 64, "piecewise"), (900, 0, "eager")):
        shape = shape_of([(tokens + kv, kv, tokens, 0)])
        got = price(shape)
        assert (got.kind, got.graph_mode, got.outside) == ("prefill", mode, None)
        assert got.seconds == _interp_price("prefill", mode, prefill_requests=1,
                                            prefill_tokens=tokens, prefill_kv_tokens=kv,
                                            total_scheduled_tokens=tokens)
    # mixed: the profile has no mixed rows: the rule, labelled so
    mixed = shape_of([(128, 0, 128, 0), (300, 400, 1 + K, K), (300, 500, 1 + K, K)])
    got = price(mixed)
    assert (got.kind, got.graph_mode, got.basis) == ("mixed", "piecewise", "rule: no mixed rows")
    assert got.seconds == _interp_price("mixed", "piecewise", **dataclasses.asdict(mixed))


@pytest.mark.parametrize("shape, category, priced_at", [
    (StepShape(decode_requests=40, decode_kv_tokens=40 * 600, draft_tokens=120,
               total_scheduled_tokens=160), "off-grid: batch",
     {"decode_requests": 32, "decode_kv_tokens": 32 * 600}),
    (StepShape(decode_requests=4, decode_kv_tokens=4 * 3000, draft_tokens=12,
               total_scheduled_tokens=16), "off-grid: context",
     {"decode_requests": 4, "decode_kv_tokens": 8091}),   # 2022.75 a request at most
    (StepShape(prefill_requests=1, prefill_tokens=3000, total_scheduled_tokens=3000),
     "off-grid: tokens", {"prefill_requests": 1, "prefill_tokens": 2047,
                          "prefill_kv_tokens": 0, "extended_from": 1024,
                          "extended_to": 3000}),
    (StepShape(prefill_requests=40, prefill_tokens=40 * 128, total_scheduled_tokens=5120),
     "off-grid: batch", {"prefill_requests": 32, "prefill_tokens": 5120,
                         "prefill_kv_tokens": 0}),
], ids=["decode-batch", "decode-context", "prefill-tokens", "prefill-batch"])
def test_a_step_outside_is_priced_at_the_nearest_rows_and_counted(shape, category, priced_at):
    got = profile_price()(shape)
    assert got.outside == category
    assert got.outside_detail
    assert got.priced_at == priced_at
    assert got.clamped                                    # says what moved
    kind = shape.kind
    at = {k: v for k, v in priced_at.items() if not k.startswith("extended_")}

    def at_tokens(tokens: int | None = None) -> float:
        here = {**at, "prefill_tokens": tokens} if tokens is not None else at
        return _interp_price(kind, got.graph_mode, **here,
                             total_scheduled_tokens=shape.total_scheduled_tokens
                             if kind == "decode" else here["prefill_tokens"],
                             draft_tokens=shape.draft_tokens)
    if "extended_to" not in priced_at:
        assert got.seconds == at_tokens()
        return
    # more tokens than measured: not the shorter step's price, the line through the top two
    top, lower = priced_at["prefill_tokens"], priced_at["extended_from"]
    slope = (at_tokens() - at_tokens(lower)) / (top - lower)
    assert slope > 0
    assert got.seconds == pytest.approx(at_tokens() + slope * (shape.prefill_tokens - top))
    assert got.seconds > at_tokens()


def test_mixed_rows_price_a_mixed_step_and_the_nearest_outside():
    """The v7 CPU fixture's mixed rows (the pricing rule only: check=False, its rows are
    host-timed): its lattice row exactly; a step beyond it (more decodes, a longer prompt)
    counted, its decodes clamped onto the row's and its prompt priced from the prefill rows
    as it is; one whose prompt the prefill rows do not reach either, clamped onto the row."""
    price = ProfilePrice(read_profile(CPU_V7), check=False)
    interp = price.interpolator
    (row,) = interp.lattice
    at_row = shape_of([(64, 0, 64, 0)] + [(10, 129, 1 + K, K)] * 2)
    got = price(at_row)
    assert (got.kind, got.basis, got.outside) == ("mixed", "mixed rows", None)
    assert got.seconds == pytest.approx(row.seconds)
    beyond = shape_of([(100, 0, 100, 0)] + [(10, 300, 1 + K, K)] * 3)
    got = price(beyond)
    assert got.outside == "off-grid: decode batch"
    assert got.basis == "mixed rows"
    at = got.priced_at
    assert (at["decode_requests"], at["prefill_tokens"], at["decodes_beside_at"]) == \
        (2, 100, 64)
    assert got.seconds == pytest.approx(prompts_beside_decodes(
        {"graph_mode": got.graph_mode}, at, interp))
    reach = max(p.tokens for p in interp.prefill if p.batch == 1 and p.kv == 0)
    far = shape_of([(reach + 1, 0, reach + 1, 0)] + [(10, 300, 1 + K, K)] * 3)
    got = price(far)
    at = got.priced_at
    assert "decodes_beside_at" not in at
    assert (at["decode_requests"], at["prefill_tokens"]) == (2, 64)
    assert got.seconds == interp.price_mixed(
        2, at["prefill_requests"], 64, got.graph_mode, decode_kv_tokens=at["decode_kv_tokens"],
        prefill_kv_tokens=at["prefill_kv_tokens"]).seconds


def test_a_mixed_step_of_more_prompt_tokens_than_measured_is_extended_not_clamped():
    """Two 6,000-token prompts beside 4 decodes (vLLM admits them in one step of a c32
    6000/200 run): 12,000 new tokens against a lattice that stops at 8,192. Clamped, the
    step would be priced as the 8,192-token one (a third short); it is priced at the top
    plus the slope through the two highest measured rows times the tokens beyond."""
    price = ProfilePrice(read_profile(H100_MIXED))
    interp = price.interpolator
    step = StepShape(decode_requests=4, decode_kv_tokens=4 * 2050, draft_tokens=4 * K,
                     prefill_requests=1, prefill_tokens=12000,
                     total_scheduled_tokens=12000 + 4 * (1 + K))
    got = price(step)
    assert (got.kind, got.basis, got.outside) == ("mixed", "mixed rows",
                                                  "off-grid: prefill tokens")
    at = got.priced_at
    assert (at["prefill_tokens"], at["extended_from"], at["extended_to"]) == (8192, 4096, 12000)

    def row(tokens: int) -> float:
        return interp.price_mixed(4, 1, tokens, got.graph_mode,
                                  decode_kv_tokens=at["decode_kv_tokens"]).seconds
    slope = (row(8192) - row(4096)) / 4096
    assert got.seconds == pytest.approx(row(8192) + slope * (12000 - 8192))
    assert got.seconds > 1.3 * row(8192)
    assert any("beyond the 8192 measured" in note for note in got.clamped)


def test_long_prompts_beside_decodes_are_priced_from_the_prefill_rows():
    """A mixed step of more prompt tokens than the lattice measured, whose prompts the
    prefill rows measured as they are: the prefill rows' price of its prompts plus the
    decodes' share at the lattice's top. Held out by scripts/mixed-beyond-lattice.py (the
    lattice's rows of one 8,192-token prompt removed, each priced from what is left; it
    stops where a row is not priced from the prefill rows): each stays within 5% of its own
    measured time, where the line through the lattice's two top rows was 4-10% short."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts/mixed-beyond-lattice.py"),
                           str(H100_MIXED)], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.strip("|").split("|") for line in done.stdout.splitlines()
            if line.startswith("| ") and "decode batch" not in line]
    assert len(rows) >= 4, done.stdout
    for cells in rows:
        ours, line = (float(cells[i].strip().rstrip("%")) for i in (4, 6))
        assert abs(ours) <= 5.0, cells
        assert abs(ours) < abs(line), cells


def test_a_profile_it_cannot_price_is_refused():
    artifact = profile()
    for changed, says in (
            (read_profile(CPU_V7), "host-timed on a CPU"),
            (dataclasses.replace(artifact, decode=()), "no decode rows"),
            (dataclasses.replace(artifact, prefill=()), "no prefill rows"),
            (dataclasses.replace(artifact, speculative=dataclasses.replace(
                artifact.speculative, draft_depth=2)), r"decode rows are at K=\[3\]"),
            (dataclasses.replace(artifact, speculative=dataclasses.replace(
                artifact.speculative, synthetic_acceptance_length=2.5)), "acceptance length")):
        with pytest.raises(Unpriceable, match=says):
            check_priceable(changed)
    check_priceable(artifact)


def _main(argv, monkeypatch) -> int:
    """sdbench's main in this process, with any server start failing the test."""
    from pytest_sdbench import cli
    from pytest_sdbench.fidelity import served

    def started(*args, **kwargs):
        raise AssertionError("a server was started")
    monkeypatch.setattr(served, "Server", started)
    monkeypatch.setattr("pytest_sdbench.emulate.server.Server", started)
    return cli.main(argv)


@pytest.mark.parametrize("args, says", [
    (["missing.json"], "missing.json"),
    ([str(CPU_V7)], "host-timed on a CPU"),
    ([str(PROFILE), "--", "--speculative-config", '{"num_speculative_tokens": 2}'],
     "K=2; the profile's decode rows are at K=3"),
    ([str(PROFILE), "--", "--block-size=32"], "--block-size: the emulation sets it"),
    ([str(PROFILE), "--", "-tp", "2"], "one rank's"),
    ([str(PROFILE), "--case", "2:64:16"], "--out: a folder for the served runs"),
    ([str(PROFILE), "--passes", "2"], "give --rate or --case"),
    ([str(PROFILE), "--case", "2:2000:100", "--out", "x"], "exceeds the profile's "
     "max_model_len 2048"),
], ids=["unreadable", "cpu-rows", "k", "owned-flag", "tp", "no-out", "passes", "too-long"])
def test_sdbench_emulate_refuses_in_one_line_before_anything_starts(args, says, monkeypatch,
                                                                   capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert _main(["emulate", *args], monkeypatch) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "Triton" not in line]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("sdbench emulate: ")
    assert says in lines[0]
    assert not (tmp_path / "x").exists()


def test_arguments_after_a_double_dash_go_to_vllm_serve():
    from pytest_sdbench.cli import split_passthrough
    from pytest_sdbench.emulate.server import prepare
    assert split_passthrough(["emulate", "P", "--port", "5", "--", "--max-num-seqs", "8"]) == \
        (["emulate", "P", "--port", "5"], ["--max-num-seqs", "8"])
    assert split_passthrough(["serve", "P", "--", "x"]) == (["serve", "P", "--", "x"], [])
    flags, env = prepare(PROFILE, ["--max-num-seqs", "8"]).engine(Path("steps.jsonl"))
    assert flags[:2] == ["--distributed-executor-backend", EXECUTOR_QUALNAME]
    assert flags[-2:] == ["--max-num-seqs", "8"]             # last: it overrides
    settings = json.loads(flags[flags.index("--additional-config") + 1])[SETTINGS_KEY]
    assert settings == {"profile": str(PROFILE), "num_gpu_blocks": 48763,
                        "acceptance_length": AL, "async_scheduling": True, "seed": 0,
                        "step_log": "steps.jsonl", "wake_lead": "adaptive"}
    assert flags[flags.index("--block-size") + 1] == "16"
    assert env.get("PYTHONPATH", str(ROOT)).split(":")[0] == str(ROOT)


def test_the_step_time_check_fails_on_a_wrong_price_or_a_skipped_sleep(shared_price, tmp_path,
                                                                      monkeypatch):
    """The check the served test makes, on steps run in this process: it passes as the
    emulator is, and fails with the price scaled 1.2x or the sleep skipped."""
    from pytest_sdbench.emulate import clock
    interp = profile_price().interpolator

    def decode_steps(name: str) -> StepLogData:
        log = tmp_path / f"{name}.jsonl"
        ex = make_executor(async_on=False, step_log=str(log))
        run(ex, step(new=[new_req("r", 300)], scheduled={"r": 300}))
        for i in range(12):
            drafts = ex.take_draft_token_ids().draft_token_ids[0]
            run(ex, step(cached=cached(["r"], [300 + 3 * i], [1 + i]), scheduled={"r": 1 + K},
                         spec={"r": drafts}))
        ex.shutdown()
        return read_step_log(log)

    assert step_time_problems(decode_steps("right"), interp) == []
    real = ProfilePrice.__call__

    def scaled(self, shape):
        priced = real(self, shape)
        return dataclasses.replace(priced, seconds=1.2 * priced.seconds)
    with monkeypatch.context() as patch:
        patch.setattr(ProfilePrice, "__call__", scaled)
        problems = step_time_problems(decode_steps("price-1.2x"), interp)
    assert problems
    assert all("the profile's price" in p for p in problems), problems
    with monkeypatch.context() as patch:
        patch.setattr(clock.time, "sleep", lambda seconds: None)
        problems = step_time_problems(decode_steps("no-sleep"), interp)
    assert any("median |measured - price|" in p for p in problems), problems


def test_the_fixture_starts_a_server_once_a_profile_and_stops_them_all(tmp_path_factory):
    from pytest_sdbench.plugin.emulated import EmulatedServers
    started = []

    class Fake:
        url = "http://127.0.0.1:1"
        stopped = False

        def stop(self):
            self.stopped = True

    def start(prepared, folder, say):
        started.append(Fake())
        return started[-1]
    servers = EmulatedServers(tmp_path_factory, start=start)
    assert servers(PROFILE) == servers(str(PROFILE)) == "http://127.0.0.1:1"
    servers(PROFILE, "--max-num-seqs", "8")
    assert len(started) == 2
    servers.close()
    assert all(s.stopped for s in started)


def test_a_test_of_the_fixture_is_marked_as_starting_an_engine():
    from pytest_sdbench.plugin.markers import starts_engine
    assert starts_engine(SimpleNamespace(fixturenames=["sdbench_emulated_server"]))
    assert not starts_engine(SimpleNamespace(fixturenames=["tmp_path"]))


# ---- with an engine: the fixture serves the H200 profile on this CPU host ------------------

def _post(url: str, body: dict):
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(request, timeout=120)


def _stream(url: str, model: str, prompt_tokens: int, max_tokens: int, **more) -> list[dict]:
    body = {"model": model, "prompt": " ".join(f"t{10 + i}" for i in range(prompt_tokens)),
            "max_tokens": max_tokens, "stream": True, "temperature": 0,
            "stream_options": {"include_usage": True}, **more}
    chunks = []
    with _post(f"{url}/v1/completions", body) as answer:
        for line in answer:
            text = line.decode().strip()
            if text.startswith("data: ") and text != "data: [DONE]":
                chunks.append(json.loads(text[len("data: "):]))
    return chunks


def _model(url: str) -> str:
    with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as answer:
        return json.loads(answer.read())["data"][0]["id"]


@pytest.mark.sdbench_engine
@pytest.mark.xdist_group(GROUP)
def test_the_fixture_streams_completions_as_vllm_serve_gives_them(sdbench_emulated_server):
    url = sdbench_emulated_server(PROFILE)
    model = _model(url)
    chunks = _stream(url, model, 64, 40, ignore_eos=True)
    texts = [c for c in chunks if c["choices"]]
    assert [c["choices"][0]["finish_reason"] for c in texts][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in texts[:-1])
    assert chunks[-1]["usage"]["completion_tokens"] == 40
    assert chunks[-1]["usage"]["prompt_tokens"] == 64
    words = " ".join(c["choices"][0]["text"] for c in texts).split()
    assert len(words) == 40                                  # one word a token
    # a chunk a step, about AL tokens each (speculative decoding: several tokens a chunk)
    assert 2.0 <= 39 / (len(texts) - 1) <= 3.5
    # a stop string: finish_reason "stop", as vLLM gives it
    stopped = [c for c in _stream(url, model, 16, 40, stop=["t"]) if c["choices"]]
    assert stopped[-1]["choices"][0]["finish_reason"] == "stop"
    # a long prompt whose decodes read more KV than the profile measured (2022 a request)
    chunks = _stream(url, model, 2000, 40, ignore_eos=True)
    assert chunks[-1]["usage"]["completion_tokens"] == 40


@pytest.mark.sdbench_engine
@pytest.mark.xdist_group(GROUP)
def test_vllm_bench_serve_completes_through_the_fixture(sdbench_emulated_server, tmp_path):
    from pytest_sdbench.fidelity.served_settings import Traffic, bench_command, child_env
    url = sdbench_emulated_server(PROFILE)
    port = int(url.rsplit(":", 1)[1])
    run_spec = Traffic("c4", None, 4, 8, 64, 24, 0, 0)
    done = subprocess.run(bench_command(_model(url), port, run_spec, tmp_path),
                          capture_output=True, text=True, env=child_env(), timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / run_spec.result).read_text())
    assert (result["completed"], result["failed"]) == (8, 0)
    assert result["input_lens"] == [64] * 8
    assert result["output_lens"] == [24] * 8
    chunks = sum(len(itls) for itls in result["itls"])
    assert 2.0 <= 8 * 23 / chunks <= 3.5                     # tokens a chunk: about AL


@pytest.mark.sdbench_engine
@pytest.mark.xdist_group(GROUP)
def test_each_emulated_step_took_the_profiles_price(sdbench_emulated_server):
    """After the requests above (and some of its own): every step of the served log at the
    profile's price, exactly on the virtual timeline and within the sleep's tolerance on
    the wall clock (step_time_problems); async scheduling at work; the long prompt's
    decodes outside the measured context, priced at the nearest and counted."""
    server = sdbench_emulated_server.server(PROFILE)
    model = _model(server.url)
    for _ in range(2):
        _stream(server.url, model, 32, 24, ignore_eos=True)
    log = read_step_log(server.step_log)
    assert log.header["async_scheduling"] is True
    assert log.header["async_scheduling_turned_on"] is True
    assert len(log.steps) >= 30
    assert step_time_problems(log, profile_price().interpolator) == []
    assert sum(s["overlapped"] for s in log.steps) >= len(log.steps) / 2
    outside = [s for s in log.steps if s["outside"]]
    assert "off-grid: context" in {s["outside"] for s in outside}
    errors = [(s["measured_s"] - s["price_s"]) / s["price_s"] for s in log.steps if s["waited"]]
    print(f"\nemulated steps: {len(log.steps)}, waited {len(errors)}; |error|/price median "
          f"{statistics.median(abs(e) for e in errors):.2%}, p90 "
          f"{sorted(abs(e) for e in errors)[int(0.9 * len(errors))]:.2%}, max "
          f"{max(abs(e) for e in errors):.2%}; price median "
          f"{1e3 * statistics.median(s['price_s'] for s in log.steps):.2f} ms")


@pytest.mark.sdbench_engine
@pytest.mark.xdist_group(GROUP)
def test_sdbench_emulate_serves_traffic_into_the_serve_folder(tmp_path):
    from pytest_sdbench.fidelity.served import MANIFEST_FILE
    out = tmp_path / "emulated"
    done = subprocess.run([sys.executable, "-m", "pytest_sdbench.cli", "emulate", str(PROFILE),
                           "--case", "2:64:16:6", "--out", str(out)], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert manifest["status"] == "done"
    assert manifest["server"]["engine"] == "emulated"
    assert manifest["server"]["exit_status"] == 0
    assert manifest["server"]["processes_left"] is False
    command = manifest["server"]["command"]
    assert command[command.index("--distributed-executor-backend") + 1] == EXECUTOR_QUALNAME
    assert command[command.index("--load-format") + 1] == "dummy"
    (run_entry,) = manifest["runs"]
    result = json.loads((out / run_entry["result"]).read_text())
    assert (result["completed"], result["output_lens"]) == (6, [16] * 6)
    assert run_entry["engine_metrics_ms"]["time_to_first_token"] > 0
    emulation = manifest["emulation"]
    assert emulation["async_scheduling"] is True
    assert emulation["async_scheduling_turned_on_over_the_platform"] is True
    assert emulation["steps"]["steps"] > 0
    assert emulation["steps"]["outside"] == 0
    assert (out / "steps.jsonl").is_file()
    assert (out / "server.log").is_file()
    assert "sdbench emulate: " in done.stderr
    assert f"wrote {out / MANIFEST_FILE}" in done.stdout
