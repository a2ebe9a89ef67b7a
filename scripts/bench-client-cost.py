"""Where the seconds of `sdbench serve` / `sdbench emulate` folders went, side by side: the
whole (the manifest's created to finished), the server's start, the runs as the manifest
timed them, and the benchmark inside them as `vllm bench serve` measured it ("Benchmark
duration" of each run's log). The runs' seconds less the benchmark's are the client's cost:
a process a run before fidelity/bench_client.py, one process for all runs after it.
  python scripts/bench-client-cost.py SERVED_DIR [SERVED_DIR ...]"""

import json
import re
import sys
from datetime import datetime
from pathlib import Path

DURATION = re.compile(r"Benchmark duration \(s\):\s+([\d.]+)")


def seconds_between(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def main(folders: list[str]) -> None:
    print("| folder | client | runs | whole s | server healthy s | runs s | benchmark s | "
          "client's cost s | a run |")
    print("|---|---|---|---|---|---|---|---|---|")
    for folder in map(Path, folders):
        manifest = json.loads((folder / "served-manifest.json").read_text())
        runs = manifest["runs"]
        timed = sum(run["seconds"] for run in runs)
        bench = sum(float(DURATION.search((folder / run["log"]).read_text())[1]) for run in runs)
        whole = seconds_between(manifest["created"], manifest["finished"])
        client = "one process" if "client" in manifest else "a process a run"
        print(f"| {folder} | {client} | {len(runs)} | {whole:.1f} | "
              f"{manifest['server']['healthy_after_seconds']:.1f} | {timed:.1f} | {bench:.1f} | "
              f"{timed - bench:.1f} | {(timed - bench) / len(runs):.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
