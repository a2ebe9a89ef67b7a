"""What limits the price of served mixed steps, side by side for each served result: the
mixed gaps alone (served_steps.MIXED_RULE), the same prefills over a window of steps
(served_windows.WINDOW_RULE), and the window again with each mixed point read at its fastest
repeat (a diagnosis, not a rule: it shows how much the slow repeats of a few points move the
price); then the mixed points whose repeats spread more than SPREAD.
  python scripts/mixed-windows.py PROFILE RESULT.json [RESULT.json ...]"""

import dataclasses
import json
import sys
from collections import defaultdict
from pathlib import Path

from pytest_sdbench.fidelity.served_steps import price_served_steps, served_requests
from pytest_sdbench.fidelity.served_windows import price_mixed_windows
from pytest_sdbench.run.profile import read_profile
from pytest_sdbench.wire.model import Artifact

SPREAD = 0.25   # slowest / fastest repeat - 1


def repeats_by_point(artifact: Artifact) -> dict[int, list]:
    by_point: dict[int, list] = defaultdict(list)
    for o in artifact.mixed:
        by_point[o.point_index].append(o)
    return by_point


def fastest_repeats(artifact: Artifact) -> Artifact:
    """The artifact with each mixed point's fastest repeat only."""
    kept = tuple(min(os, key=lambda o: o.timing.seconds)
                 for os in repeats_by_point(artifact).values())
    return dataclasses.replace(artifact, mixed=kept)


def figure(summary: dict | None) -> str:
    return (f"{summary['median_abs_error']:.1%} ({summary['bias']:+.1%})" if summary
            else "-")


def main(profile: str, results: list[str]) -> None:
    artifact = read_profile(profile)
    fastest = fastest_repeats(artifact)
    print("| result | mixed gaps | median abs(e) (bias) | windows | window | their gap alone "
          "| window, fastest repeats |")
    print("|---|---|---|---|---|---|---|")
    for path in results:
        requests = served_requests(json.loads(Path(path).read_text()))
        gaps = price_served_steps(artifact, requests)["mixed"]
        windows = price_mixed_windows(artifact, requests)
        again = price_mixed_windows(fastest, requests)
        print(f"| {path} | {gaps['gaps']} | {figure(gaps['overall'])} | {windows['windows']} "
              f"| {figure(windows['overall'])} | {figure(windows['mixed_gap_alone'])} "
              f"| {figure(again['overall'])} |")
    print(f"\nmixed points whose repeats spread more than {SPREAD:.0%} (ms):")
    for index, os in sorted(repeats_by_point(artifact).items()):
        ms = sorted(1e3 * o.timing.seconds for o in os)
        if ms[-1] / ms[0] - 1 > SPREAD:
            p = os[0].point
            print(f"- mixed[{index}] B_d {p.decode_batch_size} C {p.context_tokens} "
                  f"B_p {p.prefill_batch_size} T {p.prefill_tokens} P "
                  f"{p.cached_prefix_tokens} ({os[0].graph_mode}): "
                  + ", ".join(f"{x:.1f}" for x in ms))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
