"""The ``sdbench`` command: the plugin's work outside pytest.

    sdbench collect  [--mode agg] [--preset tiny | --model DIR --draft DIR] [--out DIR]
    sdbench validate PATH [PATH ...] [--k-window 1-5]   exit 0 valid, 1 invalid, 2 unusable
    sdbench show     PATH
    sdbench compare  BASELINE CANDIDATE [--fail-above PCT]
    sdbench export   ARTIFACT... --to aisimulate --out DIR   exit 0 written, 1 refused, 2 unusable
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from .options import add_cli_options, user_engine_args
from .wire.contract import K_WINDOW, STATUS_COMPLETE

EXIT_OK, EXIT_INVALID, EXIT_UNUSABLE = 0, 1, 2


def _k_window(text: str) -> tuple[int, int]:
    try:
        low, high = (int(x) for x in text.split("-", 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k-window: expected LOW-HIGH, got {text!r}") from None
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError(f"--k-window: need 1 <= LOW <= HIGH, got {text!r}")
    return low, high


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sdbench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="start an engine, collect a profile, write the artifact "
                       "(one engine and artifact per K of a sweep, plus an index)")
    add_cli_options(c, "collect")
    c.add_argument("--out", default="sdbench-artifacts", metavar="DIR")
    v = sub.add_parser("validate", help="check artifacts against the contract")
    v.add_argument("paths", nargs="+", metavar="PATH")
    v.add_argument("--k-window", type=_k_window, default=(1, 5), metavar="LOW-HIGH",
                   help="the consumer's draft-depth import window; K outside is flagged")
    s = sub.add_parser("show", help="print an artifact as a table")
    s.add_argument("path", metavar="PATH")
    m = sub.add_parser("compare", help="per-point time of two artifacts of the same grid")
    m.add_argument("baseline", metavar="BASELINE")
    m.add_argument("candidate", metavar="CANDIDATE")
    m.add_argument("--fail-above", type=float, default=None, metavar="PCT",
                   help="exit 1 when the median slowdown exceeds PCT percent")
    from .export.command import add_arguments
    add_arguments(sub.add_parser("export", help="write what a consumer (AISimulate) reads: "
                                 "native envelopes, profile and speculative FPM table"))
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    return {"collect": cmd_collect, "validate": cmd_validate, "show": cmd_show,
            "compare": cmd_compare, "export": cmd_export}[args.command](args)


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def cmd_collect(args) -> int:
    import os
    import warnings
    # A person reads the progress and the table; vLLM's log lines would bury them (set
    # VLLM_LOGGING_LEVEL to see them).
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    warnings.filterwarnings("ignore", category=FutureWarning)
    from .session import engine_spec
    low, high = K_WINDOW
    outside = [k for k in args.k if not low <= k <= high]
    if outside:
        _err(f"sdbench collect: note: --k {outside} lies outside the import window "
             f"K={low}-{high}; collected and kept, and flagged by `sdbench validate`")
    try:
        specs = [engine_spec(preset=args.preset, model=args.model, draft=args.draft,
                             draft_depth=k, cuda_graphs=args.cuda_graphs,
                             acceptance_length=args.acceptance_length,
                             vllm_defaults=args.vllm_defaults,
                             user_engine_args=user_engine_args(vars(args)),
                             target_revision=args.target_revision,
                             draft_revision=args.draft_revision, cli=True) for k in args.k]
    except ValueError as exc:
        _err(f"sdbench collect: {exc}")
        return EXIT_UNUSABLE
    runs, worst = [], EXIT_OK
    for spec in specs:
        code, run = _collect_one(spec, args)
        worst = max(worst, code)
        if run is None:
            return code
        runs.append(run)
    if len(runs) > 1:
        from .session import write_sweep_index
        print(f"wrote the K-sweep index {write_sweep_index(runs, args.out)}")
    return worst


def _collect_one(spec, args):
    """Start the engine of one K, collect, free it. (exit code, CollectionRun or None)"""
    from .engine import start_engine
    from .points import GridError
    from .session import InvalidArtifact, collect_to_artifact, describe, grid_for
    _err(f"sdbench: starting the engine ({spec.preset or spec.target}, K={spec.draft_depth}) ...")
    engine = start_engine(spec)
    _err(f"sdbench: engine started in {engine.start_seconds:.1f} s on {engine.device}")
    started = time.perf_counter()

    def progress(done, total, label):
        _err(f"sdbench [{done}/{total}] {label} ({time.perf_counter() - started:.1f} s)")
    try:
        grid = grid_for(engine, args.grid)
        run = collect_to_artifact(engine, args.mode, grid, args.out, progress=progress,
                                  repeats=args.repeats)
    except GridError as exc:
        _err(f"sdbench collect: {exc}")
        return EXIT_UNUSABLE, None
    except InvalidArtifact as exc:
        _err(f"sdbench collect: {exc}")
        return EXIT_INVALID, None
    finally:
        engine.shutdown()
    print(_table(run.artifact))
    print(f"wrote {describe(run)}")
    return (EXIT_OK if run.artifact.status == STATUS_COMPLETE else EXIT_INVALID), run


def cmd_validate(args) -> int:
    from .artifact import UnusableArtifact, validate_path
    worst = EXIT_OK
    for path in args.paths:
        try:
            report = validate_path(path, args.k_window)
        except UnusableArtifact as exc:
            print(f"UNUSABLE {exc}")
            worst = max(worst, EXIT_UNUSABLE)
            continue
        marker = f" (legacy {report.legacy})" if report.legacy else ""
        if report.ok:
            a = report.artifact
            print(f"VALID {path}{marker}: mode {a.mode}, status {a.status}, "
                  f"{a.coverage.completed}/{a.coverage.expected} points, device {a.device}")
        else:
            print(f"INVALID {path}{marker}: {len(report.errors)} violation(s)")
            for error in report.errors:
                print(f"  - {error}")
            worst = max(worst, EXIT_INVALID)
        for flag in report.flags:
            print(f"  flag: {flag}")
    return worst


def _load_valid(path):
    from .artifact import UnusableArtifact, validate_path
    try:
        report = validate_path(path)
    except UnusableArtifact as exc:
        _err(f"sdbench: {exc}")
        return None, EXIT_UNUSABLE
    if not report.ok:
        _err(f"sdbench: {path} is not a valid artifact; run `sdbench validate {path}`")
        return None, EXIT_INVALID
    return report.artifact, EXIT_OK


def _rows(a):
    for o in a.prefill:
        p = o.point
        yield (f"prefill[{o.point_index}]", f"B={p.batch_size} new={p.new_tokens} "
               f"prefix={p.cached_prefix_tokens}", o)
    for o in a.decode:
        p = o.point
        al = "natural" if p.acceptance_length is None else f"{p.acceptance_length:g}"
        yield (f"decode[{o.point_index}]", f"B={p.batch_size} ctx={p.context_tokens} "
               f"K={p.draft_depth} AL={al} (obs {o.observed_acceptance_length:.2f})", o)


def _table(a) -> str:
    lines = [f"{'point':<12} {'coordinates':<44} {'iter':>6} {'ms':>9} {'graph':>9}"]
    for name, coords, o in _rows(a):
        lines.append(f"{name:<12} {coords:<44} {o.native_iteration_id:>6} "
                     f"{o.timing.seconds * 1e3:>9.3f} {o.graph_mode:>9}")
    for s in a.coverage.skipped_points:
        lines.append(f"{s.phase}[{s.point_index}]  SKIPPED: {s.reason}")
    return "\n".join(lines)


def cmd_show(args) -> int:
    a, code = _load_valid(args.path)
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
    print(_table(a))
    return EXIT_OK


def cmd_compare(args) -> int:
    base, code = _load_valid(args.baseline)
    if base is None:
        return code
    cand, code = _load_valid(args.candidate)
    if cand is None:
        return code
    if base.integrity.grid_digest != cand.integrity.grid_digest:
        _err("sdbench compare: the two artifacts were collected on different grids "
             f"({base.integrity.grid_digest} vs {cand.integrity.grid_digest})")
        return EXIT_UNUSABLE
    before = {name: o.timing.seconds for name, _, o in _rows(base)}
    ratios = []
    print(f"{'point':<12} {'coordinates':<44} {'base ms':>9} {'cand ms':>9} {'change':>8}")
    for name, coords, o in _rows(cand):
        if name not in before:
            continue
        ratio = o.timing.seconds / before[name]
        ratios.append(ratio)
        print(f"{name:<12} {coords:<44} {before[name] * 1e3:>9.3f} "
              f"{o.timing.seconds * 1e3:>9.3f} {100 * (ratio - 1):>+7.1f}%")
    if not ratios:
        _err("sdbench compare: no point was measured in both artifacts")
        return EXIT_UNUSABLE
    median = 100 * (statistics.median(ratios) - 1)
    print(f"median change {median:+.1f}% over {len(ratios)} points")
    if args.fail_above is not None and median > args.fail_above:
        print(f"FAIL: median slowdown {median:+.1f}% exceeds {args.fail_above}%")
        return EXIT_INVALID
    return EXIT_OK


def cmd_export(args) -> int:
    from .engine.presets import config_texts
    from .export import KnownConfig
    from .export.command import run
    return run(args, {digest: KnownConfig(text, source)
                      for digest, (text, source) in config_texts().items()})


if __name__ == "__main__":
    sys.exit(main())
