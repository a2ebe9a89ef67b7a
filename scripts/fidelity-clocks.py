#!/usr/bin/env python3
"""Does the GPU's clock explain the fidelity run's small-batch offset? A serving run of
scripts/plans/fidelity.txt (its folder: fidelity-run.json[.gz|.xz], steps.csv[.gz|.xz] and the
gpu-clocks.csv read beside it) against the profile it was predicted from, collected with
its own clock reading (scripts/plans/repeatability.txt: artifact, log, gpu-clocks CSV).
Prints the SM clock and the power cap in each serving run's window, the clock at the
profile's decode samples by batch size, and our prediction's bias by run and batch size.
    python scripts/fidelity-clocks.py FIDELITY_DIR PROFILE.json[.xz] PROFILE.log[.gz] PROFILE.csv"""

import csv
import gzip
import importlib.util
import lzma
import statistics as st
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from pytest_sdbench.artifact.store import read_json  # plain, gzip or xz, within the caps

# one home for reading nvidia-smi's CSV and placing a collection's samples on it
_spec = importlib.util.spec_from_file_location(
    "repeatability_clocks", Path(__file__).with_name("repeatability-clocks.py"))
assert _spec is not None
assert _spec.loader is not None
clocks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(clocks)

BANDS = ((1, 1), (2, 4), (5, 16), (17, 48), (49, 64))
FAST_MHZ, SLOW_MHZ = 1800, 1600   # a sample read near the top of the clock range, or capped


def _one(folder: Path, stem: str) -> Path:
    found = [p for p in (folder / stem, folder / f"{stem}.gz", folder / f"{stem}.xz")
             if p.exists()]
    if not found:
        sys.exit(f"{folder}: no {stem}, {stem}.gz or {stem}.xz")
    return found[0]


def _open_text(path: Path):
    """A plain, gzipped or xz text file, known by its first bytes (as read_json knows them)."""
    with path.open("rb") as handle:
        magic = handle.read(6)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.open(path, "rt")
    if magic == b"\xfd7zXZ\x00":
        return lzma.open(path, "rt")
    return open(path)


def _spread(mhz: list[int]) -> str:
    q = st.quantiles(mhz, n=10) if len(mhz) > 1 else [mhz[0], mhz[0]]
    return f"SM clock median {st.median(mhz):.0f} MHz (p10 {q[0]:.0f}, p90 {q[-1]:.0f})"


def serving_windows(folder: Path) -> None:
    run = read_json(_one(folder, "fidelity-run.json"))
    readings = clocks.read_clocks(str(folder / "gpu-clocks.csv"))
    for number, served in enumerate(run["runs"]):
        t0 = datetime.fromisoformat(served["started_at"]).timestamp()
        window = [r for r in readings if t0 <= r[0] <= t0 + served["wall_seconds"]]
        capped = sum(1 for r in window if r[2] & clocks.POWER_CAP)
        print(f"serving run {number} ({served['label']}, {served['wall_seconds']:.1f} s): "
              f"{_spread([r[1] for r in window])}; under the power cap {capped} of "
              f"{len(window)} readings")


def profile_clock(artifact: str, log: str, csv_path: str) -> None:
    grid = read_json(artifact)["grid"]["decode"]
    by_batch: dict[int, list[clocks.Sample]] = defaultdict(list)
    # each sample's step relative to its point's median, by the clock read beside it
    relative: dict[tuple[int, int], dict[str, list[float]]] = defaultdict(
        lambda: {"fast": [], "slow": []})
    for (phase, index), samples in clocks.samples(artifact, log, csv_path).items():
        if phase != "decode":
            continue
        batch = grid[index]["batch_size"]
        by_batch[batch].extend(samples)
        median = st.median(s[0] for s in samples)
        band = next(b for b in BANDS if b[0] <= batch <= b[1])
        for step, mhz, _ in samples:
            if mhz >= FAST_MHZ or mhz <= SLOW_MHZ:
                relative[band]["fast" if mhz >= FAST_MHZ else "slow"].append(step / median)
    for batch, samples in sorted(by_batch.items()):
        capped = sum(1 for s in samples if s[2] & clocks.POWER_CAP)
        print(f"profile decode B={batch}: {len(samples)} samples, "
              f"{_spread([s[1] for s in samples])}; under the power cap {capped}")
    for (low, high), split in sorted(relative.items()):
        told = [f"{len(v)} read at {'>=' if k == 'fast' else '<='} "
                f"{FAST_MHZ if k == 'fast' else SLOW_MHZ} MHz: step / its point's median "
                f"{st.median(v):.3f}" for k, v in split.items() if v]
        print(f"profile decode B {low}-{high}, samples " + "; ".join(told))


def bias_by_batch(folder: Path) -> None:
    path = _one(folder, "steps.csv")
    with _open_text(path) as handle:
        rows = [r for r in csv.DictReader(handle) if r["kind"] == "decode" and r["ours_ms"]]
    errors: dict[tuple[str, tuple[int, int]], list[float]] = defaultdict(list)
    for r in rows:
        batch = int(r["decode_requests"])
        band = next(b for b in BANDS if b[0] <= batch <= b[1])
        errors[(r["run"], band)].append(float(r["ours_ms"]) / float(r["measured_ms"]) - 1)
    for (run, (low, high)), e in sorted(errors.items()):
        print(f"ours, decode, serving run {run}, B {low}-{high}: {len(e)} steps, "
              f"bias {100 * st.median(e):+.1f}%")


def main(args: list[str]) -> None:
    if len(args) != 4:
        sys.exit(__doc__)
    folder = Path(args[0])
    serving_windows(folder)
    profile_clock(*args[1:])
    bias_by_batch(folder)


if __name__ == "__main__":
    main(sys.argv[1:])
