"""The distributed seam: which rank this process is, gathering a value from every rank of a
tensor-parallel engine (each rank runs its own engine core in-process under vLLM's
external_launcher), and the rank agreement of one observer window.

Every rank schedules the same iterations in the same order (vLLM's external_launcher
relies on it), so the observer's native iteration IDs, stamped per rank, name the same
step on every rank. After each window every rank hands in what it saw: the IDs, its own
time of each step, a digest of each step's snapshot (request ids without vLLM's random
per-rank suffix) and a digest of the prompts. The ranks must agree on everything but the
times; the step's time is then the slowest rank's (STEP_TIME_SLOWEST_RANK), every rank's
own time kept. Every rank computes the same join from the same gathered values, so every
rank takes the same decisions afterwards (warm-up passes, failed points): the SPMD
engine never sees one rank run a request the others do not.

On a single-rank engine every function is trivial."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

# vLLM makes each request id unique per engine with '-' and 8 random hex characters
# (uuid4, unseeded, so it differs between ranks).
_RANDOM_SUFFIX = re.compile(r"-[0-9a-f]{8}$")


def _world():
    """vLLM's world group when torch.distributed is up with more than one rank, else None."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    from vllm.distributed.parallel_state import get_world_group
    return get_world_group()


def rank() -> int:
    world = _world()
    return 0 if world is None else int(world.rank_in_group)


def world_size() -> int:
    world = _world()
    return 1 if world is None else int(world.world_size)


def gather_from_ranks(value: Any) -> list[Any]:
    """Every rank's value, by rank, on every rank: an all-gather over vLLM's world CPU group
    (gloo, also on CUDA), so no device synchronisation is added. Every rank must call it at
    the same point (a call on one rank only waits for the others forever)."""
    world = _world()
    if world is None:
        return [value]
    import torch.distributed as dist
    out: list[Any] = [None] * world.world_size
    dist.all_gather_object(out, value, group=world.cpu_group)
    return out


# ---- the rank agreement of one window (pure logic) ----------------------------------------

def external_id(request_id: str) -> str:
    """The request id without vLLM's random per-rank suffix."""
    return _RANDOM_SUFFIX.sub("", request_id)


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def prompts_digest(prompts: list[list[int]]) -> str:
    return _digest(prompts)[:16]


def record_digest(record) -> str:
    """What the scheduler decided for one iteration and what its output reported, request
    ids without their suffix: everything of an observer record but its time."""
    rows = [[external_id(r.request_id), *r[1:]] for r in record.rows]
    accepted = sorted((external_id(k), v) for k, v in (record.accepted or {}).items())
    corrections = [[external_id(c[0]), *c[1:]] for c in record.corrections]
    return _digest([record.native_iteration_id, record.booking, rows, list(record.queue),
                    int(record.total_scheduled_tokens), accepted, record.graph_mode,
                    corrections])[:16]


@dataclass(frozen=True)
class RankWindow:
    """What one rank saw in one observer window."""
    ids: tuple[int, ...]
    seconds: tuple[float | None, ...]   # this rank's own time of each step (None: missing)
    digests: tuple[str, ...]
    prompts: str                        # prompts_digest of the window's prompts
    missing: str | None = None          # this rank's TimingMissing, if any


def rank_window(records, prompts: list[list[int]], missing: str | None = None) -> RankWindow:
    return RankWindow(ids=tuple(r.native_iteration_id for r in records),
                      seconds=tuple(None if r.timing is None else float(r.timing.seconds)
                                    for r in records),
                      digests=tuple(record_digest(r) for r in records),
                      prompts=prompts_digest(prompts), missing=missing)


class RankDisagreement(RuntimeError):
    """The ranks of one engine disagree on a window's prompts or snapshots."""


class RankTimingMissing(RuntimeError):
    """A rank's timing sample of a window never arrived."""


def join_ranks(windows: list[RankWindow]) -> dict[int, tuple[float, ...]]:
    """Each iteration's time on every rank, by native iteration ID, once every rank agrees
    on the window; RankDisagreement names the ranks and the iteration where they do not."""
    missing = [f"rank {r}: {w.missing}" for r, w in enumerate(windows) if w.missing]
    if missing:
        raise RankTimingMissing("; ".join(missing))
    first = windows[0]
    for r, w in enumerate(windows[1:], start=1):
        if w.prompts != first.prompts:
            raise RankDisagreement(f"ranks 0 and {r} ran different prompts (digest "
                                   f"{first.prompts} vs {w.prompts})")
        if w.ids != first.ids:
            raise RankDisagreement(f"ranks 0 and {r} recorded different iterations: "
                                   f"{list(first.ids)} vs {list(w.ids)}")
        for iid, a, b in zip(first.ids, first.digests, w.digests, strict=False):
            if a != b:
                raise RankDisagreement(f"ranks 0 and {r} disagree on the snapshot of native "
                                       f"iteration {iid} (digest {a} vs {b})")
    times: dict[int, tuple[float, ...]] = {}
    for i, iid in enumerate(first.ids):
        per_rank = tuple(w.seconds[i] for w in windows)
        absent = [r for r, t in enumerate(per_rank) if t is None]
        if absent:
            raise RankTimingMissing(f"native iteration {iid}: no timing sample on rank(s) "
                                    f"{absent}")
        times[iid] = tuple(t for t in per_rank if t is not None)
    return times


def step_seconds(rank_seconds: tuple[float, ...]) -> float:
    """The time of one tensor-parallel step: the slowest rank's (the step is done when
    every rank is)."""
    if not rank_seconds:
        raise ValueError("rank_seconds: a step needs at least one rank's time, got none")
    return max(rank_seconds)
