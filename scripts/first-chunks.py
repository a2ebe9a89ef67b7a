"""A request's first chunks, real against emulated: the median TTFT, first gap (first to
second chunk) and later gaps of every run two served folders share (`sdbench serve` and
`sdbench emulate` of the same traffic), to see where the real engine's hand-off of a step's
output (fidelity/served_windows.py) moves time between a TTFT and the gaps after it; then each
closed loop's first wave (its first C requests, sent together): the first-sent request's
first token and first gap, and when the others' first tokens came (ms from the first send).
  python scripts/first-chunks.py REAL_DIR EMULATED_DIR"""

import json
import statistics
import sys
from pathlib import Path


def medians(result: dict) -> tuple[float, ...]:
    """TTFT, the first gap and the later gaps, medians in ms."""
    ttft = [1e3 * t for t in result["ttfts"] if t]
    first = [1e3 * gaps[0] for gaps in result["itls"] if gaps]
    later = [1e3 * g for gaps in result["itls"] for g in gaps[1:]]
    return tuple(statistics.median(x) if x else float("nan") for x in (ttft, first, later))


def first_wave(result: dict) -> tuple[float, ...]:
    """The first wave of a closed loop (the first max_concurrency requests sent): the
    first-sent request's TTFT and first gap, the others' first tokens (earliest, latest), ms
    from the first send."""
    sent = sorted(zip(result["start_times"], result["ttfts"], result["itls"], strict=True))
    wave = [(start, ttft, gaps) for start, ttft, gaps in sent[:result["max_concurrency"]] if ttft]
    t0 = wave[0][0]
    others = [1e3 * (start - t0 + ttft) for start, ttft, _ in wave[1:]]
    first_gap = 1e3 * wave[0][2][0] if wave[0][2] else float("nan")
    return 1e3 * wave[0][1], first_gap, min(others, default=float("nan")), max(others,
                                                                                default=float("nan"))


def main(real: str, emulated: str) -> None:
    print("| run | TTFT real | TTFT emulated | first gap real | first gap emulated "
          "| TTFT + first gap, real | emulated | later gaps real | emulated |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in sorted(Path(real).glob("served-*.json")):
        other = Path(emulated) / path.name
        if path.name == "served-manifest.json" or not other.exists():
            continue
        r = medians(json.loads(path.read_text()))
        e = medians(json.loads(other.read_text()))
        print(f"| {path.stem.removeprefix('served-')} | {r[0]:.2f} | {e[0]:.2f} | {r[1]:.2f} "
              f"| {e[1]:.2f} | {r[0] + r[1]:.2f} | {e[0] + e[1]:.2f} | {r[2]:.2f} | {e[2]:.2f} |")
    print("\n| closed loop | first request's TTFT real | emulated | its first gap real | emulated "
          "| the others' first tokens real | emulated |")
    print("|---|---|---|---|---|---|---|")
    for path in sorted(Path(real).glob("served-c*.json")):
        other = Path(emulated) / path.name
        if not other.exists():
            continue
        r = first_wave(json.loads(path.read_text()))
        e = first_wave(json.loads(other.read_text()))
        print(f"| {path.stem.removeprefix('served-')} | {r[0]:.1f} | {e[0]:.1f} | {r[1]:.1f} | "
              f"{e[1]:.1f} | {r[2]:.1f}-{r[3]:.1f} | {e[2]:.1f}-{e[3]:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
