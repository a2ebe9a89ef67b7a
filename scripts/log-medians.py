"""The medians an `sdbench serve`/`sdbench emulate` log printed (one line a finished run:
"LABEL: N completed, F failed; TTFT median T ms, TPOT median P ms"), against a served
folder's results: for a run whose files were lost and whose log came back (issue 54's first
emulated run on the real server's machine). Prints one markdown row a run and the summary.
  python scripts/log-medians.py LOG SERVED_DIR"""

import json
import re
import statistics
import sys
from pathlib import Path

LINE = re.compile(r"sdbench \w+: (\S+): (\d+) completed, (\d+) failed; TTFT median ([\d.]+) "
                  r"ms, TPOT median ([\d.]+) ms")


def main(log: str, served: str) -> None:
    printed = {m[1]: (float(m[4]), float(m[5]))
               for m in map(LINE.search, Path(log).read_text().splitlines()) if m}
    manifest = json.loads((Path(served) / "served-manifest.json").read_text())
    errors: dict[str, list[float]] = {"TTFT": [], "TPOT": []}
    print("| run | TTFT real ms | TTFT logged ms | error | TPOT real ms | TPOT logged ms | error |")
    print("|---|---|---|---|---|---|---|")
    for run in manifest["runs"]:
        label = run.get("label") or f"rate-{run['rate']:g}"
        if run.get("pass", 0) or label not in printed:
            continue
        result = json.loads((Path(served) / run["result"]).read_text())
        ttft, tpot = printed[label]
        e_ttft = ttft / result["median_ttft_ms"] - 1
        e_tpot = tpot / result["median_tpot_ms"] - 1
        errors["TTFT"].append(e_ttft)
        errors["TPOT"].append(e_tpot)
        print(f"| {label} | {result['median_ttft_ms']:.1f} | {ttft:.1f} | {e_ttft:+.1%} | "
              f"{result['median_tpot_ms']:.2f} | {tpot:.2f} | {e_tpot:+.1%} |")
    for name, found in errors.items():
        size = [abs(e) for e in found]
        print(f"{name}: {len(size)} runs, median abs(error) {statistics.median(size):.1%}, "
              f"max {max(size):.1%}, {sum(e <= 0.25 for e in size)} within 25%")


if __name__ == "__main__":
    main(*sys.argv[1:3])
