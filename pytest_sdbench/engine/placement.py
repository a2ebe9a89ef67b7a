"""Where the engine's threads run: the CPU affinity of every thread of this process, read
from the OS after the engine started (recorded in the artifact's environment, as
AISimulate's collector records its own), and the user's pinning (--sdbench-cpus LIST),
applied to every thread of the process before the engine starts, so that the threads the
engine then creates inherit it.

Pinning is evidence, not a promise of speed: on the H200 host, pinning the engine thread
to one core made steps 16% faster but noisier (DESIGN.md). vLLM's CPU backend binds its
OpenMP threads itself; the record says what the OS reports after that.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..wire.model import CpuPlacement, ThreadPlacement

PLACEMENT_SOURCE = "os.sched_getaffinity of each thread in /proc/self/task, after start-up"


class CpuListError(ValueError):
    """A CPU list that cannot be used on this machine."""


def parse_cpus(text: str) -> tuple[int, ...]:
    """A CPU list as taskset and Slurm spell it: '0-3,8,10-11' -> (0, 1, 2, 3, 8, 10, 11)."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        low, sep, high = part.partition("-")
        try:
            first, last = int(low), int(high) if sep else int(low)
        except ValueError:
            raise CpuListError(f"expected CPU numbers and ranges like 0-3,8, got {text!r}") \
                from None
        if first < 0 or last < first:
            raise CpuListError(f"expected ranges LOW-HIGH with 0 <= LOW <= HIGH, got {part!r}")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def check_cpus(cpus: tuple[int, ...]) -> None:
    """Every CPU of the list is one this process may use."""
    allowed = os.sched_getaffinity(0)
    outside = [c for c in cpus if c not in allowed]
    if outside:
        raise CpuListError(f"CPU(s) {outside} are not available to this process (it may use "
                           f"{_spell(sorted(allowed))})")


def _spell(cpus: list[int]) -> str:
    """0,1,2,3,8 -> '0-3,8'."""
    parts, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            parts.append(f"{start}-{c}" if c != start else f"{c}")
            start = None
    return ",".join(parts)


def _threads() -> list[int]:
    return sorted(int(p.name) for p in Path("/proc/self/task").iterdir() if p.name.isdigit())


def pin(cpus: tuple[int, ...]) -> tuple[int, ...]:
    """Every thread of this process, and those it creates later, on `cpus`; returns the
    main thread's mask before, for unpin()."""
    before = tuple(sorted(os.sched_getaffinity(os.getpid())))
    _set_all(cpus)
    return before


def unpin(before: tuple[int, ...]) -> None:
    """Every thread back on the mask pin() found."""
    _set_all(before)


def _set_all(cpus: tuple[int, ...]) -> None:
    for tid in _threads():
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            continue   # ended meanwhile


def read_placement(requested: tuple[int, ...] | None) -> CpuPlacement:
    threads = []
    for tid in _threads():
        try:
            allowed = tuple(sorted(os.sched_getaffinity(tid)))
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except (ProcessLookupError, FileNotFoundError):
            continue
        threads.append(ThreadPlacement(tid=tid, name=name, allowed_cpus=allowed))
    return CpuPlacement(requested_cpus=requested,
                        main_thread_allowed_cpus=tuple(sorted(os.sched_getaffinity(os.getpid()))),
                        threads=tuple(threads), source=PLACEMENT_SOURCE)
