"""Two profiles' decode rows side by side, and the host canary each was collected under: to
see whether a small model's decode steps moved with the host (qwen3-0.6b's steps are a few
milliseconds, and part of each is the host launching it). For each (batch, context) point
both measured: the median step time of each and their ratio; then the median ratio over all
common points and each profile's host canary (python and launch medians and spreads).
  python scripts/decode-rows-beside.py PROFILE_A PROFILE_B [--batch 1,4,16,64]"""

import argparse
import statistics

from pytest_sdbench.artifact.store import read_json

Point = tuple[int, int]


def decode_medians(artifact: dict) -> dict[Point, float]:
    """The median step time (ms) of each decode point, over its rows (rounds)."""
    times: dict[Point, list[float]] = {}
    for row in artifact["decode"]:
        point = (row["point"]["batch_size"], row["point"]["context_tokens"])
        times.setdefault(point, []).append(row["timing"]["seconds"] * 1e3)
    return {point: statistics.median(ms) for point, ms in times.items()}


def canary_line(name: str, artifact: dict) -> str:
    c = artifact["host_canary"]
    return (f"{name}: host canary python {c['python_median_seconds'] * 1e3:.2f} ms (spread "
            f"{c['python_spread']:.1%}), launch {c['launch_median_seconds'] * 1e3:.2f} ms "
            f"(spread {c['launch_spread']:.1%}), {c['samples']} samples; observer "
            f"{artifact['observer_cost']['host_seconds_per_step'] * 1e6:.1f} us a step")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--batch", default="1,2,4,8,16,32,64")
    args = parser.parse_args()
    a, b = read_json(args.a), read_json(args.b)
    ma, mb = decode_medians(a), decode_medians(b)
    common = sorted(set(ma) & set(mb))
    batches = [int(x) for x in args.batch.split(",")]
    print("| context | " + " | ".join(f"B={x} A/B ms" for x in batches) + " |")
    print("|---|" + "---|" * len(batches))
    for context in sorted({c for _, c in common}):
        cells = [f"{ma[(x, context)]:.2f}/{mb[(x, context)]:.2f}" if (x, context) in ma
                 and (x, context) in mb else "-" for x in batches]
        print(f"| {context} | " + " | ".join(cells) + " |")
    ratios = [ma[p] / mb[p] - 1 for p in common]
    print(f"\n{len(common)} common decode points: A/B - 1 median {statistics.median(ratios):+.1%}"
          f" (min {min(ratios):+.1%}, max {max(ratios):+.1%})")
    print(canary_line("A", a))
    print(canary_line("B", b))


if __name__ == "__main__":
    main()
