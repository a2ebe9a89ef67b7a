"""A forger's toolkit: edits of an artifact's JSON that keep everything else consistent, as
anyone can (the digests are unkeyed sha256 of canonical JSON, so they are recomputed).
The tests use it to build coherent forgeries, in which only the broken rule remains, and
to edit fixtures without tripping rules the test is not about.

Built from the wire format's own definitions (summarize, digest) and nothing of the
validator's, so that the forgeries are independent of the rules that must catch them."""

from __future__ import annotations

import copy
import datetime
import json
import marshal
from dataclasses import asdict
from pathlib import Path

from pytest_sdbench.artifact.store import read_json
from pytest_sdbench.wire.contract import CANARY_WORKLOAD
from pytest_sdbench.wire.model import summarize
from pytest_sdbench.wire.rounds import (
    CanarySample,
    PointRef,
    canary_spread,
    point_canary_spread,
    round_order,
    stop_rule,
)
from pytest_sdbench.wire.typed import decode, digest

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
H200 = ROOT / "docs" / "evidence" / "h200"
# Real artifacts: the CPU v7 fixture (rounds, settled decode steps, mixed steps), the CPU v6
# fixture (read as legacy v6: two phases, no mixed key); the CPU v4 fixture and
# a v4 H200 production profile (the smallest of K=3: graphs, synthetic acceptance, 5
# back-to-back repeats, engine settings), read as legacy v4; and the committed H200 agg
# artifacts (schema v3, read as legacy). Legacy forgeries stay in their version's shape,
# digests recomputed on the document as written.
BASES = {
    "cpu-v7": FIXTURES / "cpu-agg-v7.json",
    "cpu-v6": FIXTURES / "cpu-agg-v6.json",
    "cpu-v4": FIXTURES / "cpu-agg-v4.json",
    "h200-production-v4": H200 / "production" / "sdbench-agg-36506276d78b.json.xz",
    "h200-graph-v3": H200 / "artifacts-graph" / "sdbench-agg-150af679fb5a.json",
    "h200-eager-v3": H200 / "artifacts-eager" / "sdbench-agg-d7f9e6f72f75.json",
}
_LOADED = {name: read_json(path) for name, path in BASES.items()}  # .gz inflated
# Each base parsed once and kept as marshal bytes: a forgery edits its own fresh copy, and
# marshal.loads builds one about 5x as fast as copy.deepcopy (the 1.7 MB production base is
# loaded some 260 times by the forgery corpus alone). Exact for JSON's types (dict, list,
# str, int, float, bool, None), which are all a parsed document holds.
_FROZEN = {name: marshal.dumps(data) for name, data in _LOADED.items()}
# Every phase a document may hold (contract.PHASES, written out: the forger's own list). A
# legacy document (v6 and older) has no mixed key, and an edit never adds one: the helpers
# walk the phases a document holds (phases_of), so that a legacy base stays in its shape.
PHASES = ("prefill", "decode", "mixed")


def phases_of(data: dict) -> list[str]:
    """The phases whose observation lists the document holds, in PHASES' order."""
    return [phase for phase in PHASES if phase in data]


def load(name: str) -> dict:
    """A fresh, independent copy of the base, equal to what read_json parsed."""
    return marshal.loads(_FROZEN[name])


def observations(data: dict):
    for phase in phases_of(data):
        for obs in data[phase]:
            yield phase, obs


def reseal(data: dict) -> dict:
    """Recompute the integrity digests, as a forger would."""
    data["integrity"] = {"grid_digest": digest(data["grid"]),
                         "identity_digest": digest(data["identity"]),
                         "kv_capacity_digest": digest(data["kv_capacity"])}
    return data


def _when(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def retime(data: dict) -> None:
    """Sums that fit the steps: measured = their sum; timed and elapsed at least as large;
    created_at late enough for elapsed."""
    measured = sum(obs["timing"]["seconds"] for _, obs in observations(data))
    data["measured_seconds"] = measured
    if data.get("timed_seconds") is not None:
        data["timed_seconds"] = max(data["timed_seconds"], measured)
    data["elapsed_seconds"] = max(data["elapsed_seconds"], data.get("timed_seconds") or measured)
    if data.get("started_at"):
        earliest = _when(data["started_at"]) + datetime.timedelta(
            seconds=data["elapsed_seconds"] + 0.5)
        if _when(data["created_at"]) < earliest:
            data["created_at"] = earliest.isoformat(timespec="microseconds")


V5_SUMMARY_FIELDS = ("median_half_width", "stop", "canary_spread")


def current(data: dict) -> bool:
    """A schema v5 or later document (rounds, canary); older ones stay in their own shape."""
    return data.get("schema_version") in (5, 6, 7)


def _lower_median(values: list[float]) -> float:
    ranked = sorted(values)
    return ranked[(len(ranked) - 1) // 2]


def _rounds(data: dict) -> list:
    from pytest_sdbench.wire.rounds import Round
    return [decode(Round, r) for r in data.get("rounds", [])]


def resummarize(data: dict) -> None:
    if "summaries" not in data:
        return
    out = []
    policy = data["measurement_policy"]
    until = policy.get("until_pinned")
    if until is not None:
        from pytest_sdbench.wire.rounds import UntilPinned
        until = UntilPinned(**until)
    rounds = _rounds(data) if current(data) else []
    for phase in phases_of(data):
        # a sample is a work item: its observations (settled decode steps) share its round
        # and repeat, and its time is their lower median
        items: dict[int, dict[tuple[int, int], list[float]]] = {}
        for obs in data[phase]:
            key = (obs.get("round", 0), obs.get("repeat", 0))
            items.setdefault(obs["point_index"], {}).setdefault(key, []).append(
                obs["timing"]["seconds"])
        for i, by_item in sorted(items.items()):
            keys = sorted(by_item)
            t = [_lower_median(by_item[k]) for k in keys]
            rule = policy.get("median_interval", "normal_z")
            summary = asdict(summarize(phase, i, t, stop_rule(t, policy["repeats"], until, rule),
                                       point_canary_spread(rounds, [k[0] for k in keys]), rule))
            if not current(data):
                for name in V5_SUMMARY_FIELDS:
                    summary.pop(name)
            out.append(summary)
    data["summaries"] = out


def recanary(data: dict) -> None:
    """The host canary's summary recomputed from the rounds' readings."""
    if not current(data):
        return
    readings = [CanarySample(**s) for r in data["rounds"]
                for s in (r["canary_before"], r["canary_after"]) if s is not None]
    spread = canary_spread(CANARY_WORKLOAD, readings)
    data["host_canary"] = None if spread is None else asdict(spread)


def reorder(data: dict) -> None:
    """Rounds (v5): each round's order redrawn from the seed over the points it lists and
    those with a sample in it, and the native iteration IDs renumbered to run along the
    recorded order, as a forger who knows the rule would."""
    if not current(data) or data["measurement_policy"]["repeat_order"] != "rounds":
        return
    seed = data["measurement_policy"]["order_seed"]
    taken: dict[tuple[int, PointRef], list[dict]] = {}
    for phase in phases_of(data):
        for obs in data[phase]:
            taken.setdefault((obs["round"], PointRef(phase, obs["point_index"])), []).append(obs)
    next_id = 1
    for r in data["rounds"]:
        refs = {PointRef(x["phase"], x["point_index"]) for x in r["order"]} | \
            {ref for (index, ref) in taken if index == r["index"]}
        order = round_order(refs, seed, r["index"])
        r["order"] = [{"phase": ref.phase, "point_index": ref.point_index} for ref in order]
        for ref in order:
            steps = sorted(taken.get((r["index"], ref), []),
                           key=lambda o: (o.get("repeat", 0), o.get("step_index", 0)))
            for obs in steps:
                next_id += 7   # unbooked and warm-up steps run between measured ones
                set_native_id(obs, next_id)


def recount(data: dict) -> None:
    expected = sum(len(data["grid"].get(p, [])) for p in PHASES)
    completed = sum(len({o["point_index"] for o in data[p]}) for p in phases_of(data))
    skipped = data["coverage"]["skipped_points"]
    data["coverage"].update(expected=expected, completed=completed, skipped=len(skipped))
    finished = all(s.get("stop") != "not_finished" for s in data.get("summaries") or [])
    data["status"] = ("complete" if completed == expected and finished else
                      "partial" if completed else "failed")


def cohere(data: dict) -> dict:
    """Everything derived made to fit again: round orders and IDs, sums, summaries, the
    canary, coverage, digests."""
    reorder(data)
    retime(data)
    resummarize(data)
    recanary(data)
    recount(data)
    return reseal(data)


def max_native_id(data: dict) -> int:
    return max(obs["native_iteration_id"] for _, obs in observations(data))


def set_native_id(obs: dict, new: int) -> None:
    obs["native_iteration_id"] = obs["snapshot"]["native_iteration_id"] = new
    obs["timing"]["native_iteration_id"] = new


def drop_point(data: dict, phase: str, index: int, reason: str) -> None:
    """Skip a point: its observations removed, listed as skipped with ``reason``."""
    data[phase] = [o for o in data[phase] if o["point_index"] != index]
    data["coverage"]["skipped_points"].append(
        {"phase": phase, "point_index": index, "reason": reason})


def dedupe_decode(data: dict) -> None:
    """Decode points made equal by an edit (every requested AL set alike) merged into the
    first: the others' observations and skips dropped, the indices that follow renumbered."""
    first: dict[str, int] = {}
    renumber: dict[int, int] = {}
    for old, point in enumerate(data["grid"]["decode"]):
        key = json.dumps(point, sort_keys=True)
        if key not in first:
            first[key] = len(first)
            renumber[old] = first[key]
    data["grid"]["decode"] = [json.loads(key) for key in first]
    data["decode"] = [dict(o, point_index=renumber[o["point_index"]]) for o in data["decode"]
                      if o["point_index"] in renumber]
    data["coverage"]["skipped_points"] = [
        dict(s, point_index=renumber.get(s["point_index"], s["point_index"]))
        for s in data["coverage"]["skipped_points"]
        if s["phase"] != "decode" or s["point_index"] in renumber]


def keep_phases(data: dict, mode: str, phases: tuple[str, ...]) -> dict:
    """The artifact a collection of ``mode`` over ``phases`` alone writes: the other phases'
    points, rows, summaries, policies and places in the rounds' orders removed (their
    lists left empty: the document keeps its schema's keys), everything derived made to
    fit (cohere)."""
    data["mode"] = mode
    for phase in phases_of(data):
        if phase not in phases:
            data[phase], data["grid"][phase] = [], []
            data["measurement_policy"][phase] = None
    data["summaries"] = [s for s in data["summaries"] if s["phase"] in phases]
    for r in data.get("rounds", []):
        r["order"] = [x for x in r["order"] if x["phase"] in phases]
    return cohere(data)


def scale_times(data: dict, factor: float) -> None:
    """Every time of the artifact multiplied by ``factor``, coherently."""
    for _, obs in observations(data):
        obs["timing"]["seconds"] *= factor
        if "rank_seconds" in obs["timing"]:
            obs["timing"]["rank_seconds"] = [t * factor for t in obs["timing"]["rank_seconds"]]
    for name in ("elapsed_seconds", "timed_seconds"):
        if data.get(name) is not None:
            data[name] *= factor


def repeat_points(data: dict, factors: tuple[float, ...]) -> dict:
    """Every point measured len(factors)+1 times: sample r's time is its first sample's time
    scaled by factors[r-1] (sample 0 keeps it), each a native iteration of its own. In a v5
    document the samples are rounds: the document is cut to its first round, and each
    further sample is a round of its own (its order drawn from the seed, the canary
    readings those of the first round); else they are back-to-back repeats. The policy's
    repeats and everything derived follow (cohere)."""
    rounds = data["rounds"] if current(data) else []
    if rounds:
        del rounds[1:]
        for phase in phases_of(data):
            data[phase] = [o for o in data[phase] if o["round"] == 0]
    first = [(phase, o) for phase in phases_of(data) for o in data[phase] if o["repeat"] == 0]
    next_id = 1 + max_native_id(data)
    for r, factor in enumerate(factors, start=1):
        if rounds:
            rounds.append(dict(copy.deepcopy(rounds[0]), index=r))
        for phase, obs in first:
            twin = copy.deepcopy(obs)
            twin["repeat"] = r
            if rounds:
                twin["round"] = r
            set_native_id(twin, next_id)
            twin["timing"]["seconds"] = obs["timing"]["seconds"] * factor
            next_id += 1
            data[phase].append(twin)
    data["measurement_policy"]["repeats"] = len(factors) + 1
    return cohere(data)
