"""`sdbench show PATH`: an artifact as a table (every retained step as measured, each
point's summary), or a K-sweep index with its artifacts, one per K."""

from __future__ import annotations

import argparse

from ..wire.points import point_label
from .terminal import EXIT_INVALID, EXIT_OK, EXIT_UNUSABLE, err, load_valid

HELP = "print an artifact (or a K-sweep index) as a table"
SUMMARY_HEADER = "point summary"


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="an artifact, or a K-sweep index (its "
                        "artifacts, one per K)")


def main(args) -> int:
    from ..artifact import is_sweep_index
    from ..artifact.store import UnusableArtifact, read_json
    try:
        data = read_json(args.path)
    except UnusableArtifact as exc:
        err(f"sdbench: {exc}")
        return EXIT_UNUSABLE
    if is_sweep_index(data):
        return _show_index(args.path, data)
    from ..readers.describe import canary_line, placement_line, policy_line, repeat_policy
    a, code = load_valid(args.path)
    if a is None:
        return code
    ident = a.identity
    print(f"{args.path}: {a.kind} v{a.schema_version}, run {a.run_id}, {a.created_at}")
    print(f"mode {a.mode}, status {a.status}, {a.coverage.completed}/{a.coverage.expected} "
          f"points; device {a.device} ({ident.device_name.value}); vLLM "
          f"{ident.engine_version.value}; K={a.speculative.draft_depth}, acceptance "
          f"{a.speculative.acceptance_control}")
    print(f"KV capacity: {a.kv_capacity.num_blocks} blocks x {a.kv_capacity.block_size} = "
          f"{a.kv_capacity.tokens} tokens, {len(a.kv_capacity.groups)} group(s), draft layers "
          f"{', '.join(a.kv_capacity.draft_layer_names) or 'none'}")
    print(repeat_policy(a))
    print(policy_line(a))
    print(canary_line(a.host_canary))
    print(placement_line(None if a.environment is None else a.environment.cpu_placement))
    print(table(a))
    return EXIT_OK


def _rows(a):
    for o in a.prefill:
        yield f"prefill[{o.point_index}]", point_label(o.point), o
    for o in a.decode:
        yield (f"decode[{o.point_index}]",
               f"{point_label(o.point)} (obs {o.observed_acceptance_length:.2f})", o)
    for o in a.mixed:
        yield f"mixed[{o.point_index}]", point_label(o.point), o


def table(a) -> str:
    """Every retained step, as measured (by native ID), the skipped points, the summaries.
    The coordinates column is as wide as its longest label (a mixed point's names both its
    decode batch and its prefills)."""
    rows = sorted(_rows(a), key=lambda row: row[2].native_iteration_id)   # as measured
    width = max([44, *(len(coords) for _, coords, _ in rows)])
    lines = [f"{'point':<12} {'coordinates':<{width}} {'round':>5} {'iter':>6} {'ms':>9} "
             f"{'graph':>9} {'step':>4} {'SM MHz':>7}"]
    for name, coords, o in rows:
        step = getattr(o, "step_index", "-")
        clock = o.gpu_clock   # the lower of the two readings; * : taken while capped
        mhz = "-" if clock is None else \
            f"{min(clock.sm_mhz_before, clock.sm_mhz_after)}{'*' if clock.capped else ''}"
        lines.append(f"{name:<12} {coords:<{width}} {o.round:>5} {o.native_iteration_id:>6} "
                     f"{o.timing.seconds * 1e3:>9.3f} {o.graph_mode:>9} {step:>4} {mhz:>7}")
    for s in a.coverage.skipped_points:
        lines.append(f"{s.phase}[{s.point_index}]  SKIPPED: {s.reason}")
    if a.summaries:
        lines += ["", _summary_table(a)]
    return "\n".join(lines)


def _summary_table(a) -> str:
    """Each point's samples summarised (describe.SUMMARY_COLUMNS): n, median, the half
    width of its CI, CV across rounds, min, max, why it stopped, the canary's spread."""
    from ..readers.describe import SUMMARY_COLUMNS, SUMMARY_NOTE
    cells = [[c.cell(s) for c in SUMMARY_COLUMNS] for s in a.summaries]
    widths = [max(len(c.label), *(len(row[i]) for row in cells))
              for i, c in enumerate(SUMMARY_COLUMNS)]
    lines = [f"{SUMMARY_HEADER:<16} " + " ".join(
        c.label.rjust(w) for c, w in zip(SUMMARY_COLUMNS, widths, strict=True))]
    for s, row in zip(a.summaries, cells, strict=True):
        lines.append(f"{f'{s.phase}[{s.point_index}]':<16} " + " ".join(
            v.rjust(w) for v, w in zip(row, widths, strict=True)))
    return "\n".join([f"({SUMMARY_NOTE})", *lines])


def _show_index(path: str, data: dict) -> int:
    from pathlib import Path

    from ..artifact.sweep import validate_index
    report = validate_index(data, Path(path).parent)
    if not report.ok or report.shared is None:
        err(f"sdbench: {path} is not a valid K-sweep index; run `sdbench validate {path}`")
        return EXIT_INVALID
    shared = report.shared
    print(f"{path}: K-sweep index, created {data.get('created_at')}, "
          f"{len(data['artifacts'])} artifacts (one engine per K)")
    print(f"shared grid (K taken out): {len(shared)} points ({len(shared.prefill)} prefill, "
          f"{len(shared.decode)} decode), digest {_short(data['shared_grid_digest'])}; "
          f"grids identical: {'yes' if data['grids_identical'] else 'no'}")
    print(f"{'K':>3}  {'mode':<8} {'status':<9} {'points':>7} {'own':>4}  {'run':<12}  artifact")
    for entry, artifact_report in zip(data["artifacts"], report.artifacts, strict=True):
        artifact = artifact_report.artifact if artifact_report is not None else None
        assert artifact is not None   # a valid index names valid artifacts
        cov = artifact.coverage
        print(f"{entry['draft_depth']:>3}  {entry['mode']:<8} {entry['status']:<9} "
              f"{f'{cov.completed}/{cov.expected}':>7} {entry['own_points']:>4}  "
              f"{entry['run_id'][:12]:<12}  {entry['path']}")
    return EXIT_OK


def _short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12]
