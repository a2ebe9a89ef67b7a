"""The index of a K sweep: one artifact per K (vLLM fixes K when an engine starts), named with
the grid they share with K taken out (points.sweep). It is written beside its artifacts and
read by `sdbench validate` (every artifact it names exists, is valid and is the one it
describes) and `sdbench show`; docs/artifact.md describes its fields."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from ..grid.shared import SharedGrid, shared_grid, with_depth
from ..wire import typed
from ..wire.contract import SWEEP_INDEX_KIND
from ..wire.files import atomic_write_text
from ..wire.model import Artifact, utc_now
from .store import UnusableArtifact, read_json
from .validate.report import DEFAULT_K_WINDOW, Report, validate_data

WHY = ("vLLM fixes K (num_speculative_tokens) when the engine starts: its drafter, CUDA graphs "
       "and KV layout are built for it, so each K is measured on an engine of its own")
ENTRY_FIELDS = {"draft_depth": int, "path": str, "run_id": str, "status": str, "mode": str,
                "grid_digest": str, "own_points": int}


def k_label(depths: Sequence[int]) -> str:
    """K as a file name says it: k3, k1-5 (a range), k1_3_5 (a list)."""
    ks = sorted(depths)
    if len(ks) > 1 and ks == list(range(ks[0], ks[-1] + 1)):
        return f"k{ks[0]}-{ks[-1]}"
    return "k" + "_".join(map(str, ks))


def sweep_index_name(mode: str, depths: Sequence[int], token: str) -> str:
    return f"sdbench-sweep-{mode}-{k_label(depths)}-{token}.json"


def sweep_index(runs: Sequence[tuple[Artifact, str]]) -> dict:
    """The index of a K sweep: its artifacts (with the file names they were written under,
    beside the index), one per K, and the grid they share with K taken out, with its digest.
    Each artifact's grid holds the shared grid with its K filled in and `own_points`
    besides (none unless the grid was derived from each engine: batches at that K's captured
    sizes, AL K+1); `grids_identical`: no artifact has any."""
    ordered = sorted(runs, key=lambda run: run[0].speculative.draft_depth)
    shared = shared_grid([a.grid for a, _ in ordered])
    entries = [{"draft_depth": a.speculative.draft_depth, "path": name, "run_id": a.run_id,
                "status": a.status, "mode": a.mode, "grid_digest": a.integrity.grid_digest,
                "own_points": len(a.grid) - len(shared)} for a, name in ordered]
    return {"kind": SWEEP_INDEX_KIND, "created_at": utc_now(),
            "draft_depths": [e["draft_depth"] for e in entries], "artifacts": entries,
            "shared_grid": typed.encode(shared), "shared_grid_digest": typed.digest(shared),
            "grids_identical": not any(e["own_points"] for e in entries), "why": WHY}


def index_text(index: dict) -> str:
    return json.dumps(index, indent=1) + "\n"


@dataclass
class IndexReport:
    """An index checked: its violations (each naming the field), and per entry the report of
    the artifact it names (None where it could not be read)."""
    index: dict
    errors: list[str] = field(default_factory=list)
    artifacts: list[Report | None] = field(default_factory=list)
    shared: SharedGrid | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


def write_sweep_index(written: Sequence[tuple[Artifact, Path]], out_dir: str | Path) -> Path:
    """The index of a K sweep's artifacts, written beside them; its name
    says the mode and the K (sdbench-sweep-agg-k1-5-<id>.json)."""
    index = sweep_index([(a, Path(path).name) for a, path in written])
    name = sweep_index_name(written[0][0].mode, index["draft_depths"], uuid.uuid4().hex[:12])
    return atomic_write_text(Path(out_dir) / name, index_text(index))


def describe_sweep_index(path: Path, written: Sequence[tuple[Artifact, Path]]) -> str:
    depths = sorted(a.speculative.draft_depth for a, _ in written)
    return (f"{path} (K-sweep index of {len(written)} artifacts, "
            f"K={','.join(map(str, depths))}, mode {written[0][0].mode})")


def validate_index(data: dict, folder: str | Path,
                   k_window: tuple[int, int] = DEFAULT_K_WINDOW) -> IndexReport:
    """Check an index read from `folder`: its fields, the shared grid's digest, and that every
    artifact it names exists beside it, is valid, and is the one the entry describes (K, run,
    status, mode, grid digest, the shared grid with its K, own points)."""
    report = IndexReport(data)
    err = report.errors.append
    try:
        shared = typed.decode(SharedGrid, data.get("shared_grid"))
    except typed.DecodeError as exc:
        err("shared_grid: " + "; ".join(exc.errors))
        shared = None
    report.shared = shared
    if shared is not None and data.get("shared_grid_digest") != typed.digest(shared):
        err(f"shared_grid_digest: {data.get('shared_grid_digest')!r} is not the digest of "
            f"shared_grid ({typed.digest(shared)})")
    entries = data.get("artifacts")
    if not isinstance(entries, list) or not entries:
        err(f"artifacts: expected a list of the sweep's artifacts, got {entries!r}")
        return report
    depths = [e.get("draft_depth") if isinstance(e, dict) else None for e in entries]
    if data.get("draft_depths") != depths:
        err(f"draft_depths: {data.get('draft_depths')!r}, but the artifacts are of K {depths}")
    if len(set(map(str, depths))) != len(depths):
        err(f"artifacts: K {depths} repeats a draft depth; a sweep has one artifact per K")
    own = [e.get("own_points") if isinstance(e, dict) else None for e in entries]
    if data.get("grids_identical") is not (not any(own)):
        err(f"grids_identical: {data.get('grids_identical')!r}, but own_points are {own}")
    for i, entry in enumerate(entries):
        report.artifacts.append(_check_entry(i, entry, Path(folder), shared, k_window, err))
    return report


def _check_entry(i: int, entry, folder: Path, shared: SharedGrid | None,
                 k_window: tuple[int, int], err) -> Report | None:
    where = f"artifacts[{i}]"
    if not isinstance(entry, dict):
        err(f"{where}: expected an object, got {type(entry).__name__}")
        return None
    for name, kind in ENTRY_FIELDS.items():
        value = entry.get(name)
        if type(value) is not kind:
            err(f"{where}.{name}: expected {kind.__name__}, got {value!r}")
            return None
    name = entry["path"]
    if PurePath(name).name != name:
        err(f"{where}.path: {name!r} is not a file name beside the index")
        return None
    path = folder / name
    try:
        report = validate_data(read_json(path), k_window)
    except UnusableArtifact as exc:
        err(f"{where}.path: {exc}")
        return None
    if not report.ok or report.artifact is None:
        err(f"{where}.path: {path} is not a valid artifact ({len(report.errors)} violation(s); "
            f"run `sdbench validate {path}`)")
        return report
    a = report.artifact
    for field_name, actual in (("draft_depth", a.speculative.draft_depth),
                               ("run_id", a.run_id), ("status", a.status), ("mode", a.mode),
                               ("grid_digest", a.integrity.grid_digest)):
        if entry[field_name] != actual:
            err(f"{where}.{field_name}: {entry[field_name]!r}, but {name} says {actual!r}")
    if shared is not None:
        mine = with_depth(shared, a.speculative.draft_depth)
        if not (set(mine.prefill) <= set(a.grid.prefill) and
                set(mine.decode) <= set(a.grid.decode)):
            err(f"{where}: {name}'s grid does not hold the shared grid with "
                f"K={a.speculative.draft_depth}")
        elif entry["own_points"] != len(a.grid) - len(shared):
            err(f"{where}.own_points: {entry['own_points']}, but {name}'s grid holds "
                f"{len(a.grid) - len(shared)} points besides the shared grid")
    return report
