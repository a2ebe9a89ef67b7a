"""Coherent forgeries of real artifacts are refused; harmless re-encodings are not; hostile
JSON is refused in one line within a second.

Each forgery breaks one rule of one class of issue #9 and keeps the rest of the artifact
consistent (sums, summaries, coverage, and the digests, which anyone can recompute: they
are unkeyed sha256), so that only the broken rule is left to catch it. The test requires
that the validator refuses it, that the message naming the broken rule is there, and that
every message it prints is one the forgery explains: a forgery that trips an unrelated
rule is not coherent, and fails the test too.

Bases (tests/forge.py): the CPU v7 fixture (rounds, settled decode steps, mixed steps), the
CPU v6 fixture (read as legacy v6: two phases), the CPU v4 fixture and a v4 H200 production
profile (read as legacy v4), and the committed H200 agg artifacts (graphs and eager; schema
v3, read as legacy); a legacy base's forgeries stay in its version's shape. A forgery of a
row rule may land on any phase's row the base holds (a mixed row's on cpu-v7); the mixed
forgeries apply where mixed rows are (the current schema)."""

from __future__ import annotations

import copy
import gzip
import json
import lzma
import math
import random
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pytest_sdbench.artifact.validate.report import validate_data
from pytest_sdbench.cli import main
from pytest_sdbench.wire.contract import (
    MAX_ARTIFACT_BYTES,
    MAX_JSON_DEPTH,
    MAX_REPORTED_VIOLATIONS,
    SCHEMA_VERSION,
    SOURCE_FOR_DEVICE,
    STEP_SECONDS_MAX,
    STEP_SECONDS_MIN,
    TIMER_FOR_SOURCE,
    WARMUP_MAX_PASSES,
)

from . import forge
from .forge import (
    BASES,
    cohere,
    load,
    max_native_id,
    observations,
    reseal,
    set_native_id,
)

CLASSES = ("relabel", "shape", "timing", "grid", "kv_groups", "identity_header", "legacy",
           "header", "repeats", "rounds")
Draw = Callable


@dataclass(frozen=True)
class Forgery:
    cls: str
    name: str
    make: Callable[[dict, Draw], None]   # edits the artifact's JSON in place
    expect: str                          # every message matches it
    must: str                            # and at least one message matches this
    applies: Callable[[dict], bool]


FORGERIES: list[Forgery] = []


def forgery(cls: str, expect: str, must: str | None = None, applies=lambda d: True):
    assert cls in CLASSES

    def register(make):
        FORGERIES.append(Forgery(cls, make.__name__, make, expect, must or expect, applies))
        return make
    return register


# ---- predicates over a base ------------------------------------------------------------

def v4(d):
    """Schema v4 or later: the rules v4 introduced (settings, environment, repeats, ranks)."""
    return d["schema_version"] >= 4


def v5(d):
    """Schema v5: rounds, their orders and the host canary."""
    return d["schema_version"] >= 5


def v6(d):
    """Schema v6: settled decode steps (several a work item) and the GPU clock."""
    return d["schema_version"] >= 6


def cpu(d):
    return d["device"] == "cpu"


def cuda(d):
    return d["device"] == "cuda"


def synthetic(d):
    return d["speculative"]["acceptance_control"] == "synthetic"


def graphs(d):
    return any(o["graph_mode"] != "eager" for _, o in observations(d))


def captures(d):
    return cuda(d) and d["identity"]["cudagraph_mode"]["value"] != "none"


def repeats_of(d, obs) -> list[dict]:
    """Every observation of obs's point (a point is warmed up once, before its repeats)."""
    phase = next(p for p, o in observations(d) if o is obs)
    return [o for o in d[phase] if o["point_index"] == obs["point_index"]]


def work_item(d, obs) -> list[dict]:
    """Every step of obs's work item, one sample: its point's observations of its round and
    repeat (several settled decode steps of one run; else obs alone)."""
    phase = next(p for p, o in observations(d) if o is obs)
    return [o for o in d[phase] if (o["point_index"], o.get("round"), o.get("repeat")) ==
            (obs["point_index"], obs.get("round"), obs.get("repeat"))]


def pick(draw: Draw, items):
    return draw(st.sampled_from(list(items)))


def pick_obs(draw: Draw, d, phase=None, batch=1):
    pool = [o for p, o in observations(d) if phase in (None, p)
            and len(o["snapshot"]["requests"]) >= batch]
    return pick(draw, pool)


# ---- 1. coherent CPU <-> CUDA relabel ------------------------------------------------------

NAME = {"cpu": "x86_64", "cuda": "NVIDIA H200"}
CLOCK = {"sm_mhz_before": 1980, "sm_mhz_after": 1965, "max_sm_mhz": 1980,
         "reasons": ["sw_power_cap"], "capped": True}
BACKEND = {"cpu": "CPU_ATTN", "cuda": "FLASH_ATTN"}


def naturalize(d):
    d["speculative"].update(acceptance_control="natural", synthetic_acceptance_length=None)
    d["identity"]["acceptance_control"]["value"] = "natural"
    for point in d["grid"]["decode"]:
        point["acceptance_length"] = None
    for obs in d["decode"]:
        obs["point"]["acceptance_length"] = None
    forge.dedupe_decode(d)   # a sweep of requested ALs collapses to one natural point


def relabel(d, keep: str) -> None:
    """Flip the device everywhere it is stated; fix every tell but ``keep``."""
    to = "cuda" if cpu(d) else "cpu"
    ident = d["identity"]
    d["device"] = ident["device"]["value"] = to
    for _, obs in observations(d):
        obs["provenance"]["device"] = to
        obs["timing"]["source"] = SOURCE_FOR_DEVICE[to]
        obs["provenance"]["timer"] = TIMER_FOR_SOURCE[SOURCE_FOR_DEVICE[to]]
    if d.get("environment"):
        d["environment"]["other_gpu_processes"] = 0 if to == "cuda" else None
    if v6(d):   # the GPU clock a CUDA run reads beside each work item, as a forger writes it
        for _, obs in observations(d):
            obs["gpu_clock"] = copy.deepcopy(CLOCK) if to == "cuda" else None
    for r in d.get("rounds", []):   # the canary's kernel launch reading is CUDA's alone
        for reading in (r["canary_before"], r["canary_after"]):
            if reading is not None:
                reading["launch_seconds"] = 3e-3 if to == "cuda" else None
    if keep != "device_name":
        ident["device_name"]["value"] = NAME[to]
        for _, obs in observations(d):
            if keep != "row_device_name":
                obs["provenance"]["device_name"] = NAME[to]
    if keep != "attention_backend":
        ident["attention_backend"]["value"] = BACKEND[to]
    if to == "cpu":
        if v4(d) and ident["settings"]["cudagraph_capture_sizes"]["status"] == "resolved":
            ident["settings"]["cudagraph_capture_sizes"]["value"] = []
        if keep != "cudagraph_mode":
            ident["cudagraph_mode"]["value"] = "none"
        if keep != "graph_mode":
            for _, obs in observations(d):
                obs["graph_mode"] = "eager"
        if keep != "synthetic":
            naturalize(d)
    cohere(d)


DEVICE_NAME = r"^identity\.device_name: '[^']*' on a '(cpu|cuda)' run; a GPU's name begins with"
# Names torch.cuda.get_device_name gives real GPUs.
GPU_NAMES = ("NVIDIA H200", "Tesla T4", "Tesla V100-SXM2-16GB", "Quadro RTX 6000",
             "NVIDIA GeForce RTX 4090", "TITAN V", "AMD Instinct MI300X")


def rename_device(d, name: str) -> None:
    d["identity"]["device_name"]["value"] = name
    for _, obs in observations(d):
        obs["provenance"]["device_name"] = name
    reseal(d)


@forgery("relabel", DEVICE_NAME)
def relabel_device_name(d, draw):
    relabel(d, "device_name")


@forgery("relabel", DEVICE_NAME + r" one of NVIDIA, Tesla, .*, a CPU's with none$", applies=cpu)
def gpu_name_on_cpu(d, draw):
    rename_device(d, pick(draw, GPU_NAMES))


@forgery("relabel", r"^(prefill|decode|mixed)\[\d+\]\.provenance\.device_name: '[^']*' differs "
         r"from identity\.device_name")
def relabel_rows_device_name(d, draw):
    relabel(d, "row_device_name")


@forgery("relabel", r"^identity\.attention_backend: '\w+' is a (cpu|cuda) backend, on a")
def relabel_attention_backend(d, draw):
    relabel(d, "attention_backend")


@forgery("relabel", r"^identity\.cudagraph_mode: '\w+' on a 'cpu' run", applies=captures)
def relabel_cudagraph_mode(d, draw):
    relabel(d, "cudagraph_mode")


@forgery("relabel", r"^(prefill|decode|mixed)\[\d+\]\.graph_mode: '(full|piecewise)' on a 'cpu' "
         r"run", applies=graphs)
def relabel_graph_modes(d, draw):
    relabel(d, "graph_mode")


@forgery("relabel", r"^speculative\.acceptance_control: 'synthetic' on a 'cpu' run",
         applies=synthetic)
def relabel_synthetic_acceptance(d, draw):
    relabel(d, "synthetic")


@forgery("relabel", r"^producer\.engine_version: '[^']*' differs from identity\.engine_version")
def engine_version_differs(d, draw):
    version = pick(draw, ["0.25.1", "0.33.0", "1.0.0"])
    if draw(st.booleans()):
        d["producer"]["engine_version"] = version
    else:
        d["identity"]["engine_version"]["value"] = version
    reseal(d)


@forgery("relabel", r"^(prefill|decode|mixed)\[\d+\]\.(graph_mode: '(full|piecewise)'.*|"
         r"warmup_passes: \d+ under the by_shape(_seeded)? warm-up, yet no earlier \w+ point of "
         r"its compiled shape \((full|piecewise), \d+ tokens\) settled; .*)$",
         must=r"^(prefill|decode|mixed)\[\d+\]\.graph_mode: '(full|piecewise)'", applies=cpu)
def graph_mode_on_cpu(d, draw):
    """A CPU step said to run in a CUDA graph. Its compiled shape changes with its mode: under
    a by_shape warm-up a point that took one pass on an earlier point's settled shape no
    longer has one, a second tell."""
    pick_obs(draw, d)["graph_mode"] = pick(draw, ["full", "piecewise"])


# ---- 2. single_step shape ----------------------------------------------------------------

@forgery("shape", r"^prefill\[\d+\]\.snapshot: requests\[\d+\]\.prompt_tokens is \d+, the "
         r"point needs \d+$")
def prefill_chunk(d, draw):
    obs = pick_obs(draw, d, "prefill")
    pick(draw, obs["snapshot"]["requests"])["prompt_tokens"] += draw(st.integers(1, 8192))
    cohere(d)


@forgery("shape", r"^(prefill|decode|mixed)\[\d+\]\.snapshot: lists a request twice "
         r"\(\['[^']+'\]\)$")
def request_listed_twice(d, draw):
    """One request given another's ID, in every step of its run (settled decode steps run
    one batch)."""
    obs = pick_obs(draw, d, batch=2)
    requests = obs["snapshot"]["requests"]
    j = draw(st.integers(1, len(requests) - 1))
    old, new = requests[j]["request_id"], requests[0]["request_id"]
    for step in work_item(d, obs):
        for request in step["snapshot"]["requests"]:
            if request["request_id"] == old:
                request["request_id"] = new
    cohere(d)


@forgery("shape", r"^((prefill|decode|mixed)\[\d+\]\.native_iteration_id: must be >= 1 \(vLLM "
         r"numbers steps from 1\), got -?\d+|.*\.snapshot\.corrections\[\d+\]: .*|"
         r"rounds\[\d+\]\.order: .* has native_iteration_id -?\d+, not after .*|"
         r"decode\[\d+\]\.native_iteration_id: -?\d+ \(round \d+\) does not follow step \d+'s .*)$",
         must=r"\.native_iteration_id: must be >= 1")
def native_id_not_positive(d, draw):
    cohere(d)
    set_native_id(pick_obs(draw, d), -draw(st.integers(0, 10**6)))


@forgery("shape", r"^(prefill|decode|mixed)\[\d+\]\.snapshot\.queue\.running: \d+, yet the step "
         r"schedules \d+ requests \(every scheduled request is running\)$")
def fewer_running_than_scheduled(d, draw):
    snap = pick_obs(draw, d)["snapshot"]
    snap["queue"]["running"] = draw(st.integers(0, len(snap["requests"]) - 1))
    cohere(d)


# ---- 3. timing sums and bounds --------------------------------------------------------------

STEP_BOUND = r"^(prefill|decode|mixed)\[\d+\]\.timing\.seconds: [-+.e\d]+ (is outside \[|for \d+ " \
             r"scheduled tokens exceeds)"


@forgery("timing", STEP_BOUND)
def every_time_scaled(d, draw):
    forge.scale_times(d, pick(draw, [1e3, 1e4, 1e6]))
    cohere(d)


@forgery("timing", STEP_BOUND)
def one_step_out_of_bounds(d, draw):
    high = STEP_SECONDS_MAX[d["device"]] * draw(st.floats(1.001, 1e6))
    low = draw(st.floats(1e-12, STEP_SECONDS_MIN * 0.99))
    pick_obs(draw, d)["timing"]["seconds"] = pick(draw, [high, low, 1e6])
    cohere(d)


@forgery("timing", r"^measured_seconds: [-+.e\d]+ != [-+.e\d]+, the sum of the retained step "
         r"times$")
def measured_is_not_the_sum(d, draw):
    cohere(d)
    d["measured_seconds"] *= draw(st.floats(0.0, 0.999))


@forgery("timing", r"^(timed|measured)_seconds: [-+.e\d]+ exceeds elapsed_seconds")
def elapsed_below_the_steps(d, draw):
    cohere(d)
    longest = d.get("timed_seconds") or d["measured_seconds"]
    d["elapsed_seconds"] = longest * draw(st.floats(0.0, 0.999))


@forgery("timing", r"^timed_seconds: [-+.e\d]+ is less than measured_seconds", applies=v4)
def timed_below_measured(d, draw):
    cohere(d)
    d["timed_seconds"] = d["measured_seconds"] * draw(st.floats(0.0, 0.999))


@forgery("timing", r"^elapsed_seconds: [-+.e\d]+ exceeds created_at - started_at", applies=v4)
def elapsed_beyond_the_clock(d, draw):
    cohere(d)
    span = (forge._when(d["created_at"]) - forge._when(d["started_at"])).total_seconds()
    d["elapsed_seconds"] = span + 2.0 + draw(st.floats(0.01, 1e4))


# ---- 4. grid rules --------------------------------------------------------------------------

MIXED_BATCHES = ("decode_batch_size", "prefill_batch_size")   # a mixed point's two batches


def grid_phases(d):
    return [p for p in forge.PHASES if d["grid"].get(p)]


@forgery("grid", r"^grid\.(prefill|decode|mixed)\[\d+\]: duplicates (prefill|decode|mixed)\[\d+\]$")
def duplicated_point(d, draw):
    phase = pick(draw, grid_phases(d))
    index = draw(st.integers(0, len(d["grid"][phase]) - 1))
    new = len(d["grid"][phase])
    d["grid"][phase].append(copy.deepcopy(d["grid"][phase][index]))
    next_id = max_native_id(d) + 1
    for obs in [o for o in d[phase] if o["point_index"] == index]:
        twin = copy.deepcopy(obs)
        twin["point_index"] = new
        set_native_id(twin, next_id)
        next_id += 1
        d[phase].append(twin)
    cohere(d)


@forgery("grid", r"^grid\.((prefill|decode)\[\d+\]\.batch_size|mixed\[\d+\]\.(decode|prefill)_"
         r"batch_size): must be >= 1, got 0$")
def batch_size_zero(d, draw):
    """A point of no requests (a mixed point's decode batch or its prefills), listed and
    skipped."""
    phase = pick(draw, grid_phases(d))
    point = copy.deepcopy(pick(draw, d["grid"][phase]))
    point[pick(draw, MIXED_BATCHES) if phase == "mixed" else "batch_size"] = 0
    d["grid"][phase].append(point)
    forge.drop_point(d, phase, len(d["grid"][phase]) - 1, "batch of zero requests")
    cohere(d)


@forgery("grid", r"^grid\.decode\[\d+\]\.acceptance_length: (must lie in \[1, draft_depth\+1 = "
         r"\d+\], got [-+.e\d]+|[-+.e\d]+ under natural acceptance .*)$",
         must=r"acceptance_length: must lie in")
def acceptance_length_outside_one_to_k_plus_one(d, draw):
    k = d["speculative"]["draft_depth"]
    al = pick(draw, [k + 1.5, draw(st.floats(k + 1.001, 64.0)), draw(st.floats(0.0, 0.999))])
    if synthetic(d):
        index = draw(st.integers(0, len(d["grid"]["decode"]) - 1))
        d["grid"]["decode"][index]["acceptance_length"] = al
        for obs in d["decode"]:
            if obs["point_index"] == index:
                obs["point"]["acceptance_length"] = al
    else:   # a natural engine: the point can only be listed, skipped
        point = dict(copy.deepcopy(d["grid"]["decode"][0]), acceptance_length=al)
        d["grid"]["decode"].append(point)
        forge.drop_point(d, "decode", len(d["grid"]["decode"]) - 1, "not measurable")
    cohere(d)


@forgery("grid", r"^(speculative\.draft_depth: must be >= 1 under eagle3, got 0|"
         r"grid\.(decode|mixed)\[\d+\]\.draft_depth: must be >= 1, got 0)$|" + STEP_BOUND[1:],
         must=r"^grid\.decode\[\d+\]\.draft_depth: must be >= 1, got 0$")
def draft_depth_zero_under_eagle3(d, draw):
    """K=0 keeps the times of K=3 steps over a quarter of the tokens: on a slow step that
    may also cross the per-token bound, a second tell. A mixed point's decodes verify the
    same K: they go to 0 with it (their drafts and accepted drafts none)."""
    d["speculative"]["draft_depth"] = 0
    d["identity"]["draft_depth"]["value"] = 0
    if synthetic(d):
        d["speculative"]["synthetic_acceptance_length"] = 1.0
    for point in d["grid"]["decode"]:
        point.update(draft_depth=0, acceptance_length=1.0 if synthetic(d) else None)
    for obs in d["decode"]:
        obs["point"] = d["grid"]["decode"][obs["point_index"]]
        for request in obs["snapshot"]["requests"]:
            request["draft_tokens"] = 0
        obs["snapshot"]["total_scheduled_tokens"] = len(obs["snapshot"]["requests"])
        obs["accepted_tokens"] = [0] * len(obs["accepted_tokens"])
        obs["observed_acceptance_length"] = obs["run_acceptance_length"] = 1.0
    for point in d["grid"].get("mixed", []):
        point.update(draft_depth=0, acceptance_length=1.0 if synthetic(d) else None)
    for obs in d.get("mixed", []):
        obs["point"] = d["grid"]["mixed"][obs["point_index"]]
        for request in obs["snapshot"]["requests"]:
            request["draft_tokens"] = 0
        obs["snapshot"]["total_scheduled_tokens"] = sum(
            r["new_tokens"] for r in obs["snapshot"]["requests"])
        obs["accepted_tokens"] = [0] * len(obs["accepted_tokens"])
    forge.dedupe_decode(d)   # K=0 leaves one AL (1): a sweep of ALs collapses
    cohere(d)


@forgery("grid", r"^grid\.((prefill|decode)\[\d+\]: (needs batch_size\*\([a-z_+\d]+\) = \d+ KV "
         r"tokens, kv_capacity\.tokens is \d+|the batch needs more KV than the engine holds "
         r"\(\d+ tokens\): .* = \d+|batch_size\*\(context\+output\) needs \d+ KV tokens, the "
         r"engine holds \d+)|mixed\[\d+\]: the step's requests need \d+ KV tokens, the engine "
         r"holds \d+)$")
def kv_capacity_too_small_for_the_grid(d, draw):
    kv = d["kv_capacity"]
    kv["num_blocks"] = draw(st.integers(1, 4))
    kv["tokens"] = kv["num_blocks"] * kv["block_size"]
    if "rank_num_blocks" in kv:
        kv["rank_num_blocks"] = [kv["num_blocks"]]
    reseal(d)


# ---- 4b. the engine's limits (identity.settings), re-applied to the grid -------------------

def limited(d):
    """An artifact that states its engine's limits (schema v4)."""
    return v4(d) and d["identity"]["settings"]["max_num_seqs"]["status"] == "resolved"


def set_setting(d, name: str, value) -> None:
    """A setting changed where the artifact states it: in effect, and as the user asked."""
    d["identity"]["settings"][name]["value"] = value
    if name in d["identity"]["settings"]["user_engine_args"]:
        d["identity"]["settings"]["user_engine_args"][name] = json.dumps(value)
    reseal(d)


def largest_batch(d) -> int:
    return max(p["batch_size"] for phase in ("prefill", "decode") for p in d["grid"][phase])


@forgery("grid", r"^grid\.((prefill|decode)\[\d+\]\.batch_size: \d+|mixed\[\d+\]: "
         r"decode_batch_size \+ prefill_batch_size = \d+) exceeds max_num_seqs \d+$",
         must=r"^grid\.(prefill|decode)\[\d+\]\.batch_size: \d+ exceeds max_num_seqs",
         applies=lambda d: limited(d) and largest_batch(d) > 1)
def max_num_seqs_below_the_batches(d, draw):
    set_setting(d, "max_num_seqs", draw(st.integers(1, largest_batch(d) - 1)))


@forgery("grid", r"^grid\.(prefill\[\d+\]: batch_size\*new_tokens = \d+ exceeds "
         r"max_num_batched_tokens 8; the step would be chunked|(decode\[\d+\]\.batch_size|"
         r"mixed\[\d+\]\.decode_batch_size): re-admitting \d+ cached prompts takes up to \d+ "
         r"tokens in one step, over max_num_batched_tokens 8|mixed\[\d+\]: decode_batch_size\*"
         r"\(1\+draft_depth\) \+ prefill_batch_size\*prefill_tokens = \d+ exceeds "
         r"max_num_batched_tokens 8; it would not be one step)$", applies=limited)
def max_num_batched_tokens_of_8(d, draw):
    set_setting(d, "max_num_batched_tokens", 8)


@forgery("grid", r"^grid\.((prefill\[\d+\]: cached_prefix_tokens\+new|mixed\[\d+\]: "
         r"cached_prefix_tokens\+prefill)_tokens = \d+ exceeds max_model_len 16|(decode|mixed)"
         r"\[\d+\]\.context_tokens: \d+ leaves no room for the run of \d+ output tokens within "
         r"max_model_len 16)$", applies=limited)
def max_model_len_of_16(d, draw):
    set_setting(d, "max_model_len", 16)


def cached(d):
    return limited(d) and any(p["cached_prefix_tokens"] for p in d["grid"]["prefill"])


@forgery("grid", r"^grid\.prefill\[\d+\]\.cached_prefix_tokens: must be a multiple of the KV "
         r"block size \d+ to be an exact cache hit, got \d+$", applies=cached)
def prefix_not_whole_blocks(d, draw):
    """A cached prefix cut short of its last block, every row of the point made to fit."""
    index = pick(draw, [i for i, p in enumerate(d["grid"]["prefill"])
                        if p["cached_prefix_tokens"]])
    point = d["grid"]["prefill"][index]
    prefix = point["cached_prefix_tokens"] - draw(
        st.integers(1, d["kv_capacity"]["block_size"] - 1))
    point["cached_prefix_tokens"] = prefix
    for obs in d["prefill"]:
        if obs["point_index"] == index:
            obs["point"] = copy.deepcopy(point)
            obs["cache_hit_tokens"] = [prefix] * point["batch_size"]
            for request in obs["snapshot"]["requests"]:
                request.update(kv_tokens=prefix, prompt_tokens=prefix + point["new_tokens"])
    cohere(d)


# ---- 4c. the engine settings against themselves, the KV capacity and the device -----------

def setting(d, name: str):
    return d["identity"]["settings"][name]["value"]


@forgery("grid", r"^identity\.settings\.block_size: \d+ differs from kv_capacity\.block_size "
         r"\d+$", applies=limited)
def settings_block_size_differs(d, draw):
    block = d["kv_capacity"]["block_size"]
    set_setting(d, "block_size", pick(draw, [b for b in (8, 16, 32, 64, 128) if b != block]))


@forgery("grid", r"^(identity\.cudagraph_mode: '\w+' under identity\.settings\.enforce_eager "
         r"true; an eager engine's mode is 'none'|(prefill|decode|mixed)\[\d+\]\.graph_mode: "
         r"'(full|piecewise)', yet identity\.settings\.enforce_eager is true .*)$",
         must=r"^identity\.cudagraph_mode: '\w+' under identity\.settings\.enforce_eager true",
         applies=lambda d: limited(d) and captures(d))
def enforce_eager_with_graphs(d, draw):
    """An engine said eager whose identity captured graphs (its rows made eager or not)."""
    if draw(st.booleans()):
        for _, obs in observations(d):
            obs["graph_mode"] = "eager"
    set_setting(d, "enforce_eager", True)


@forgery("grid", r"^identity\.settings\.cudagraph_capture_sizes: \[[\d, ]+\] on a 'cpu' run; a "
         r"CPU engine captures no CUDA graphs$", applies=lambda d: limited(d) and cpu(d))
def capture_sizes_on_cpu(d, draw):
    set_setting(d, "cudagraph_capture_sizes",
                sorted(draw(st.sets(st.integers(1, 512), min_size=1, max_size=8))))


@forgery("grid", r"^identity\.settings\.gpu_memory_utilization: must lie in \(0, 1\], got "
         r"-?[.\de+]+$", applies=limited)
def gpu_memory_utilization_outside_0_1(d, draw):
    set_setting(d, "gpu_memory_utilization",
                pick(draw, [0.0, -0.5, 1.01, 92.0, draw(st.floats(1.0001, 100.0))]))


@forgery("grid", r"^identity\.settings\.(\w+: must be a positive integer, got -?[.\d]+|"
         r"block_size: -?[.\d]+ differs from kv_capacity\.block_size \d+)$",
         must=r"^identity\.settings\.\w+: must be a positive integer", applies=limited)
def limit_not_a_positive_integer(d, draw):
    names = [n for n in ("max_num_seqs", "max_num_batched_tokens", "max_model_len",
                         "block_size", "kv_cache_memory_bytes")
             if d["identity"]["settings"][n]["status"] == "resolved"]
    set_setting(d, pick(draw, names), pick(draw, [0, -1, -draw(st.integers(2, 10**6)), 2.5]))


# ---- 5. KV groups -----------------------------------------------------------------------------

@forgery("kv_groups", r"^kv_capacity\.groups: every layer \(\d+\) is a draft layer; the "
         r"target's layers are missing$")
def target_layers_removed(d, draw):
    kv = d["kv_capacity"]
    for group in kv["groups"]:
        group["layer_names"] = list(group["draft_layers"])
    kv["groups"] = [g for g in kv["groups"] if g["layer_names"]]
    reseal(d)


@forgery("kv_groups", r"^kv_capacity\.draft_layer_names: empty; the draft's layers must be in "
         r"the capacity$")
def draft_layers_emptied(d, draw):
    kv = d["kv_capacity"]
    kv["draft_layer_names"] = []
    for group in kv["groups"]:
        group["draft_layers"] = []
    reseal(d)


@forgery("kv_groups", r"^kv_capacity\.groups\[\d+\]\.block_size: \d+ differs from "
         r"kv_capacity\.block_size \d+$")
def group_block_size_differs(d, draw):
    group = pick(draw, d["kv_capacity"]["groups"])
    block = group["block_size"]
    group["block_size"] = draw(st.integers(1, 4 * block).filter(lambda b: b != block))
    reseal(d)


@forgery("kv_groups", r"^kv_capacity\.source: must say where the capacity was read, got "
         r"'(\s*|\\t)'$")
def kv_source_empty(d, draw):
    d["kv_capacity"]["source"] = pick(draw, ["", " ", "\t"])
    reseal(d)


@forgery("kv_groups", r"^kv_capacity\.groups\[\d+\]\.draft_layers: \[.*\] differs from the "
         r"group's layers among kv_capacity\.draft_layer_names")
def group_draft_layers_differ(d, draw):
    group = pick(draw, d["kv_capacity"]["groups"])
    group["draft_layers"] = pick(draw, [[], group["layer_names"][:1]])
    if group["draft_layers"] == [n for n in group["layer_names"]
                                 if n in d["kv_capacity"]["draft_layer_names"]]:
        group["draft_layers"] = []
    reseal(d)


@forgery("kv_groups", r"^kv_capacity\.rank_num_blocks: \d+ entries for "
         r"identity\.tensor_parallel_size 1$", applies=v4)
def rank_blocks_for_more_ranks(d, draw):
    kv = d["kv_capacity"]
    kv["rank_num_blocks"] = [kv["num_blocks"]] * draw(st.integers(2, 8))
    reseal(d)


@forgery("kv_groups", r"^kv_capacity\.rank_num_blocks\[0\]: \d+ differs from "
         r"kv_capacity\.num_blocks \d+$", applies=v4)
def rank_blocks_differ(d, draw):
    kv = d["kv_capacity"]
    kv["rank_num_blocks"] = [kv["num_blocks"] - draw(st.integers(1, kv["num_blocks"] - 1))]
    reseal(d)


# ---- 6. identity vs header ----------------------------------------------------------------

@forgery("identity_header", r"^identity\.method: '\w+' differs from speculative\.method "
         r"'eagle3'$")
def identity_method_differs(d, draw):
    d["identity"]["method"]["value"] = pick(draw, ["ngram", "eagle", "medusa", "draft_model",
                                                   "none"])
    reseal(d)


@forgery("identity_header", r"^speculative\.method: 'none'; only v1-autoregressive")
def method_none_outside_v1(d, draw):
    d["speculative"]["method"] = d["identity"]["method"]["value"] = "none"
    reseal(d)


@forgery("identity_header", r"^speculative\.method: expected one of 'eagle3' or one of 'none', "
         r"got str 'ngram'$")
def method_ngram(d, draw):
    d["speculative"]["method"] = d["identity"]["method"]["value"] = "ngram"
    reseal(d)


@forgery("identity_header", r"^identity\.acceptance_control: '\w+' differs from "
         r"speculative\.acceptance_control '\w+'$")
def acceptance_control_differs(d, draw):
    field = d["identity"]["acceptance_control"]
    field["value"] = "natural" if field["value"] == "synthetic" else "synthetic"
    reseal(d)


@forgery("identity_header", r"^speculative\.synthetic_acceptance_length: [-+.e\dNone]+ under "
         r"(natural|synthetic) acceptance")
def synthetic_length_against_the_control(d, draw):
    spec = d["speculative"]
    spec["synthetic_acceptance_length"] = (
        None if synthetic(d) else draw(st.floats(1.0, spec["draft_depth"] + 1.0)))


@forgery("identity_header", r"^grid\.decode\[\d+\]\.acceptance_length: [-+.e\dNone]+ under "
         r"(natural|synthetic) acceptance \(synthetic needs a requested AL, natural needs "
         r"null\)$")
def requested_length_against_the_control(d, draw):
    index = draw(st.integers(0, len(d["grid"]["decode"]) - 1))
    al = None if synthetic(d) else draw(st.floats(1.0, d["speculative"]["draft_depth"] + 1.0))
    d["grid"]["decode"][index]["acceptance_length"] = al
    for obs in d["decode"]:
        if obs["point_index"] == index:
            obs["point"]["acceptance_length"] = al
    cohere(d)


@forgery("identity_header", r"^speculative\.draft_depth: \d+ differs from identity\.draft_depth "
         r"\d+$")
def identity_draft_depth_differs(d, draw):
    d["identity"]["draft_depth"]["value"] += draw(st.integers(1, 4))
    reseal(d)


@forgery("identity_header", r"^identity\.draft\.(model|architecture): unresolved \('.*'\); an "
         r"eagle3 run names the draft model it ran$")
def draft_identity_unresolved(d, draw):
    d["identity"]["draft"][pick(draw, ["model", "architecture"])] = {
        "status": "unresolved", "value": None, "source": None,
        "reason": pick(draw, ["not recorded", "unknown", "no config"])}
    reseal(d)


# Identity facts no other rule compares, where a blank value is the only tell.
BLANKABLE = [("target", "model"), ("target", "architecture"), ("target", "dtype"),
             ("draft", "model"), ("draft", "architecture"), ("draft", "dtype"),
             ("attention_backend",), ("distributed_executor_backend",), ("communication",),
             ("settings", "kv_cache_dtype")]


def resolved_strings(d) -> list[tuple[str, ...]]:
    def at(path):
        node = d["identity"]
        for key in path:
            node = node.get(key, {})
        return node
    return [p for p in BLANKABLE if at(p).get("status") == "resolved"
            and isinstance(at(p).get("value"), str)]


@forgery("identity_header", r"^identity\.[\w.]+: resolved to a blank string '(\s*|\\t)'; a "
         r"resolved fact names what was read")
def identity_value_blanked(d, draw):
    *parents, name = pick(draw, resolved_strings(d))
    node = d["identity"]
    for key in parents:
        node = node[key]
    node[name]["value"] = pick(draw, ["", " ", "\t"])
    reseal(d)


# ---- 7. legacy labels ---------------------------------------------------------------------

LABEL = r"^(schema_version: \d \([\w-]+\) does not fit the document: .* is a field of " \
        r"schema_version \d and later; the artifact is relabelled|mode: 'agg' did not exist in " \
        r"schema_version 2 .*)$"


@forgery("legacy", LABEL, must=r"^schema_version: \d .* does not fit the document")
def relabelled_older(d, draw):
    d["schema_version"] = draw(st.integers(1, d["schema_version"] - 1))


@forgery("legacy", LABEL, must=r"decode\[\d+\]\.run_acceptance_samples.* is a field of "
         r"schema_version 3")
def v2_label_with_negative_run_acceptance_samples(d, draw):
    d["schema_version"] = 2
    pick(draw, d["decode"])["run_acceptance_samples"] = -draw(st.integers(1, 100))


@forgery("legacy", rf"^schema_version: expected an integer 1\.\.{SCHEMA_VERSION}, got (bool True|"
         r"bool False|float [\d.]+|str '\d')$")
def version_not_an_integer(d, draw):
    d["schema_version"] = pick(draw, [True, False, 1.0, 3.0, "3"])


# ---- also: header fields ---------------------------------------------------------------

@forgery("header", r"^created_at: must be an ISO 8601 UTC timestamp .*, got '.*'$")
def created_at_not_utc(d, draw):
    d["created_at"] = pick(draw, ["2026-11-30T20:07:00", "2026-11-30T21:07:00+01:00",
                                  "yesterday", "", "2026-11-30"])


@forgery("header", r"^started_at: must be an ISO 8601 UTC timestamp, got '.*'$", applies=v4)
def started_at_not_utc(d, draw):
    d["started_at"] = pick(draw, ["2026-11-30T20:06:56", "2026-11-30T21:06:56+01:00", "now"])


@forgery("header", r"^run_id: must be a non-empty ID, got '.*'$")
def run_id_empty(d, draw):
    d["run_id"] = pick(draw, ["", " ", "\n"])


@forgery("header", r"^coverage\.skipped_points\[\d+\]\.reason: must say why the point was "
         r"skipped, got '\s*'$")
def skipped_without_a_reason(d, draw):
    phase = pick(draw, grid_phases(d))
    forge.drop_point(d, phase, draw(st.integers(0, len(d["grid"][phase]) - 1)),
                     pick(draw, ["", "  "]))
    cohere(d)


# ---- also: repeats, summaries, warm-up, environment, ranks (schema v4) --------------------

FEWER_SAMPLES = (r"^(summaries\[\d+\]\.stop: 'fixed_rounds', yet its \d+ samples under the "
                 r"policy's rule give 'not_finished'|status: 'complete' while .* still ask for "
                 r"samples .*|rounds: \d+ rounds in a complete artifact, fewer than "
                 r"measurement_policy\.repeats \d+)$")


@forgery("repeats", FEWER_SAMPLES, must=r"^summaries\[\d+\]\.stop: ", applies=v4)
def repeats_more_than_observed(d, draw):
    d["measurement_policy"]["repeats"] += draw(st.integers(1, 5))


@forgery("repeats", r"^(measurement_policy\.repeats: must be >= 1, got -?\d+|"
         r"(prefill|decode|mixed): point \d+: \d+ samples, yet its rule stopped it after \d+ "
         r".*|rounds: \d+ rounds, more than measurement_policy\.repeats -?\d+ .*|"
         r"rounds\[\d+\]\.order: lists .*, whose \d+ samples before it need no further round)$",
         must=r"^measurement_policy\.repeats: must be >= 1", applies=v4)
def repeats_zero(d, draw):
    d["measurement_policy"]["repeats"] = -draw(st.integers(0, 3))


@forgery("repeats", r"^(prefill|decode|mixed): point \d+: (\d+ samples, yet its rule stopped it "
         r"after \d+ .*|measured more than once in a round .*|its samples, in the order of their "
         r"rounds, are numbered .*)$",
         must=r"samples, yet its rule stopped it after", applies=v4)
def an_extra_repeat(d, draw):
    """One sample more than the policy's: the next sample of a point, in a round it was
    already measured in (the IDs made to run along the order, as a forger would)."""
    phase = pick(draw, grid_phases(d))
    obs = pick(draw, d[phase])
    item = work_item(d, obs)   # settled steps: several
    repeat = max(o["repeat"] for o in d[phase] if o["point_index"] == obs["point_index"]) + 1
    for step in item:
        twin = copy.deepcopy(step)
        twin["repeat"] = repeat
        set_native_id(twin, max_native_id(d) + 1)
        d[phase].append(twin)
    cohere(d)


@forgery("repeats", r"^summaries\[\d+\]\.\w+: [-+.e\d]+ != [-+.e\d]+, recomputed from the \d+ "
         r"samples of (prefill|decode|mixed) point \d+$", applies=v4)
def summary_altered(d, draw):
    summary = pick(draw, d["summaries"])
    name = pick(draw, ["median_seconds", "mean_seconds", "min_seconds", "max_seconds", "cv"])
    summary[name] += summary[name] * draw(st.floats(0.001, 10.0)) + 1e-6


@forgery("repeats", r"^summaries: (prefill|decode|mixed) point \d+ is observed but has no summary$",
         applies=v4)
def summary_missing(d, draw):
    d["summaries"].pop(draw(st.integers(0, len(d["summaries"]) - 1)))


@forgery("repeats", r"^summaries\[\d+\]: a second summary of (prefill|decode|mixed) point \d+",
         applies=v4)
def summary_twice(d, draw):
    d["summaries"].append(copy.deepcopy(pick(draw, d["summaries"])))


@forgery("repeats", r"^(prefill|decode|mixed)\[\d+\]\.warmup_passes: \d+ is outside the "
         r"policy's \[\d, 8\]$", applies=v4)
def warmup_passes_outside_the_policy(d, draw):
    """A point's passes outside the bounds its artifact's warm-up states: below them (none
    below a minimum of 0, as by_shape_seeded's) or above."""
    low = d["measurement_policy"]["warmup"]["min_passes"]
    passes = pick(draw, [*range(low), WARMUP_MAX_PASSES + 1, 100])
    for obs in repeats_of(d, pick_obs(draw, d)):
        obs["warmup_passes"] = passes


@forgery("repeats", r"^(prefill|decode|mixed)\[\d+\]\.warmup_settled: false after \d+ passes; a "
         r"warm-up that does not settle runs all 8 passes$", applies=v4)
def warmup_unsettled_early(d, draw):
    passes = draw(st.integers(2, WARMUP_MAX_PASSES - 1))
    for obs in repeats_of(d, pick_obs(draw, d)):
        obs.update(warmup_settled=False, warmup_passes=passes)


@forgery("repeats", r"^(measurement_policy\.warmup\.\w+: .*|.*\.warmup_(passes|settled): .*)$",
         must=r"^measurement_policy\.warmup\.\w+: .*, the contract states", applies=v4)
def warmup_policy_altered(d, draw):
    warmup = d["measurement_policy"]["warmup"]
    name, value = pick(draw, [("tolerance", 0.1), ("tolerance", 0.0), ("min_passes", 1),
                              ("max_passes", 16), ("rule", "single_pass")])
    warmup[name] = value


@forgery("repeats", r"^environment: null; required since schema_version 4", applies=v4)
def environment_removed(d, draw):
    d["environment"] = None


@forgery("repeats", r"^environment\.reason: .* with contended (True|False); a contended run "
         r"says why", applies=v4)
def contended_without_a_reason(d, draw):
    env = d["environment"]
    env["contended"], env["reason"] = pick(draw, [(True, None), (True, " "),
                                                  (False, "other engines")])
    if not env["contended"]:   # nothing else says contended
        env.update(other_cpu_cores=0.0, other_sdbench_engines=0)


@forgery("repeats", r"^environment\.contended: false, yet other_cpu_cores", applies=v4)
def contention_hidden(d, draw):
    d["environment"].update(other_cpu_cores=0.5 + draw(st.floats(0.01, 16.0)), contended=False,
                            reason=None)


@forgery("repeats", r"^environment\.other_gpu_processes: \d+ on a 'cpu' run",
         applies=lambda d: v4(d) and cpu(d))
def gpu_processes_on_cpu(d, draw):
    gpus = draw(st.integers(0, 4))
    d["environment"]["other_gpu_processes"] = gpus
    if gpus:
        d["environment"].update(contended=True, reason=f"{gpus} other process(es) on the GPU")


@forgery("repeats", r"^measurement_policy\.step_time_rule: 'slowest_rank' with "
         r"identity\.tensor_parallel_size 1", applies=v4)
def slowest_rank_of_one_rank(d, draw):
    d["measurement_policy"]["step_time_rule"] = "slowest_rank"
    for _, obs in observations(d):
        obs["timing"]["rank_seconds"] = [obs["timing"]["seconds"]]


@forgery("repeats", r"^(prefill|decode|mixed)\[\d+\]\.timing\.rank_seconds: \[.*\] under "
         r"step_time_rule 'single_rank'", applies=v4)
def rank_times_of_one_rank(d, draw):
    timing = pick_obs(draw, d)["timing"]
    timing["rank_seconds"] = [timing["seconds"]]


def two_ranks(d, slowest: bool) -> None:
    d["identity"]["tensor_parallel_size"]["value"] = 2
    d["measurement_policy"]["step_time_rule"] = "slowest_rank"
    for _, obs in observations(d):
        t = obs["timing"]["seconds"]
        obs["timing"]["rank_seconds"] = [t, t * 0.9] if slowest else [t * 1.1, t]
    reseal(d)


@forgery("repeats", r"^kv_capacity\.rank_num_blocks: 1 entries for "
         r"identity\.tensor_parallel_size 2$", applies=v4)
def two_ranks_one_rank_of_blocks(d, draw):
    two_ranks(d, slowest=True)


@forgery("repeats", r"^(prefill|decode|mixed)\[\d+\]\.timing\.seconds: [-+.e\d]+ is not the "
         r"slowest rank's time", applies=v4)
def two_ranks_time_not_the_slowest(d, draw):
    d["kv_capacity"]["rank_num_blocks"] *= 2
    two_ranks(d, slowest=False)


@forgery("repeats", r"^(timed_seconds|started_at): null; required since schema_version 4",
         applies=v4)
def v4_totals_removed(d, draw):
    d[pick(draw, ["timed_seconds", "started_at"])] = None


# ---- rounds: orders, IDs, canaries, round counts (schema v5) --------------------------------

def shuffled_round(d, draw) -> dict:
    """A round whose order has two points of one phase to swap."""
    pool = [r for r in d["rounds"] if any(
        sum(x["phase"] == phase for x in r["order"]) >= 2 for phase in forge.PHASES)]
    return pick(draw, pool)


def rounds_with(d, n: int):
    return v5(d) and len(d["rounds"]) >= n


@forgery("rounds", r"^rounds\[\d+\]\.order: not the order that order_seed \d+ draws for round "
         r"\d+: position \d+ holds .*$", applies=v5)
def order_swapped(d, draw):
    """Two points of a phase swapped in a round's order, the IDs renumbered to run along the
    forged order: only the seed's draw tells."""
    r = shuffled_round(d, draw)
    phase = pick(draw, [p for p in forge.PHASES
                        if sum(x["phase"] == p for x in r["order"]) >= 2])
    slots = [i for i, x in enumerate(r["order"]) if x["phase"] == phase]
    i, j = draw(st.sampled_from([(a, b) for a in slots for b in slots if a < b]))
    r["order"][i], r["order"][j] = r["order"][j], r["order"][i]
    taken: dict[tuple, list] = {}
    for p, o in observations(d):
        taken.setdefault((o["round"], p, o["point_index"]), []).append(o)
    next_id = 1
    for rr in d["rounds"]:
        for x in rr["order"]:
            for obs in taken.get((rr["index"], x["phase"], x["point_index"]), []):
                next_id += 7
                set_native_id(obs, next_id)
    reseal(d)


@forgery("rounds", r"^rounds\[\d+\]\.order: not the order that order_seed \d+ draws", applies=v5)
def seed_changed(d, draw):
    d["measurement_policy"]["order_seed"] += draw(st.integers(1, 1000))


@forgery("rounds", r"^(rounds\[\d+\]\.order: (prefill|decode|mixed)\[\d+\] in round \d+ has "
         r"native_iteration_id \d+, not after .*; the observations were not taken in the "
         r"recorded order|decode\[\d+\]\.native_iteration_id: \d+ \(round \d+\) does not "
         r"follow step \d+'s \d+ .*)$", must=r"^rounds\[\d+\]\.order: ", applies=v5)
def ids_out_of_order(d, draw):
    """Two samples of one round swap their native iteration IDs: the order recorded is not
    the order taken."""
    r = pick(draw, d["rounds"])
    mine = [(p, o) for p, o in observations(d) if o["round"] == r["index"]]
    a, b = draw(st.sampled_from([(x, y) for p, x in mine for q, y in mine   # two work items
                                 if (p, x["point_index"]) != (q, y["point_index"])
                                 and x["native_iteration_id"] < y["native_iteration_id"]]))
    ida, idb = a["native_iteration_id"], b["native_iteration_id"]
    set_native_id(a, idb)
    set_native_id(b, ida)


@forgery("rounds", r"^(host_canary\.\w+: [-+.e\d]+ != [-+.e\d]+, recomputed from the rounds' "
         r"canary readings|summaries\[\d+\]\.canary_spread: [-+.e\d]+ != [-+.e\d]+, "
         r"recomputed .*)$", must=r"^host_canary\.", applies=v5)
def canary_reading_altered(d, draw):
    """A canary reading changed, the summaries of the collection left as they were."""
    r = pick(draw, d["rounds"])
    reading = r[pick(draw, ["canary_before", "canary_after"])]
    reading["python_seconds"] *= pick(draw, [0.5, 2.0, draw(st.floats(1.5, 50.0))])


@forgery("rounds", r"^rounds\[\d+\]\.canary_(before|after)\.(python|launch)_seconds: [-+.e\dinf]+ "
         r"is outside \(0, 10\.0\] s$", applies=v5)
def canary_beyond_its_bounds(d, draw):
    """A reading no canary gives (every summary made to fit it)."""
    r = pick(draw, d["rounds"])
    r[pick(draw, ["canary_before", "canary_after"])]["python_seconds"] = pick(
        draw, [0.0, -1e-3, 11.0, 1e6])
    cohere(d)


@forgery("rounds", r"^rounds\[\d+\]\.canary_(before|after)\.launch_seconds: [-+.e\d]+ on a "
         r"'cpu' run", applies=lambda d: v5(d) and cpu(d))
def launch_reading_on_cpu(d, draw):
    r = pick(draw, d["rounds"])
    r[pick(draw, ["canary_before", "canary_after"])]["launch_seconds"] = draw(
        st.floats(1e-4, 0.1))
    cohere(d)


@forgery("rounds", r"^rounds\[\d+\]\.canary_after: null; every finished round is bracketed by "
         r"two readings$", applies=v5)
def round_left_open(d, draw):
    pick(draw, d["rounds"])["canary_after"] = None
    cohere(d)


@forgery("rounds", FEWER_SAMPLES, must=r"^(status: 'complete' while|rounds: \d+ rounds in a "
         r"complete)", applies=lambda d: rounds_with(d, 2))
def last_round_dropped(d, draw):
    """A collection shortened by a round (its samples removed) but still called complete."""
    last = d["rounds"].pop()["index"]
    for phase in forge.phases_of(d):
        d[phase] = [o for o in d[phase] if o["round"] != last]
    cohere(d)
    d["status"] = "complete"


@forgery("rounds", r"^((prefill|decode|mixed): point \d+: (\d+ samples, yet its rule stopped it "
         r"after \d+ .*|has a sample in round \d+, which does not list it)|rounds: \d+ rounds, "
         r"more than measurement_policy\.repeats \d+ .*|rounds\[\d+\]\.order: lists .*)$",
         must=r"^rounds: \d+ rounds, more than measurement_policy\.repeats", applies=v5)
def a_round_more_than_the_policy(d, draw):
    """One more round of every point (a copy of the last), the policy's repeats unchanged."""
    last = d["rounds"][-1]
    index = len(d["rounds"])
    d["rounds"].append(dict(copy.deepcopy(last), index=index))
    for phase in forge.phases_of(d):
        for obs in [o for o in d[phase] if o["round"] == last["index"]]:
            twin = copy.deepcopy(obs)
            twin.update(round=index, repeat=obs["repeat"] + 1)
            d[phase].append(twin)
    cohere(d)


@forgery("rounds", r"^((prefill|decode|mixed): point \d+[: ].*|rounds\[\d+\]\.order: .*|"
         r"summaries\[\d+\]\.canary_spread: .*)$",
         must=r"^(prefill|decode|mixed): point \d+ (has a sample in round \d+, which does not "
         r"list it|has no sample in round \d+, which lists it)",
         applies=lambda d: rounds_with(d, 2))
def sample_moved_to_another_round(d, draw):
    """A sample said to be of another round than the one that listed it (a sample of
    settled decode steps moved whole: its steps run one after the other in one round)."""
    obs = pick_obs(draw, d)
    moved = pick(draw, [r["index"] for r in d["rounds"] if r["index"] != obs["round"]])
    for step in work_item(d, obs):
        step["round"] = moved
    forge.resummarize(d)
    forge.recanary(d)
    reseal(d)


@forgery("rounds", r"^(summaries\[\d+\]\.stop: '\w+', yet its \d+ samples under the policy's "
         r"rule give '\w+'|status: 'complete' while .* still ask for samples .*)$",
         must=r"^summaries\[\d+\]\.stop: ", applies=v5)
def stop_altered(d, draw):
    summary = pick(draw, d["summaries"])
    summary["stop"] = pick(draw, [s for s in ("pinned", "round_cap", "not_finished")
                                  if s != summary["stop"]])


@forgery("rounds", r"^observer_cost\.host_seconds_per_step: [-+.e\d]+ is not the median of its "
         r"rounds' figures", applies=v5)
def observer_cost_not_its_median(d, draw):
    """The observer's cost said smaller than its probe rounds measured."""
    d["observer_cost"]["host_seconds_per_step"] *= pick(draw, [0.5, 0.1, 0.0])


@forgery("rounds", r"^rounds: \d+ entries under back_to_back repeats; a back-to-back collection "
         r"is one pass over the grid|^measurement_policy: order_seed .* under back_to_back",
         must=r"under back_to_back", applies=lambda d: rounds_with(d, 2))
def rounds_relabelled_back_to_back(d, draw):
    d["measurement_policy"]["repeat_order"] = "back_to_back"
    d["measurement_policy"]["order_seed"] = None


# ---- settled steps and the GPU clock (schema v6) -------------------------------------------

def settled(d):
    return v6(d) and bool(d["decode"])


@forgery("shape", r"^(decode\[\d+\]\.step_index: settled_steps retains run steps 3\.\.6 .*|"
         r"decode: point \d+ repeat \d+: retains steps .*)$",
         must=r"^decode\[\d+\]\.step_index: settled_steps retains", applies=settled)
def settled_step_index_forged(d, draw):
    """A retained step relabelled as another step of its run: the first decode step (the
    transient), the admission, or one past the retained ones."""
    obs = pick(draw, d["decode"])
    obs["step_index"] = pick(draw, [1, 2, 7, 9])
    reseal(d)


@forgery("shape", r"^(decode\[\d+\]\.snapshot: (requests\[\d+\]\.kv_tokens is \d+, step \d+ "
         r"of the point .*|request '[^']+' reads \d+ KV tokens at step \d+; .*)|decode\[\d+\]\."
         r"snapshot\.phase: recorded 'decode', but its requests make it 'mixed'; .*)$",
         must=r"^decode\[\d+\]\.snapshot: ", applies=settled)
def settled_context_forged(d, draw):
    """One request of a settled step said to read another context: off the bound of its
    step, or off the chain from the step before it. Read short of its prompt, the request
    is one still prefilling, and the decode step a mixed one: a second tell."""
    obs = pick(draw, [o for o in d["decode"] if o["step_index"] > 3])
    request = pick(draw, obs["snapshot"]["requests"])
    request["kv_tokens"] += pick(draw, [-1, 1, 50, -obs["point"]["context_tokens"]])
    reseal(d)


@forgery("relabel", r"^(prefill|decode|mixed)\[\d+\]\.gpu_clock: .* on a 'cpu' run; only a CUDA "
         r"run reads a GPU clock \(relabelled\?\)$", applies=lambda d: v6(d) and cpu(d))
def gpu_clock_on_cpu(d, draw):
    obs = pick_obs(draw, d)
    obs["gpu_clock"] = copy.deepcopy(CLOCK)
    reseal(d)


def _cuda_v6(d) -> None:
    """The CPU base relabelled as a coherent CUDA artifact (its clocks written too)."""
    relabel(d, "nothing")


@forgery("timing", r"^(prefill|decode|mixed)\[\d+\]\.gpu_clock\.(capped: (True|False), yet its "
         r"reasons .*|sm_mhz_(before|after): \d+ MHz is outside .*|reasons: .*)$",
         applies=lambda d: v6(d) and cpu(d))
def gpu_clock_forged(d, draw):
    """On a CUDA artifact: a sample's capped flag flipped, a clock above the device's
    maximum, or a reason listed twice."""
    _cuda_v6(d)
    clock = pick_obs(draw, d)["gpu_clock"]
    how = pick(draw, ["flip", "fast", "twice"])
    if how == "flip":
        clock["capped"] = not clock["capped"]
    elif how == "fast":
        clock["sm_mhz_after"] = clock["max_sm_mhz"] + draw(st.integers(1, 500))
    else:
        clock["reasons"] = clock["reasons"] * 2
    reseal(d)


@forgery("relabel", r"^(prefill|decode|mixed)\[\d+\]\.gpu_clock: null on a cuda run; every CUDA "
         r"sample carries the GPU clock it ran at$", applies=lambda d: v6(d) and cpu(d))
def gpu_clock_dropped(d, draw):
    _cuda_v6(d)
    pick_obs(draw, d)["gpu_clock"] = None
    reseal(d)


# ---- mixed steps (schema v7) ---------------------------------------------------------------
# A mixed point is one engine step: decode_batch_size requests decoding (1 new token and K
# drafts each) beside prefill_batch_size requests prefilling prefill_tokens after a cached
# prefix, retained at run step MIXED_STEP_INDEX under the mixed_step policy. Each forgery
# below edits a real mixed row of the current base (cpu-v7), keeps every count derived from
# it (the step's token total, the queue, sums, summaries, digests) and leaves its one rule to
# catch it; legacy bases hold no mixed row, so none applies there.

def mixed_rows(d):
    return bool(d.get("mixed"))


def kind_of(request: dict) -> str:
    """A request of a mixed step: prefilling while its KV is short of its prompt."""
    return "prefilling" if request["kv_tokens"] < request["prompt_tokens"] else "decoding"


def pick_request(draw: Draw, obs: dict, kind: str) -> tuple[int, dict]:
    return pick(draw, [(j, r) for j, r in enumerate(obs["snapshot"]["requests"])
                       if kind_of(r) == kind])


def retotal(obs: dict) -> None:
    """The step's scheduled tokens, the sum of its requests' new and draft tokens."""
    snap = obs["snapshot"]
    snap["total_scheduled_tokens"] = sum(r["new_tokens"] + r["draft_tokens"]
                                         for r in snap["requests"])


MIXED_SHAPE = r"^mixed\[\d+\]\.snapshot: "


@forgery("shape", MIXED_SHAPE + r"requests\[\d+\] \(prefilling\)\.new_tokens is \d+, the point "
         r"needs \d+$", applies=mixed_rows)
def mixed_prefill_new_tokens_off(d, draw):
    """A prefill of the step said to compute another number of new tokens (its prompt and
    the step's total made to fit: a whole prompt, of another length)."""
    obs = pick(draw, d["mixed"])
    _, request = pick_request(draw, obs, "prefilling")
    delta = pick(draw, [-1, 1, 16, -request["new_tokens"] // 2])
    request["new_tokens"] += delta
    request["prompt_tokens"] += delta
    retotal(obs)
    cohere(d)


@forgery("shape", MIXED_SHAPE + r"requests\[\d+\] \(decoding\)\.draft_tokens is \d+, the point "
         r"needs \d+$", applies=mixed_rows)
def mixed_decode_drafts_off(d, draw):
    """A decode of the step said to verify another number of drafts than the point's K."""
    obs = pick(draw, d["mixed"])
    _, request = pick_request(draw, obs, "decoding")
    k = obs["point"]["draft_depth"]
    request["draft_tokens"] = pick(draw, [n for n in (0, 1, k - 1, k + 1, 2 * k) if n != k])
    retotal(obs)
    cohere(d)


@forgery("shape", r"^mixed\[\d+\]\.snapshot(: holds \d+ decoding and \d+ prefilling requests, "
         r"the point \d+ and \d+|\.phase: recorded 'mixed', but its requests make it "
         r"'(decode|prefill)'; .*)$",
         must=MIXED_SHAPE + r"holds \d+ decoding and \d+ prefilling requests, the point",
         applies=mixed_rows)
def mixed_request_dropped(d, draw):
    """One request of the step gone, a decode or a prefill: the step holds one request too
    few (its queue and token total made to fit). Where it was the only one of its kind, the
    step left is no mixed step at all, a second tell."""
    obs = pick(draw, d["mixed"])
    j, _ = pick_request(draw, obs, pick(draw, ["decoding", "prefilling"]))
    snap = obs["snapshot"]
    del snap["requests"][j]
    snap["queue"]["running"] = len(snap["requests"])
    retotal(obs)
    cohere(d)


@forgery("shape", MIXED_SHAPE + r"requests\[\d+\] \(decoding\)\.new_tokens is \d+, the point "
         r"needs 1$", applies=mixed_rows)
def mixed_decode_with_prefill_tokens(d, draw):
    """A decoding request (its KV past its prompt) said to compute prefill tokens in the step
    beside its one new token and drafts."""
    obs = pick(draw, d["mixed"])
    _, request = pick_request(draw, obs, "decoding")
    request["new_tokens"] += pick(draw, [1, 15, obs["point"]["prefill_tokens"]])
    retotal(obs)
    cohere(d)


@forgery("shape", r"^mixed\[\d+\]\.snapshot(\.total_scheduled_tokens: \d+ != the requests' new "
         r"\+ draft tokens \d+|: total_scheduled_tokens is \d+, the point's decode_batch_size\*"
         r"\(1\+draft_depth\) \+ prefill_batch_size\*prefill_tokens = \d+)$",
         must=MIXED_SHAPE + r"total_scheduled_tokens is \d+, the point's decode_batch_size",
         applies=mixed_rows)
def mixed_token_sum_off(d, draw):
    """The step's scheduled tokens said to be other than the point's B_d*(1+K) + B_p*N."""
    obs = pick(draw, d["mixed"])
    point = obs["point"]
    obs["snapshot"]["total_scheduled_tokens"] = pick(draw, [
        point["decode_batch_size"] + point["prefill_batch_size"] * point["prefill_tokens"],
        point["prefill_batch_size"] * point["prefill_tokens"],
        obs["snapshot"]["total_scheduled_tokens"] + draw(st.integers(1, 64))])
    cohere(d)


@forgery("relabel", r"^mixed\[\d+\]\.snapshot(\.phase: '(decode|prefill)' in a mixed "
         r"observation; .*|: phase is '(decode|prefill)', the point is 'mixed')$",
         must=MIXED_SHAPE + r"phase is '(decode|prefill)', the point is 'mixed'$",
         applies=mixed_rows)
def mixed_step_relabelled(d, draw):
    """A mixed step's snapshot said to be a decode or a prefill step."""
    pick(draw, d["mixed"])["snapshot"]["phase"] = pick(draw, ["decode", "prefill"])
    cohere(d)


def decode_twin(d) -> tuple[dict, dict] | None:
    """A decode point and a mixed point of one decode batch (batch, context, K, AL)."""
    for decode in d["grid"]["decode"]:
        for mixed in d["grid"].get("mixed", []):
            if (decode["batch_size"], decode["context_tokens"], decode["draft_depth"],
                    decode["acceptance_length"]) == (
                    mixed["decode_batch_size"], mixed["context_tokens"],
                    mixed["draft_depth"], mixed["acceptance_length"]):
                return decode, mixed
    return None


@forgery("relabel", r"^mixed\[\d+\]\.snapshot(\.phase: (recorded 'mixed', but its requests make "
         r"it 'decode'|'decode' in a mixed observation); .*|: (holds \d+ decoding and 0 "
         r"prefilling requests, the point \d+ and \d+|phase is 'decode', the point is "
         r"'mixed'))$", must=MIXED_SHAPE + r"(holds \d+ decoding and 0 prefilling|phase is "
         r"'decode')", applies=lambda d: mixed_rows(d) and decode_twin(d) is not None)
def decode_step_moved_into_mixed(d, draw):
    """A sample of a mixed point replaced by a settled decode step of the same decode batch
    (the first retained one, which a mixed step is: run step 3), its snapshot said mixed or
    left decode; the mixed row's own fields (point, round, repeat, warm-up, the prefill's
    verified cache hit) kept, the IDs renumbered along the rounds' orders."""
    decode_point, mixed_point = decode_twin(d)
    decode_index = d["grid"]["decode"].index(decode_point)
    mixed_index = d["grid"]["mixed"].index(mixed_point)
    victim = pick(draw, [o for o in d["mixed"] if o["point_index"] == mixed_index])
    step = pick(draw, [o for o in d["decode"] if o["point_index"] == decode_index
                       and o["step_index"] == victim["step_index"]])
    moved = copy.deepcopy(victim)
    for name in ("snapshot", "timing", "provenance", "accepted_tokens", "graph_mode",
                 "gpu_clock"):
        moved[name] = copy.deepcopy(step[name])
    if draw(st.booleans()):
        moved["snapshot"]["phase"] = "mixed"
    d["mixed"][d["mixed"].index(victim)] = moved
    cohere(d)


@forgery("shape", r"^mixed\[\d+\]\.step_index: mixed_step retains run step 3 \(the first "
         r"settled step of the decode batch, where the prefills are admitted\), got \d+$",
         applies=mixed_rows)
def mixed_step_index_wrong(d, draw):
    """A mixed row said to be another step of its run: the admission, the transient first
    decode step, or a later one."""
    pick(draw, d["mixed"])["step_index"] = pick(draw, [1, 2, 4, 5, 9])
    reseal(d)


@forgery("shape", r"^mixed\[\d+\]\.cache_hit_tokens: \[[\d, ]*\]; each of \d+ prefills is "
         r"verified as a hit of \d+ tokens$", applies=mixed_rows)
def mixed_cache_hits_not_the_prefix(d, draw):
    """The prefills' verified cache hits said to be other than the point's cached prefix:
    one hit off by a block or more, none at all, or one prefill's hit missing."""
    obs = pick(draw, d["mixed"])
    hits = obs["cache_hit_tokens"]
    how = pick(draw, ["off", "none", "missing"])
    if how == "off":
        j = draw(st.integers(0, len(hits) - 1))
        hits[j] += pick(draw, [16, 64]) if hits[j] == 0 else -pick(draw, [16, hits[j]])
    elif how == "none" or len(hits) == 1:
        hits.append(hits[0])
    else:
        hits.pop()
    cohere(d)


@forgery("shape", r"^mixed\[\d+\]\.kv_seed_regime: '\w+' does not fit cached_prefix_tokens "
         r"\d+$", applies=mixed_rows)
def mixed_prefix_regime_forged(d, draw):
    """The prefills' seed regime said synthetic (a mixed step's prefix is a real one), or
    none where the point has a cached prefix (or real where it has none)."""
    obs = pick(draw, d["mixed"])
    real = obs["point"]["cached_prefix_tokens"] > 0
    obs["kv_seed_regime"] = pick(draw, ["synthetic_prefix", "none" if real else "real_prefix"])
    cohere(d)


@forgery("grid", r"^(grid\.mixed: mode '(prefill|decode)' has no mixed phase, yet the grid "
         r"lists \d+ mixed points|mixed: mode '(prefill|decode)' measures no mixed points, yet "
         r"\d+ observations are present|measurement_policy\.mixed: expected None for mode "
         r"'(prefill|decode)' with mixed points, got 'mixed_step'|rounds\[\d+\]\.order: "
         r"PointRef\(phase='mixed', point_index=\d+\) is no point of the grid)$",
         must=r"^mixed: mode '(prefill|decode)' measures no mixed points, yet \d+ observations",
         applies=mixed_rows)
def mixed_rows_in_a_two_phase_mode(d, draw):
    """A prefill or a decode artifact (the other phases cut out) that kept its mixed points
    and rows, its policy stating mixed_step or not."""
    mode = pick(draw, ["prefill", "decode"])
    forge.keep_phases(d, mode, (mode, "mixed"))
    if draw(st.booleans()):
        d["measurement_policy"]["mixed"] = None


@forgery("grid", r"^(mixed\[\d+\]\.point_index: \d+ is outside grid\.mixed \(0\.\.-1\)|"
         r"measurement_policy\.mixed: expected None for mode 'agg', got 'mixed_step'|"
         r"rounds\[\d+\]\.order: PointRef\(phase='mixed', point_index=\d+\) is no point of "
         r"the grid|coverage: completed \d+ \+ skipped \d+ != expected \d+|"
         r"mixed: mode 'agg' measures no mixed points, yet \d+ observations are present)$",
         must=r"^mixed\[\d+\]\.point_index: \d+ is outside grid\.mixed", applies=mixed_rows)
def mixed_rows_without_mixed_points(d, draw):
    """Mixed rows in an agg artifact whose grid holds no mixed point (as agg is for the
    consumer unless mixed points were asked for)."""
    d["grid"]["mixed"] = []
    if draw(st.booleans()):
        d["measurement_policy"]["mixed"] = None
    cohere(d)


@forgery("header", r"^measurement_policy\.mixed: expected 'mixed_step' for mode '(agg|mixed)' "
         r"with mixed points, got (None|'\w+')$", applies=mixed_rows)
def mixed_policy_not_stated(d, draw):
    """A collection with mixed points whose policy does not state mixed_step for them."""
    d["measurement_policy"]["mixed"] = pick(draw, [None, "settled_steps", "single_step",
                                                   "steady_step"])


@forgery("relabel", r"^decode\[\d+\]\.snapshot(\.phase: 'mixed' in a decode observation; .*|: "
         r"phase is 'mixed', the point is 'decode'|: request '[^']+' of step \d+ is not in step "
         r"\d+; a work item's steps run one batch)$",
         must=r"^decode\[\d+\]\.snapshot: phase is 'mixed', the point is 'decode'$",
         applies=lambda d: mixed_rows(d) and decode_twin(d) is not None)
def mixed_step_moved_into_decode(d, draw):
    """The reverse: a settled decode step replaced by a mixed step of the same decode batch
    (its prefills beside the batch's decodes), the decode row's own fields kept; the steps
    after it in its run no longer follow it, a second tell."""
    decode_point, mixed_point = decode_twin(d)
    decode_index = d["grid"]["decode"].index(decode_point)
    mixed_index = d["grid"]["mixed"].index(mixed_point)
    step = pick(draw, [o for o in d["mixed"] if o["point_index"] == mixed_index])
    victim = pick(draw, [o for o in d["decode"] if o["point_index"] == decode_index])
    for name in ("snapshot", "timing", "provenance", "graph_mode", "gpu_clock"):
        victim[name] = copy.deepcopy(step[name])
    cohere(d)


@forgery("shape", r"^mixed\[\d+\]\.accepted_tokens(: \d+ entries for decode_batch_size \d+|"
         r"\[\d+\]: -?\d+ is outside \[0, \d+\])$", applies=mixed_rows)
def mixed_accepted_drafts_off(d, draw):
    """The decodes' accepted drafts said to be more than K for one request, fewer than none,
    or listed for one request more or fewer than the decode batch."""
    obs = pick(draw, d["mixed"])
    accepted, k = obs["accepted_tokens"], obs["point"]["draft_depth"]
    how = pick(draw, ["beyond", "negative", "more", "fewer"])
    if how in ("beyond", "negative"):
        accepted[draw(st.integers(0, len(accepted) - 1))] = k + 1 if how == "beyond" else -1
    elif how == "more" or len(accepted) == 1:
        accepted.append(0)
    else:
        accepted.pop()
    cohere(d)


@forgery("repeats", r"^mixed\[\d+\]\.warmup_passes: 0 under the by_shape_seeded warm-up(; a mixed "
         r"point takes at least 1|, yet no earlier mixed point of its compiled shape .*)$",
         must=r"^mixed\[\d+\]\.warmup_passes: 0 under the by_shape_seeded warm-up; a mixed point "
         r"takes at least 1$",
         applies=lambda d: mixed_rows(d) and
         d["measurement_policy"]["warmup"]["rule"] == "by_shape_seeded")
def mixed_point_without_its_warmup_pass(d, draw):
    """A mixed point said to have run with no warm-up pass, as a seeded decode point may (a
    mixed point's prefills are new work: it takes its one pass)."""
    for obs in repeats_of(d, pick(draw, d["mixed"])):
        obs.update(warmup_passes=0, warmup_settled=True)
    cohere(d)


MIXED_FORGERIES = ("mixed_prefill_new_tokens_off", "mixed_decode_drafts_off",
                   "mixed_request_dropped", "mixed_decode_with_prefill_tokens",
                   "mixed_token_sum_off", "mixed_step_relabelled",
                   "decode_step_moved_into_mixed", "mixed_step_index_wrong",
                   "mixed_cache_hits_not_the_prefix", "mixed_prefix_regime_forged",
                   "mixed_rows_in_a_two_phase_mode", "mixed_rows_without_mixed_points",
                   "mixed_policy_not_stated", "mixed_step_moved_into_decode",
                   "mixed_accepted_drafts_off", "mixed_point_without_its_warmup_pass")


# ---- the test --------------------------------------------------------------------------------

CASES = [pytest.param(base, f, id=f"{base}-{f.name}") for base in BASES for f in FORGERIES
         if f.applies(forge._LOADED[base])]


# No shrinking: a draw is a few small choices, and shrinking them on the 1.7 MB production
# base takes minutes; the failing draws are printed as they are.
@pytest.mark.parametrize("base, forgery_", CASES)
@settings(max_examples=3, deadline=None, derandomize=True,
          phases=(Phase.explicit, Phase.generate), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_coherent_forgery_is_refused_by_its_rule(base, forgery_, data):
    d = load(base)
    forgery_.make(d, data.draw)
    report = validate_data(d)
    errors = report.errors
    assert errors, f"{forgery_.name} on {base}: accepted"
    stray = [e for e in errors if not re.search(forgery_.expect, e)]
    assert not stray, f"{forgery_.name} on {base}: messages it does not explain: {stray}"
    assert any(re.search(forgery_.must, e) for e in errors), errors


@pytest.mark.parametrize("base", list(BASES))
def test_every_class_has_a_forgery_on_every_base(base):
    covered = {f.cls for f in FORGERIES if f.applies(forge._LOADED[base])}
    version = int(base.rsplit("v", 1)[1])
    missing = ({"repeats"} if version < 4 else set()) | ({"rounds"} if version < 5 else set())
    assert covered == set(CLASSES) - missing


def test_the_mixed_forgeries_run_on_the_current_base_alone():
    """Each forgery of a mixed row or point is in the corpus and runs where mixed rows are
    (cpu-v7, the current schema); no legacy base holds one, so none runs there."""
    named = {f.name: f for f in FORGERIES}
    assert set(MIXED_FORGERIES) <= set(named)
    for base in BASES:
        runs = {name for name in MIXED_FORGERIES if named[name].applies(forge._LOADED[base])}
        assert runs == (set(MIXED_FORGERIES) if base == "cpu-v7" else set()), base


@pytest.mark.parametrize("base", list(BASES))
def test_the_bases_are_valid(base):
    report = validate_data(load(base))
    assert report.ok, report.errors


@pytest.mark.parametrize("name", GPU_NAMES)
@pytest.mark.parametrize("base", [b for b in BASES if cuda(forge._LOADED[b])])
def test_real_gpu_names_are_accepted_on_a_cuda_run(base, name):
    d = load(base)
    rename_device(d, name)
    report = validate_data(d)
    assert report.ok, report.errors


@pytest.mark.parametrize("name", ["x86_64", "aarch64", "AMD64 Family 23 Model 49 Stepping 0, "
                                  "AuthenticAMD"])
def test_cpu_names_are_accepted_on_a_cpu_run(name):
    """A GPU prefix counts as a whole word: Windows' "AMD64 ..." processor is no GPU."""
    d = load("cpu-v7")
    rename_device(d, name)
    report = validate_data(d)
    assert report.ok, report.errors


def test_an_unmeasured_observer_cost_is_flagged_not_refused():
    d = load("cpu-v7")
    d["observer_cost"] = None
    report = validate_data(d)
    assert report.ok, report.errors
    assert report.flags == ["observer_cost: null; how much of a host-bound step is the "
                            "observer's own was not measured for this engine (kept, flagged)"]


def test_contention_is_flagged_not_refused():
    d = load("cpu-v7")
    d["environment"].update(other_cpu_cores=1.7, contended=True,
                            reason="other processes used 1.70 CPU cores on average")
    report = validate_data(d)
    assert report.ok, report.errors
    assert report.flags == ["environment.contended: 'other processes used 1.70 CPU cores on "
                            "average'; its times were measured beside other work (kept, "
                            "flagged)"]


# ---- harmless re-encodings ---------------------------------------------------------------

def _float(x: float, rng: random.Random) -> str:
    spellings = [repr(x), f"{x:.17g}", f"{x:.17e}", f"{x:.17E}"]
    if x == 0.0:
        spellings += ["0e0", "0.0E+00", "0.000"]
    elif x.is_integer():
        spellings += [f"{x:.1f}", f"{int(x)}e0"]
    # a float stays a float: never spelled as an integer
    text = rng.choice([t for t in spellings if "." in t or "e" in t.lower()])
    assert float(text) == x
    return text


def _string(s: str, rng: random.Random) -> str:
    out = []
    for c in s:
        if c in '"\\' or ord(c) < 0x20:
            out.append(json.dumps(c)[1:-1])
        elif c == "/" and rng.random() < 0.5:
            out.append("\\/")
        elif rng.random() < 0.2:
            out.append(json.dumps(c, ensure_ascii=True)[1:-1] if ord(c) > 0x7f
                       else f"\\u{ord(c):04{rng.choice('xX')}}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def reencode(value, rng: random.Random, depth: int = 0) -> str:
    """The same JSON value, spelled differently: key order, whitespace, float spelling,
    string escapes."""
    pad = rng.choice(["", " ", "\n" + "  " * depth, "\t"])
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        sep = rng.choice([",", ", ", ",\n", " ,"])
        colon = rng.choice([":", ": ", " : "])
        body = sep.join(f"{pad}{_string(k, rng)}{colon}{reencode(v, rng, depth + 1)}"
                        for k, v in items)
        return "{" + body + pad + "}"
    if isinstance(value, list):
        sep = rng.choice([",", ", ", ",\n"])
        return "[" + sep.join(pad + reencode(v, rng, depth + 1) for v in value) + pad + "]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return _float(value, rng)
    if isinstance(value, int):
        return str(value)
    return _string(value, rng)


@pytest.mark.parametrize("base", list(BASES))
@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_a_harmless_reencoding_is_accepted(tmp_path_factory, base, seed):
    original = load(base)
    text = reencode(original, random.Random(seed))
    assert json.loads(text) == original
    path = tmp_path_factory.mktemp("reencoded") / "a.json"
    path.write_text(text)
    from pytest_sdbench.artifact import validate_path
    report = validate_path(path)
    assert report.ok, report.errors


# ---- hostile JSON ----------------------------------------------------------------------

def _write_hostile(tmp_path, kind: str):
    path = tmp_path / f"{kind}.json"
    if kind == "deep-arrays":
        path.write_text("[" * 200_000 + "]" * 200_000)
    elif kind == "deep-in-an-artifact":
        d = load("cpu-v7")
        text = json.dumps(d)
        path.write_text(text[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif kind == "deep-objects":
        path.write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    elif kind == "duplicate-key":
        text = json.dumps(load("cpu-v7"))
        path.write_text(text[:-1] + ', "run_id": "another"}')
    elif kind == "duplicate-nested-key":
        text = json.dumps(load("cpu-v7")).replace('"phase": "decode",',
                                                  '"phase": "decode", "phase": "prefill",', 1)
        path.write_text(text)
    elif kind == "oversized":
        with path.open("wb") as handle:   # sparse: the size is read, never the bytes
            handle.truncate(200 << 20)
    elif kind == "just-over-the-cap":
        with path.open("wb") as handle:
            handle.truncate(MAX_ARTIFACT_BYTES + 1)
    elif kind == "huge-integer":
        path.write_text('{"schema_version": ' + "9" * 100_000 + "}")
    elif kind == "not-utf8":
        path.write_bytes(b'{"run_id": "\xff\xfe"}')
    elif kind == "gzip-bomb":   # 200 KiB on disk, one byte past the cap once inflated
        with gzip.open(path, "wb") as handle:
            for _ in range(MAX_ARTIFACT_BYTES // (1 << 20)):
                handle.write(b" " * (1 << 20))
            handle.write(b" " * (MAX_ARTIFACT_BYTES % (1 << 20) + 1))
    elif kind == "broken-gzip":
        path.write_bytes(gzip.compress(json.dumps(load("cpu-v7")).encode())[:4096])
    elif kind == "xz-bomb":   # a few KiB on disk, one byte past the cap once inflated
        path.write_bytes(lzma.compress(b" " * (MAX_ARTIFACT_BYTES + 1), preset=1))
    elif kind == "broken-xz":
        path.write_bytes(lzma.compress(json.dumps(load("cpu-v7")).encode())[:4096])
    return path


HOSTILE = ["deep-arrays", "deep-in-an-artifact", "deep-objects", "duplicate-key",
           "duplicate-nested-key", "oversized", "just-over-the-cap", "huge-integer",
           "not-utf8", "gzip-bomb", "broken-gzip", "xz-bomb", "broken-xz"]
REASON = {"deep-arrays": f"nested 200000 levels deep, over the cap of {MAX_JSON_DEPTH}",
          "deep-in-an-artifact": "levels deep, over the cap",
          "deep-objects": "nested 50000 levels deep",
          "duplicate-key": "duplicate key 'run_id' in one JSON object",
          "duplicate-nested-key": "duplicate key 'phase' in one JSON object",
          "oversized": f"209715200 bytes, over the cap of {MAX_ARTIFACT_BYTES} bytes",
          "just-over-the-cap": f"over the cap of {MAX_ARTIFACT_BYTES} bytes",
          "huge-integer": "not usable JSON (ValueError: Exceeds the limit",
          "not-utf8": "not UTF-8 text",
          "gzip-bomb": f"inflates past the cap of {MAX_ARTIFACT_BYTES} bytes",
          "broken-gzip": "gzip data that cannot be read",
          "xz-bomb": f"inflates past the cap of {MAX_ARTIFACT_BYTES} bytes",
          "broken-xz": "xz data that cannot be read"}


# How each is refused before it could cost time or memory: an oversized file unread (its
# size is read), a deep one unparsed (its brackets are counted, no parser recurses). Said in
# the line, not timed: a wall-time bound would follow the host's load.
REFUSED_BEFORE = {"oversized": "refused unread", "deep-arrays": "refused unparsed",
                  "deep-in-an-artifact": "refused unparsed", "deep-objects": "refused unparsed"}


@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_json_exits_2_in_one_line(tmp_path, capsys, kind):
    path = _write_hostile(tmp_path, kind)
    code = main(["validate", str(path)])
    out = capsys.readouterr()
    assert code == 2
    lines = out.out.splitlines()
    assert len(lines) == 1, out.out
    assert lines[0].startswith(f"UNUSABLE {path}: "), out.out
    assert REASON[kind] in lines[0]
    assert lines[0].endswith(REFUSED_BEFORE.get(kind, "")), lines[0]
    assert not out.err


def test_hostile_json_from_the_command_line_prints_no_traceback(tmp_path):
    path = _write_hostile(tmp_path, "deep-arrays")
    result = subprocess.run([sys.executable, "-m", "pytest_sdbench.cli", "validate", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr + result.stdout


def test_violations_are_printed_up_to_the_cap_then_counted(tmp_path, capsys):
    d = load("cpu-v7")
    extra = MAX_REPORTED_VIOLATIONS + 7
    d.update({f"forged_{i}": i for i in range(extra)})
    path = tmp_path / "many.json"
    path.write_text(json.dumps(d))
    assert main(["validate", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(f"{extra} violation(s)")
    assert sum(line.startswith("  - ") for line in lines) == MAX_REPORTED_VIOLATIONS
    assert lines[-1] == "  ... and 7 more"


def test_a_message_is_one_line_whatever_the_artifact_holds(tmp_path, capsys):
    d = load("cpu-v7")
    d["forged\nVALID everything"] = 1
    path = tmp_path / "newline.json"
    path.write_text(json.dumps(d))
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    assert "forged\\nVALID everything: unknown field" in out[1]


def test_measured_sum_tolerance_is_relative():
    """A sum that differs by float rounding only (order of addition) is accepted."""
    d = load("cpu-v7")
    d["measured_seconds"] = math.fsum(o["timing"]["seconds"] for _, o in observations(d)) * \
        (1 + 1e-12)
    assert validate_data(d).ok
