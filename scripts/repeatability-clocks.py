"""Does the GPU's clock explain a pair's disagreement? Two collections of issue 17's pair
(scripts/plans/repeatability.txt writes each one's artifact, log and gpu-clocks CSV): per sample,
the SM clock nvidia-smi read (once a second) when the log says the sample's work item started
(the artifact's started_at plus the item's elapsed time), against the sample's step time
relative to its point's median; per point, the two runs' clock ratio against their median
ratio. Prints the correlations (of the logs) and the clock's range. One run, or more than two
(different grids), gets the within-run figures only.
  python scripts/repeatability-clocks.py A.json[.gz] A.log[.gz] A.csv [B.json[.gz] ...]"""

import csv
import gzip
import math
import re
import statistics as st
import sys
from datetime import datetime, timezone

from pytest_sdbench.artifact.store import read_json  # plain or gzipped, within the caps

ITEM = re.compile(r"^sdbench \[\d+/\d+\] round (\d+)/\d+ (prefill|decode)\[(\d+)\] .*"
                  r"\(([\d.]+) s\)$")
POWER_CAP = 0x4   # nvidia-smi clocks_event_reasons: SW power cap


def read_clocks(path: str) -> list[tuple[float, int, int]]:
    """(epoch seconds, SM MHz, event reasons) a reading."""
    with open(path) as handle:
        rows = list(csv.reader(handle))[1:]
    readings = []
    for row in rows:
        when = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
        readings.append((when.replace(tzinfo=timezone.utc).timestamp(),
                         int(row[1].split()[0]), int(row[6].strip(), 16)))
    return readings


def item_starts(log: str) -> dict[tuple[int, str, int], float]:
    """(round from 0, phase, point index) -> seconds into the collection."""
    with gzip.open(log, "rt") if log.endswith(".gz") else open(log) as handle:
        lines = handle.read().splitlines()
    starts = {}
    for line in lines:
        m = ITEM.match(line.strip())
        if m:
            starts[(int(m[1]) - 1, m[2], int(m[3]))] = float(m[4])
    return starts


Sample = tuple[float, int, int]   # step seconds, SM MHz, event reasons


def samples(artifact: str, log: str, clock_csv: str) -> dict[tuple[str, int], list[Sample]]:
    data = read_json(artifact)
    t0 = datetime.fromisoformat(data["started_at"]).timestamp()
    starts, clocks = item_starts(log), read_clocks(clock_csv)
    points: dict[tuple[str, int], list[Sample]] = {}
    for phase in ("prefill", "decode"):
        for row in data[phase]:
            when = t0 + starts[(row["round"], phase, row["point_index"])] + 0.5
            _, mhz, reasons = min(clocks, key=lambda c: abs(c[0] - when))
            points.setdefault((phase, row["point_index"]), []).append(
                (row["timing"]["seconds"], mhz, reasons))
    return points


def corr(x: list[float], y: list[float]) -> float:
    mx, my = st.mean(x), st.mean(y)
    sx = math.sqrt(sum((v - mx) ** 2 for v in x))
    sy = math.sqrt(sum((v - my) ** 2 for v in y))
    return sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / (sx * sy)


def within_run(name: str, points: dict[tuple[str, int], list[Sample]]) -> None:
    dclock, dstep = [], []
    for ss in points.values():
        step, mhz = st.median(s[0] for s in ss), st.median(s[1] for s in ss)
        for s in ss:
            dclock.append(math.log(s[1] / mhz))
            dstep.append(math.log(s[0] / step))
    print(f"run {name}: {len(dstep)} samples; corr(log clock / point's median clock, "
          f"log step / point's median step) = {corr(dclock, dstep):+.3f}")
    off = [(c, s) for c, s in zip(dclock, dstep, strict=True) if abs(c) > 0.05]
    if len(off) > 2:
        print(f"  samples whose clock is >5% off the point's median clock: {len(off)}; "
              f"corr {corr(*map(list, zip(*off, strict=True))):+.3f}")


def across_runs(a: dict[tuple[str, int], list[Sample]],
                b: dict[tuple[str, int], list[Sample]]) -> None:
    dclock, dstep = [], []
    for key in a.keys() & b.keys():
        dclock.append(math.log(st.mean(s[1] for s in b[key]) / st.mean(s[1] for s in a[key])))
        dstep.append(math.log(st.median(s[0] for s in b[key]) / st.median(s[0] for s in a[key])))
    print(f"across runs, {len(dstep)} points: corr(log clock B / clock A, "
          f"log median B / median A) = {corr(dclock, dstep):+.3f}")


def main(args: list[str]) -> None:
    if not args or len(args) % 3:
        sys.exit(__doc__)
    runs = [samples(*args[i:i + 3]) for i in range(0, len(args), 3)]
    for number, points in enumerate(runs):
        name = chr(ord("A") + number)
        within_run(name, points)
    if len(runs) == 2:   # a pair of the same grid: does the clock explain their disagreement?
        across_runs(*runs)
    every = [s for points in runs for ss in points.values() for s in ss]
    mhz = [s[1] for s in every]
    q = st.quantiles(mhz, n=10)
    print(f"SM clock at the samples: median {st.median(mhz):.0f} MHz, p10 {q[0]:.0f}, "
          f"p90 {q[-1]:.0f}, min {min(mhz)}, max {max(mhz)}")
    capped = sum(1 for s in every if s[2] & POWER_CAP)
    print(f"samples taken under the power cap (clocks_event_reasons 0x4): {capped} of {len(every)}")


if __name__ == "__main__":
    main(sys.argv[1:])
