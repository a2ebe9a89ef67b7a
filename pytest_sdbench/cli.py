"""The ``sdbench`` command: the plugin's work outside pytest.

    sdbench collect  [--mode agg] [--preset tiny | --model DIR --draft DIR] [--k 3 | --k 1-5]
                     [--artifact-dir DIR] [--plots] ...   (the pytest options less --sdbench-)
    sdbench validate PATH [PATH ...] [--k-window 1-5]   exit 0 valid, 1 invalid, 2 unusable
    sdbench show     PATH                               an artifact or a K-sweep index
    sdbench compare  BASELINE CANDIDATE [--fail-above PCT] [--noise-floor PCT]
                     [--format text|markdown|csv|json]   exit 0 pass, 1 fail, 2 unusable
    sdbench plot     [ARTIFACT ...] [--compare BASELINE CANDIDATE] [--out DIR]  (matplotlib)
    sdbench export   ARTIFACT... --to aisimulate --out DIR   exit 0 written, 1 refused, 2 unusable
    sdbench fidelity PROFILE [--rate RPS ...] [--out DIR] | --report DIR   exit 0 reported
    sdbench fidelity PROFILE --served DIR [--consumer-python PY]   served vs AISimulate
    sdbench serve    PROFILE --rate R [--rate R2] --num-prompts N --input-len I --output-len O
                     --out DIR   (`vllm serve` + `vllm bench serve`)   exit 0 served

Every command refuses what it cannot use in one line with exit 2 (an unwritable output
folder included), before it starts an engine or writes anything.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from .commands.terminal import Parser, Version, closed_pipe
from .readers.compare_render import FORMATS
from .run.options import (
    DEFAULT_ARTIFACT_DIR,
    add_cli_options,
    k_window_note,
)
from .wire.contract import (
    K_WINDOW,
    MAX_REPORTED_VIOLATIONS,
    MIN_ROUNDS_FOR_NOISE,
    STATUS_COMPLETE,
)
from .wire.files import out_dir_problem
from .wire.points import point_label

EXIT_OK, EXIT_INVALID, EXIT_UNUSABLE = 0, 1, 2
EXIT_INTERRUPTED = 130   # 128 + SIGINT, as a shell reports a Ctrl-C
DEFAULT_PLOT_DIR = "sdbench-plots"
VALIDATE_EXIT_CODES = ("exit status: 0 every PATH valid (flags are notes, not failures); 1 one "
                       "or more invalid (each violation names its field); 2 one or more "
                       "unusable (no such file, not JSON, not an artifact)")


def _k_window(text: str) -> tuple[int, int]:
    try:
        low, high = (int(x) for x in text.split("-", 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k-window: expected LOW-HIGH, got {text!r}") from None
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError(f"--k-window: need 1 <= LOW <= HIGH, got {text!r}")
    return low, high


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="sdbench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action=Version)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="start an engine, collect a profile, write the artifact "
                       "(one engine and artifact per K of a sweep, plus an index)",
                       description="Start a vLLM engine with an EAGLE3 draft, collect a "
                       "profile, write the artifact. The options are the pytest plugin's "
                       "without the --sdbench- prefix (pytest_sdbench/run/options.py). Exit 0 "
                       "complete, 1 failed or partial, 2 unusable input (nothing started), "
                       "130 interrupted (what was measured is kept and named).")
    add_cli_options(c, "collect")
    v = sub.add_parser("validate", help="check artifacts (and K-sweep indexes) against the "
                       "contract", description="Check artifacts against the contract, and "
                       "K-sweep indexes against the artifacts they name.",
                       epilog=VALIDATE_EXIT_CODES)
    v.add_argument("paths", nargs="+", metavar="PATH",
                   help="an artifact (.json), or a K-sweep index: every artifact it names "
                   "must exist beside it, be valid and be the one it describes")
    v.add_argument("--k-window", type=_k_window, default=K_WINDOW, metavar="LOW-HIGH",
                   help="the consumer's draft-depth import window; K outside is flagged")
    s = sub.add_parser("show", help="print an artifact (or a K-sweep index) as a table")
    s.add_argument("path", metavar="PATH", help="an artifact, or a K-sweep index (its "
                   "artifacts, one per K)")
    m = sub.add_parser("compare", help="gate a candidate against a baseline, point by point, "
                       "each against its noise across rounds (exit 1 on a regression, noise "
                       "it cannot judge or an unfair comparison)")
    m.add_argument("baseline", metavar="BASELINE", help="the artifact compared against")
    m.add_argument("candidate", metavar="CANDIDATE", help="the artifact judged")
    m.add_argument("--fail-above", type=float, default=0.0, metavar="PCT",
                   help="a point regresses when slower by more than its noise and PCT percent "
                   "(default 0: its noise alone)")
    m.add_argument("--noise-floor", type=float, default=None, metavar="PCT",
                   help="state the noise: the noise of every point when a side has fewer than "
                   f"{MIN_ROUNDS_FOR_NOISE} rounds (or back-to-back repeats, or is legacy), "
                   "which otherwise fails the gate as noise it cannot judge; with enough "
                   "rounds, the least noise assumed")
    m.add_argument("--format", choices=FORMATS, default="text",
                   help="output for people (text), CI summaries (markdown), or tools")
    pl = sub.add_parser("plot", help="draw artifacts: PNGs and one self-contained HTML page "
                        "(needs matplotlib: pip install 'pytest-sdbench[plot]')")
    pl.add_argument("paths", nargs="*", metavar="ARTIFACT", help="artifacts to draw")
    pl.add_argument("--compare", nargs=2, metavar=("BASELINE", "CANDIDATE"),
                    help="also draw the per-point change of CANDIDATE against BASELINE, "
                    "coloured by `sdbench compare`'s verdict (default rule)")
    pl.add_argument("--out", default=DEFAULT_PLOT_DIR, metavar="DIR",
                    help=f"folder for the PNGs and sdbench-plots.html (default "
                    f"{DEFAULT_PLOT_DIR}; created if missing)")
    from .aisimulate.command import add_arguments
    add_arguments(sub.add_parser("export", help="write what a consumer (AISimulate) reads: "
                                 "native envelopes, profile and speculative FPM table"))
    from .fidelity.command import add_arguments as add_fidelity_arguments
    add_fidelity_arguments(sub.add_parser(
        "fidelity", help="serve a held-out workload on an engine configured as the "
        "profile's; report how well the profile (ours, AISimulate's loader) predicted it"))
    from .fidelity.serve_command import add_arguments as add_serve_arguments
    add_serve_arguments(sub.add_parser(
        "serve", help="serve as users run it: `vllm serve` with the profile's engine "
        "settings, driven by `vllm bench serve` (random dataset, Poisson arrivals) at each "
        "rate; vLLM's result files and a manifest"))
    x = sub.add_parser("crosscheck", help="measure vLLM alone (no observer, its own "
                       "multiprocess engine core) at the profile's decode points, with the "
                       "profile's engine settings; report profile/vLLM per point")
    x.add_argument("profile", metavar="PROFILE", help="an artifact collected on this device")
    x.add_argument("--engine-core", choices=("multiprocess", "inprocess"),
                   default="multiprocess", help="vLLM's engine core in its own process, as "
                   "`vllm serve` runs it (default), or in this one")
    x.add_argument("--repeats", type=_positive, default=5, metavar="N",
                   help="slopes measured a point; its figure is their median (default 5)")
    x.add_argument("--out", metavar="DIR", help="folder for crosscheck-<core>.json/.txt/.png "
                   "(default: beside the profile)")
    x.add_argument("--no-plots", action="store_true", help="no PNG")
    return parser


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each command's parser, by name (for the help and the option-table tests)."""
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"collect": cmd_collect, "validate": cmd_validate, "show": cmd_show,
                "compare": cmd_compare, "plot": cmd_plot,
                "export": cmd_export, "fidelity": cmd_fidelity,
                "crosscheck": cmd_crosscheck, "serve": cmd_serve}[args.command](args)
    except KeyboardInterrupt:   # what was measured is saved (and said) where it was taken
        _err("sdbench: interrupted")
        return EXIT_INTERRUPTED


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def console_main() -> int:
    """`sdbench` and `python -m pytest_sdbench.cli`: main, with Ctrl-C and `kill` as an
    interrupt wherever the command was started (what was measured is kept and said). A
    shell starts a background job with SIGINT ignored, and Python keeps it ignored; SIGTERM's
    default would end the process with no partial file and the engine not shut down. Not in
    main itself: tests call main inside pytest's own process."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        code = main()
        sys.stdout.flush()   # a closed pipe is found here when the output fit the buffer
        return code
    except BrokenPipeError:   # `sdbench show A | head -1`
        return closed_pipe()


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def cmd_collect(args) -> int:
    import os
    import warnings
    # A person reads the progress and the table; vLLM's log lines would bury them (set
    # VLLM_LOGGING_LEVEL to see them).
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    warnings.filterwarnings("ignore", category=FutureWarning)
    from .engine.host import registry_dir
    from .run.inputs import check_vllm_installed, read_inputs
    from .run.options import InputError
    note = k_window_note(args.k, cli=True)
    if note:
        _err(f"sdbench collect: note: {note}")
    try:   # everything checkable before an engine starts (15-90 s), read once
        check_vllm_installed()
        inputs = read_inputs(vars(args), cli=True,
                             out_dir=args.artifact_dir or DEFAULT_ARTIFACT_DIR)
        registry_dir()   # another user's registry folder is refused (a ValueError)
        specs = [inputs.engine.spec(k) for k in inputs.depths]
    except (InputError, ValueError) as exc:
        _err(f"sdbench collect: {exc}")
        return EXIT_UNUSABLE
    assert inputs.out_dir is not None
    out = str(inputs.out_dir)
    runs, worst = [], EXIT_OK
    for spec in specs:
        code, run = _collect_one(spec, inputs, out)
        worst = max(worst, code)
        if run is None:
            return code
        runs.append(run)
    if len(runs) > 1:
        from .artifact.sweep import describe_sweep_index, write_sweep_index
        written = [(r.artifact, r.path) for r in runs]
        index = write_sweep_index(written, out)
        print(f"wrote the K-sweep index {describe_sweep_index(index, written)}")
    return worst


def _collect_one(spec, inputs, out: str):
    """Start the engine of one K, collect, free it. (exit code, CollectionRun or None)"""
    from .engine.launch import start_engine
    from .engine.surface import describe_failure
    from .run.collect import (
        ArtifactNotWritten,
        InvalidArtifact,
        collect_to_artifact,
        describe,
        describe_time,
        grid_for,
    )
    from .wire.points import GridError
    _err(f"sdbench: starting the engine ({spec.preset or spec.target}, K={spec.draft_depth}) ...")
    try:
        engine = start_engine(spec)
    except ImportError as exc:
        _err(f"sdbench collect: vLLM cannot be imported here ({describe_failure(exc)})")
        return EXIT_UNUSABLE, None
    except Exception as exc:  # noqa: BLE001 (vLLM refuses in many ways; one line says why)
        _err(f"sdbench collect: the engine did not start: {describe_failure(exc)}")
        return EXIT_INVALID, None
    _err(f"sdbench: engine started in {engine.start_seconds:.1f} s on {engine.device}")
    started = time.perf_counter()

    def progress(done, total, label):
        _err(f"sdbench [{done}/{total}] {label} ({time.perf_counter() - started:.1f} s)")
    try:
        run = collect_to_artifact(engine, inputs.mode, grid_for(engine, inputs.grid), out,
                                  progress=progress, repeats=inputs.repeats, notify=_err)
    except GridError as exc:
        _err(f"sdbench collect: {exc}")
        return EXIT_UNUSABLE, None
    except InvalidArtifact as exc:
        _err(f"sdbench collect: {exc}")
        return EXIT_INVALID, None
    except ArtifactNotWritten as exc:   # the table still, and where the data is
        print(_table(exc.artifact))
        _err(f"sdbench collect: {exc}")
        if exc.partial_path is None:
            _err("sdbench collect: the artifact follows on stdout as JSON")
            from .wire import typed
            print(json.dumps(typed.encode(exc.artifact), indent=1))
        return EXIT_INVALID, None
    except Exception as exc:  # noqa: BLE001 (the engine failed; the partial line was said)
        _err(f"sdbench collect: the collection failed: {describe_failure(exc)}")
        return EXIT_INVALID, None
    finally:
        engine.shutdown()
    print(_table(run.artifact))
    print(f"wrote {describe(run)}")
    if getattr(run, "result", None) is not None:
        print(f"time: {describe_time(run.result)}")
    if inputs.plots:
        from .readers.plot import plot_beside
        print(f"wrote the plots {plot_beside(run.path, run.artifact)[-1]}")
    return (EXIT_OK if run.artifact.status == STATUS_COMPLETE else EXIT_INVALID), run


def cmd_validate(args) -> int:
    from .artifact import check_claims_an_artifact, is_sweep_index
    from .artifact.store import UnusableArtifact, read_json
    from .artifact.validate.report import validate_data
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
            print(_one_line(f"UNUSABLE {exc}"))
            worst = max(worst, EXIT_UNUSABLE)
            continue
        except (RecursionError, MemoryError, OverflowError) as exc:   # fail closed, one line
            print(_one_line(f"UNUSABLE {path}: cannot be checked ({type(exc).__name__})"))
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
            print(_one_line(f"  flag: {flag}"))
    return worst


def _print_violations(head: str, errors) -> None:
    print(f"{head}: {len(errors)} violation(s)")
    for error in errors[:MAX_REPORTED_VIOLATIONS]:
        print(_one_line(f"  - {error}"))
    if len(errors) > MAX_REPORTED_VIOLATIONS:
        print(f"  ... and {len(errors) - MAX_REPORTED_VIOLATIONS} more")


def _validate_index(path: str, data: dict, k_window) -> int:
    """A K-sweep index: its fields, and every artifact it names (artifact.sweep)."""
    from pathlib import Path

    from .artifact.sweep import validate_index
    report = validate_index(data, Path(path).parent, k_window)
    if not report.ok:
        _print_violations(f"INVALID {path} (K-sweep index)", report.errors)
        return EXIT_INVALID
    entries = data["artifacts"]
    print(f"VALID {path}: K-sweep index, mode {entries[0]['mode']}, "
          f"K={','.join(str(e['draft_depth']) for e in entries)}: {len(entries)} artifacts, "
          "each present beside it, valid and the one it describes")
    return EXIT_OK


def _one_line(text: str) -> str:
    """One printed line per message, whatever the artifact's strings hold."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _load_valid(path):
    from .artifact import validate_path
    from .artifact.store import UnusableArtifact
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
        yield f"prefill[{o.point_index}]", point_label(o.point), o
    for o in a.decode:
        yield (f"decode[{o.point_index}]",
               f"{point_label(o.point)} (obs {o.observed_acceptance_length:.2f})", o)


def _table(a) -> str:
    lines = [f"{'point':<12} {'coordinates':<44} {'round':>5} {'iter':>6} {'ms':>9} "
             f"{'graph':>9} {'step':>4} {'SM MHz':>7}"]
    rows = sorted(_rows(a), key=lambda row: row[2].native_iteration_id)   # as measured
    for name, coords, o in rows:
        step = getattr(o, "step_index", "-")
        clock = o.gpu_clock   # the lower of the two readings; * : taken while capped
        mhz = "-" if clock is None else \
            f"{min(clock.sm_mhz_before, clock.sm_mhz_after)}{'*' if clock.capped else ''}"
        lines.append(f"{name:<12} {coords:<44} {o.round:>5} {o.native_iteration_id:>6} "
                     f"{o.timing.seconds * 1e3:>9.3f} {o.graph_mode:>9} {step:>4} {mhz:>7}")
    for s in a.coverage.skipped_points:
        lines.append(f"{s.phase}[{s.point_index}]  SKIPPED: {s.reason}")
    if a.summaries:
        lines += ["", _summary_table(a)]
    return "\n".join(lines)


SUMMARY_HEADER = "point summary"


def _summary_table(a) -> str:
    """Each point's samples summarised (describe.SUMMARY_COLUMNS): n, median, the half
    width of its CI, CV across rounds, min, max, why it stopped, the canary's spread."""
    from .readers.describe import SUMMARY_COLUMNS, SUMMARY_NOTE
    cells = [[c.cell(s) for c in SUMMARY_COLUMNS] for s in a.summaries]
    widths = [max(len(c.label), *(len(row[i]) for row in cells))
              for i, c in enumerate(SUMMARY_COLUMNS)]
    lines = [f"{SUMMARY_HEADER:<16} " + " ".join(
        c.label.rjust(w) for c, w in zip(SUMMARY_COLUMNS, widths, strict=True))]
    for s, row in zip(a.summaries, cells, strict=True):
        lines.append(f"{f'{s.phase}[{s.point_index}]':<16} " + " ".join(
            v.rjust(w) for v, w in zip(row, widths, strict=True)))
    return "\n".join([f"({SUMMARY_NOTE})", *lines])


def cmd_show(args) -> int:
    from .artifact import is_sweep_index
    from .artifact.store import UnusableArtifact, read_json
    try:
        data = read_json(args.path)
    except UnusableArtifact as exc:
        _err(f"sdbench: {exc}")
        return EXIT_UNUSABLE
    if is_sweep_index(data):
        return _show_index(args.path, data)
    from .readers.describe import canary_line, placement_line, policy_line, repeat_policy
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
    print(repeat_policy(a))
    print(policy_line(a))
    print(canary_line(a.host_canary))
    print(placement_line(None if a.environment is None else a.environment.cpu_placement))
    print(_table(a))
    return EXIT_OK


def _show_index(path: str, data: dict) -> int:
    from pathlib import Path

    from .artifact.sweep import validate_index
    report = validate_index(data, Path(path).parent)
    if not report.ok or report.shared is None:
        _err(f"sdbench: {path} is not a valid K-sweep index; run `sdbench validate {path}`")
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


def cmd_compare(args) -> int:
    """The gate (compare.py): exit 1 on a regressed point, on noise it cannot judge (too
    few rounds, no --noise-floor) or an unfair comparison (a missing point, a partial side,
    another mode, a contended side), 2 on unusable input."""
    from .readers.compare import compare
    from .readers.compare_render import render
    from .run.recollect import collect_command
    base, _ = _load_valid(args.baseline)
    if base is None:
        return EXIT_UNUSABLE
    cand, _code = _load_valid(args.candidate)
    if cand is None:
        return EXIT_UNUSABLE
    result = compare(base, cand, fail_above_pct=args.fail_above,
                     noise_floor_pct=args.noise_floor, base_name=args.baseline,
                     cand_name=args.candidate, recollect=collect_command)
    print(render(result, args.format))
    return EXIT_INVALID if result.failed else EXIT_OK


def cmd_plot(args) -> int:
    from .readers.figures import PlotUnavailable, require_matplotlib
    from .readers.plot import write_plots
    if not args.paths and not args.compare:
        _err("sdbench plot: give an ARTIFACT to draw, or --compare BASELINE CANDIDATE")
        return EXIT_UNUSABLE
    problem = out_dir_problem(args.out)
    if problem:
        _err(f"sdbench plot: --out: {problem}")
        return EXIT_UNUSABLE
    loaded = []
    for path in [*args.paths, *(args.compare or ())]:
        artifact, code = _load_valid(path)
        if artifact is None:
            return code
        loaded.append((path, artifact))
    try:
        require_matplotlib()
    except PlotUnavailable as exc:
        _err(f"sdbench plot: {exc}")
        return EXIT_UNUSABLE
    drawn = loaded[:len(args.paths)]
    try:
        pair = loaded[len(drawn):]
        compare = (pair[0], pair[1]) if len(pair) == 2 else None
        written = write_plots(drawn, args.out, pair=compare)
    except ValueError as exc:   # a comparison of two different grids
        _err(f"sdbench plot: {exc}")
        return EXIT_UNUSABLE
    except OSError as exc:   # the folder was writable when checked; not any more (a full disk)
        _err(f"sdbench plot: --out: cannot write {exc.filename or args.out} ({exc.strerror})")
        return EXIT_UNUSABLE
    for path in written:
        print(f"wrote {path}")
    return EXIT_OK


def cmd_export(args) -> int:
    from .aisimulate.command import run
    from .aisimulate.export.options import KnownConfig
    from .engine.presets import config_texts
    return run(args, {digest: KnownConfig(text, source)
                      for digest, (text, source) in config_texts().items()})


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def cmd_crosscheck(args) -> int:
    from pathlib import Path

    from .engine.vram import cuda_available
    from .fidelity.crosscheck import CrosscheckUnusable, check_profile, crosscheck, table, write
    from .run.inputs import check_vllm_installed
    from .run.options import InputError
    from .run.profile import ProfileUnusable, read_profile
    profile = Path(args.profile)
    out = Path(args.out) if args.out else profile.parent
    try:   # everything checkable before an engine starts
        check_vllm_installed()
        artifact = read_profile(profile)
        check_profile(artifact, cuda_available())
        problem = out_dir_problem(out)
        if problem:
            raise InputError(f"--out: {problem}")
    except (InputError, ProfileUnusable, CrosscheckUnusable) as exc:
        _err(f"sdbench crosscheck: {exc}")
        return EXIT_UNUSABLE
    _err(f"sdbench crosscheck: starting vLLM alone as the profile's engine "
         f"({args.engine_core} engine core) ...")
    try:
        report = crosscheck(artifact, args.engine_core, args.repeats,
                            say=lambda line: _err(f"sdbench crosscheck: {line}"))
    except Exception as exc:  # noqa: BLE001 (vLLM fails in many ways; one line says why)
        from .engine.surface import describe_failure
        _err(f"sdbench crosscheck: vLLM alone failed: {describe_failure(exc)}")
        return EXIT_INVALID
    print(table(report))
    for path in write(report, out, plots=not args.no_plots):
        _err(f"sdbench crosscheck: wrote {path}")
    return EXIT_OK


def cmd_serve(args) -> int:
    from .fidelity.serve_command import run
    return run(args)


def cmd_fidelity(args) -> int:
    from .fidelity.command import run
    return run(args)


if __name__ == "__main__":
    sys.exit(console_main())
