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
from dataclasses import asdict
from pathlib import Path

from pytest_sdbench.wire.model import summarize
from pytest_sdbench.wire.typed import digest

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
H200 = ROOT / "docs" / "evidence" / "h200"
# Real artifacts: the CPU v4 fixture; a v4 H200 production profile (the smallest of K=3:
# graphs, synthetic acceptance, 5 repeats, engine settings); and the committed H200 agg
# artifacts (schema v3, read as legacy; their forgeries stay v3-shaped, digests recomputed
# on the document as written).
BASES = {
    "cpu-v4": FIXTURES / "cpu-agg-v4.json",
    "h200-production-v4": H200 / "production" / "sdbench-agg-36506276d78b.json",
    "h200-graph-v3": H200 / "artifacts-graph" / "sdbench-agg-150af679fb5a.json",
    "h200-eager-v3": H200 / "artifacts-eager" / "sdbench-agg-d7f9e6f72f75.json",
}
_LOADED = {name: json.loads(path.read_text()) for name, path in BASES.items()}
PHASES = ("prefill", "decode")


def load(name: str) -> dict:
    return copy.deepcopy(_LOADED[name])


def observations(data: dict):
    for phase in PHASES:
        for obs in data.get(phase, []):
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


def resummarize(data: dict) -> None:
    if "summaries" not in data:
        return
    out = []
    for phase in PHASES:
        by_point: dict[int, list[float]] = {}
        for obs in data[phase]:
            by_point.setdefault(obs["point_index"], []).append(obs["timing"]["seconds"])
        out += [asdict(summarize(phase, i, t)) for i, t in sorted(by_point.items())]
    data["summaries"] = out


def recount(data: dict) -> None:
    expected = len(data["grid"]["prefill"]) + len(data["grid"]["decode"])
    completed = sum(len({o["point_index"] for o in data[p]}) for p in PHASES)
    skipped = data["coverage"]["skipped_points"]
    data["coverage"].update(expected=expected, completed=completed, skipped=len(skipped))
    data["status"] = ("complete" if completed == expected else
                      "partial" if completed else "failed")


def cohere(data: dict) -> dict:
    """Everything derived made to fit again: sums, summaries, coverage, digests."""
    retime(data)
    resummarize(data)
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
    """Every point measured len(factors)+1 times: repeat r's time is the original time
    scaled by factors[r-1] (repeat 0 keeps it), each repeat a native iteration of its own;
    the policy's repeats and the summaries follow (sums and digests: cohere)."""
    next_id = 1 + max_native_id(data)
    for phase in PHASES:
        extra = []
        for obs in data[phase]:
            for r, factor in enumerate(factors, start=1):
                twin = copy.deepcopy(obs)
                twin["repeat"] = r
                set_native_id(twin, next_id)
                twin["timing"]["seconds"] = obs["timing"]["seconds"] * factor
                next_id += 1
                extra.append(twin)
        data[phase] += extra
    data["measurement_policy"]["repeats"] = len(factors) + 1
    resummarize(data)
    return data
