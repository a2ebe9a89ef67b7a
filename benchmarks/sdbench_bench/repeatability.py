"""Repeatability: the same grid collected twice, either back to back on one engine or on two
independent engine starts (--starts 2: each collection on an engine of its own, as two CI
runs would be), both artifacts written. Per point: |median1 / median2 - 1| of the retained
steps, the CV of the repeats within each collection, and whether the point passes the
consumer's (AISimulate's) import policy: CV <= 5% over 5 repeats in both collections and
agreement within 5%.

The comparison is pure logic over the artifacts' point summaries (tested on constructed
ones); the collection pair is shared with the cost measurement."""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_sdbench.wire.contract import (
    CONSUMER_MAX_CV,
    CONSUMER_MAX_DISAGREEMENT,
    CONSUMER_REPEATS,
)
from pytest_sdbench.wire.model import PointSummary

from .goals import AGREEMENT, IMPORTABLE

PAIR_KEY = "collection pair"
WIDEST = 4   # points listed under the row, widest disagreement first


@dataclass(frozen=True)
class PointAgreement:
    """One point as two collections measured it."""
    first: PointSummary
    second: PointSummary

    @property
    def key(self) -> tuple[str, int]:
        return self.first.phase, self.first.point_index

    @property
    def disagreement(self) -> float:
        """|median2 / median1 - 1|: how far the second collection's median moved."""
        return abs(self.second.median_seconds / self.first.median_seconds - 1)

    @property
    def importable(self) -> bool:
        """The consumer's policy: enough repeats and a CV within bound in both collections,
        and medians that agree within bound."""
        return all(s.samples >= CONSUMER_REPEATS and s.cv <= CONSUMER_MAX_CV
                   for s in (self.first, self.second)) and \
            self.disagreement <= CONSUMER_MAX_DISAGREEMENT


def agreements(first: Sequence[PointSummary],
               second: Sequence[PointSummary]) -> list[PointAgreement]:
    """The points both collections summarised, matched by phase and point index, in the
    first collection's order."""
    later = {(s.phase, s.point_index): s for s in second}
    return [PointAgreement(s, later[(s.phase, s.point_index)]) for s in first
            if (s.phase, s.point_index) in later]


@dataclass(frozen=True)
class Agreement:
    """The figures of a pair of collections."""
    points: int
    median_disagreement: float
    max_disagreement: float
    importable: int
    repeats: int                               # the fewest samples a point has
    cv: tuple[tuple[float, float], ...]        # (median, max) CV of each collection

    @property
    def importable_share(self) -> float:
        return self.importable / self.points if self.points else 0.0

    @property
    def judged(self) -> bool:
        """The policy can only be met with CONSUMER_REPEATS samples a point."""
        return self.repeats >= CONSUMER_REPEATS


def summarise(points: Sequence[PointAgreement]) -> Agreement:
    if not points:
        raise ValueError("no point was measured in both collections")
    diffs = [p.disagreement for p in points]
    cv = tuple((statistics.median(cvs), max(cvs)) for cvs in
               ([p.first.cv for p in points], [p.second.cv for p in points]))
    return Agreement(points=len(points), median_disagreement=statistics.median(diffs),
                     max_disagreement=max(diffs),
                     importable=sum(p.importable for p in points),
                     repeats=min(min(p.first.samples, p.second.samples) for p in points),
                     cv=cv)


def widest(points: Sequence[PointAgreement], n: int = WIDEST) -> list[PointAgreement]:
    return sorted(points, key=lambda p: p.disagreement, reverse=True)[:n]


# ---- the collection pair (shared with cost) -----------------------------------------------

def collection_pair(bench):
    """Two collections of one grid, written as artifacts: on bench's engine back to back
    (starts 1), or each on an engine started for it (starts 2). Collected once per run."""
    if PAIR_KEY not in bench.cache:
        bench.cache[PAIR_KEY] = _collect_pair(bench)
    return bench.cache[PAIR_KEY]


def _collect_pair(bench):
    from pytest_sdbench.run.collect import collect_to_artifact, grid_for

    from .bench import start
    out = bench.out or tempfile.mkdtemp(prefix="sdbench-bench-")

    def collect(engine):
        return collect_to_artifact(engine, bench.mode, grid_for(engine, bench.grid), out,
                                   repeats=bench.repeats)
    if bench.starts == 1:
        runs = [collect(bench.engine) for _ in range(2)]
    else:
        bench.close()   # one engine at a time: each collection gets a fresh start
        runs = []
        for _ in range(bench.starts):
            engine = start(bench.spec)
            try:
                runs.append(collect(engine))
            finally:
                engine.shutdown()
    digests = {r.artifact.integrity.grid_digest for r in runs}
    if len(digests) != 1:
        raise RuntimeError(f"the engine starts derived different grids ({sorted(digests)}); "
                           "pass one with --grid")
    return runs


def _graph_modes(artifact, phase: str, index: int) -> str:
    """How the point's retained steps ran, e.g. 'full' or 'eager/full'."""
    return "/".join(dict.fromkeys(o.graph_mode for o in getattr(artifact, phase)
                                  if o.point_index == index)) or "?"


def _where(bench) -> str:
    mode = bench.mode
    return (f"two {mode} collections back to back on one engine" if bench.starts == 1 else
            f"{mode} collections on {bench.starts} independent engine starts")


def run(bench) -> None:
    runs = collection_pair(bench)
    first, second = runs[0].artifact, runs[1].artifact
    points = agreements(first.summaries, second.summaries)
    figures = summarise(points)
    table = bench.table
    for p in widest(points):
        phase, index = p.key
        table.note(f"widest: {phase}[{index}] {p.first.median_seconds * 1e3:.3f} ms "
                   f"({_graph_modes(first, *p.key)}) then {p.second.median_seconds * 1e3:.3f} "
                   f"ms ({_graph_modes(second, *p.key)})")
    repeats = f", medians of {figures.repeats} repeats" if figures.repeats > 1 else ""
    table.row(f"repeatability: median |per-point difference|, {_where(bench)}",
              f"{100 * figures.median_disagreement:.2f}% over {figures.points} points "
              f"(max {100 * figures.max_disagreement:.1f}%{repeats})",
              (AGREEMENT, 100 * figures.median_disagreement))
    if figures.repeats > 1:
        table.row("repeatability: CV of the repeats within each collection",
                  "; ".join(f"{name}: median {100 * med:.2f}%, max {100 * top:.1f}%" for
                            name, (med, top) in zip(("first", "second"), figures.cv,
                                                    strict=True)))
    policy = (f"CV <= {100 * CONSUMER_MAX_CV:g}% over {CONSUMER_REPEATS} repeats in both "
              f"collections and agreement <= {100 * CONSUMER_MAX_DISAGREEMENT:g}%")
    if figures.judged:
        table.row("repeatability: points the consumer (AISimulate) imports",
                  f"{100 * figures.importable_share:.1f}% ({figures.importable} of "
                  f"{figures.points}: {policy})", (IMPORTABLE, 100 * figures.importable_share))
    else:
        table.row("repeatability: points the consumer (AISimulate) imports",
                  f"not judged: its policy ({policy}) needs {CONSUMER_REPEATS} repeats a "
                  f"point; this run has {figures.repeats} (--repeats {CONSUMER_REPEATS})")
    table.row("repeatability artifacts", ", ".join(str(r.path) for r in runs))
