#!/usr/bin/env python3
"""What the collector's pause of the garbage collector costs before each measured pass: a
full gc.collect() against gc.collect(1) (the young generations, what it runs now), with no
observation alive and with an artifact's observations alive (decoded from its JSON).

    python scripts/gc-cost.py [ARTIFACT.json[.gz|.xz]]
    (default: the H200 planning profile, docs/evidence/h200/aisimulate/)
"""

import gc
import sys
import time
from pathlib import Path

from pytest_sdbench.artifact.store import read_json  # plain, gzip or xz, within the caps
from pytest_sdbench.wire import typed
from pytest_sdbench.wire.model import DecodeObservation, PrefillObservation

DEFAULT = (Path(__file__).resolve().parent.parent / "docs/evidence/h200/aisimulate"
           / "sdbench-agg-k3-7747be92372d.json.xz")


def median_ms(generation: int | None) -> float:
    seconds = []
    for _ in range(7):
        start = time.perf_counter()
        gc.collect() if generation is None else gc.collect(generation)
        seconds.append(time.perf_counter() - start)
    return 1000 * sorted(seconds)[3]


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    data = read_json(path)
    alive: list = []
    for load in (False, True):
        if load:
            alive += [typed.decode(PrefillObservation, o) for o in data["prefill"]]
            alive += [typed.decode(DecodeObservation, o) for o in data["decode"]]
        print(f"{len(alive):5d} observations alive, {len(gc.get_objects()):8d} tracked "
              f"objects: gc.collect() {median_ms(None):7.2f} ms, "
              f"gc.collect(1) {median_ms(1):5.2f} ms (median of 7)")


if __name__ == "__main__":
    main()
