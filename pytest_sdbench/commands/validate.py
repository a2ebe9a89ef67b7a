"""`sdbench validate PATH [PATH ...] [--k-window LOW-HIGH]`: artifacts against the contract,
and K-sweep indexes against the artifacts they name. Exit 0 every PATH valid, 1 one or more
invalid, 2 one or more unusable."""

from __future__ import annotations

import argparse

from ..wire.contract import K_WINDOW, MAX_REPORTED_VIOLATIONS
from .terminal import EXIT_INVALID, EXIT_OK, EXIT_UNUSABLE, one_line

HELP = "check artifacts (and K-sweep indexes) against the contract"
DESCRIPTION = ("Check artifacts against the contract, and K-sweep indexes against the "
               "artifacts they name.")
EPILOG = ("exit status: 0 every PATH valid (flags are notes, not failures); 1 one or more "
          "invalid (each violation names its field); 2 one or more unusable (no such file, "
          "not JSON, not an artifact)")


def k_window(text: str) -> tuple[int, int]:
    try:
        low, high = (int(x) for x in text.split("-", 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k-window: expected LOW-HIGH, got {text!r}") from None
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError(f"--k-window: need 1 <= LOW <= HIGH, got {text!r}")
    return low, high


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="an artifact (.json), or a K-sweep index: every artifact it "
                        "names must exist beside it, be valid and be the one it describes")
    parser.add_argument("--k-window", type=k_window, default=K_WINDOW, metavar="LOW-HIGH",
                        help="the consumer's draft-depth import window; K outside is flagged")


def main(args) -> int:
    from ..artifact import check_claims_an_artifact, is_sweep_index
    from ..artifact.store import UnusableArtifact, read_json
    from ..artifact.validate.report import validate_data
    worst = EXIT_OK
    for path in args.paths:
        try:
            data = read_json(path)
            if is_sweep_index(data):
                worst = max(worst, _validate_index(path, data, args.k_window))
                continue
            check_claims_an_artifact(data, path)
            report = validate_data(data, args.k_window)
        except UnusableArtifact as exc:
            print(one_line(f"UNUSABLE {exc}"))
            worst = max(worst, EXIT_UNUSABLE)
            continue
        except (RecursionError, MemoryError, OverflowError) as exc:   # fail closed, one line
            print(one_line(f"UNUSABLE {path}: cannot be checked ({type(exc).__name__})"))
            worst = max(worst, EXIT_UNUSABLE)
            continue
        marker = f" (legacy {report.legacy})" if report.legacy else ""
        if report.ok:
            a = report.artifact
            assert a is not None  # a valid report carries its artifact
            print(f"VALID {path}{marker}: mode {a.mode}, K={a.speculative.draft_depth}, "
                  f"status {a.status}, {a.coverage.completed}/{a.coverage.expected} points, "
                  f"device {a.device}")
        else:
            _print_violations(f"INVALID {path}{marker}", report.errors)
            worst = max(worst, EXIT_INVALID)
        for flag in report.flags:
            print(one_line(f"  flag: {flag}"))
    return worst


def _print_violations(head: str, errors) -> None:
    print(f"{head}: {len(errors)} violation(s)")
    for error in errors[:MAX_REPORTED_VIOLATIONS]:
        print(one_line(f"  - {error}"))
    if len(errors) > MAX_REPORTED_VIOLATIONS:
        print(f"  ... and {len(errors) - MAX_REPORTED_VIOLATIONS} more")


def _validate_index(path: str, data: dict, window) -> int:
    """A K-sweep index: its fields, and every artifact it names (artifact.sweep)."""
    from pathlib import Path

    from ..artifact.sweep import validate_index
    report = validate_index(data, Path(path).parent, window)
    if not report.ok:
        _print_violations(f"INVALID {path} (K-sweep index)", report.errors)
        return EXIT_INVALID
    entries = data["artifacts"]
    print(f"VALID {path}: K-sweep index, mode {entries[0]['mode']}, "
          f"K={','.join(str(e['draft_depth']) for e in entries)}: {len(entries)} artifacts, "
          "each present beside it, valid and the one it describes")
    return EXIT_OK
