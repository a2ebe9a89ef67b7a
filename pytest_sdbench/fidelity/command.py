"""`sdbench fidelity PROFILE [...]`: serve a held-out workload on an engine configured as the
profile's, and report how well the profile predicted it, into one folder.
`sdbench fidelity --report DIR`: the report again from a folder's recorded run (no engine),
e.g. where the consumer's environment is.
`sdbench fidelity PROFILE --served DIR`: no engine either; the runs `sdbench serve` left in DIR
(vLLM's own server and client) against AISimulate's prediction of each run's real trace
(served_compare.py). Exit 0: report written; 1: the engine did not start,
is not configured as the profile's, or failed; 2: unusable input (before any engine starts)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .workload import (
    ARRIVAL_CONCURRENCY,
    ARRIVAL_POISSON,
    Workload,
    WorkloadError,
    parse_lengths,
)

EXIT_OK, EXIT_FAILED, EXIT_UNUSABLE = 0, 1, 2
DEFAULT_DURATION = 30.0
HELP = ("serve a held-out workload on an engine configured as the profile's; report how well "
        "the profile (ours, AISimulate's loader) predicted it")


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profile", nargs="?", metavar="PROFILE",
                        help="the artifact whose engine and profile are checked")
    parser.add_argument("--report", metavar="DIR",
                        help="no engine: report again from DIR's recorded run")
    parser.add_argument("--served", metavar="DIR",
                        help="no engine: compare the runs `sdbench serve` left in DIR (vLLM's "
                             "server and client) with AISimulate's prediction of their traces")
    parser.add_argument("--emulated", metavar="DIR",
                        help="with --served: no engine either; the same traffic served by "
                             "`sdbench emulate` (DIR) against the real server's runs, side by "
                             "side (emulation.md, .json, .png); with PROFILE, AISimulate's "
                             "prediction of each run beside them")
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--rate", type=float, action="append", metavar="RPS",
                      help="Poisson arrivals at RPS requests a second; repeat for several runs "
                           "on the one engine (default: a fixed concurrency, the largest "
                           "decode batch the profile measured)")
    load.add_argument("--concurrency", type=int, action="append", metavar="N",
                      help="a fixed concurrency N (closed loop) instead; needs --requests")
    parser.add_argument("--duration", type=float, default=None, metavar="S",
                        help=f"seconds of Poisson arrivals a run (default {DEFAULT_DURATION:g} "
                             "unless --requests)")
    parser.add_argument("--requests", type=int, metavar="N",
                        help="requests a run (with --rate: at most N within --duration)")
    parser.add_argument("--input-len", metavar="N|LO-HI",
                        help="prompt tokens: N, or uniform integers LO-HI (default: within "
                             "what the profile covers, fidelity/coverage.py)")
    parser.add_argument("--output-len", metavar="N|LO-HI",
                        help="output tokens, likewise (default: within what it covers)")
    parser.add_argument("--seed", type=int, default=0, help="the workload's seed (default 0)")
    parser.add_argument("--warmup-requests", type=int, default=8, metavar="N",
                        help="requests served unrecorded before the first run (default 8)")
    parser.add_argument("--model", metavar="DIR", help="the target checkpoint, when the "
                        "profile's is no preset and its directory is not here")
    parser.add_argument("--draft", metavar="DIR", help="the EAGLE3 draft, likewise")
    parser.add_argument("--out", metavar="DIR", help="the report folder (default: "
                        "<profile>-fidelity beside the profile)")
    parser.add_argument("--consumer-python", metavar="PY",
                        help="the Python of AISimulate's environment (default "
                             "$SDBENCH_CONSUMER_PYTHON; without one its predictions are left "
                             "out)")
    parser.add_argument("--system", metavar="NAME", help="the consumer's system of the device "
                        "(default: from the device name, h200_sxm for an H200)")
    parser.add_argument("--graph-mode", action="append", default=[], metavar="PHASE=MODE",
                        help="the CUDA-graph mode the consumer's export keeps for a phase "
                             "(default: the mode most of its points ran in)")
    parser.add_argument("--no-plots", action="store_true", help="no PNGs (no matplotlib)")


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def workloads_from(args, artifact) -> list[Workload]:
    """One workload a rate (or concurrency); WorkloadError names the option. What is not
    given is drawn from what the profile covers (coverage.covered_workload: a fixed
    concurrency, the largest decode batch measured, and lengths within the measured
    contexts and prompts), or refused in one line saying what the profile does not cover."""
    from .coverage import coverage, covered_lengths, covered_workload
    if args.warmup_requests < 0:
        raise WorkloadError(f"--warmup-requests: must be >= 0, got {args.warmup_requests}")
    inputs = parse_lengths(args.input_len, "--input-len") if args.input_len else None
    outputs = parse_lengths(args.output_len, "--output-len") if args.output_len else None
    if not args.rate and not args.concurrency and args.duration is None:
        return [covered_workload(artifact, seed=args.seed, requests=args.requests,
                                 inputs=inputs, outputs=outputs)]
    if inputs is None or outputs is None:
        drawn_in, drawn_out = covered_lengths(coverage(artifact))
        inputs, outputs = inputs or drawn_in, outputs or drawn_out
    if args.concurrency:
        return [Workload(ARRIVAL_CONCURRENCY, inputs, outputs, seed=args.seed, concurrency=c,
                         requests=args.requests) for c in args.concurrency]
    if not args.rate:
        raise WorkloadError("--duration: needs --rate (Poisson arrivals); without both the "
                            "run is a fixed concurrency drawn from the profile")
    duration = args.duration if args.duration is not None or args.requests else DEFAULT_DURATION
    return [Workload(ARRIVAL_POISSON, inputs, outputs, seed=args.seed, rate=r,
                     duration_seconds=duration, requests=args.requests)
            for r in args.rate]


def _graph_modes(texts: list[str]) -> dict[str, str]:
    from ..aisimulate.export.facts import parse_graph_mode
    from ..aisimulate.export.vocabulary import UnusableInput
    modes = {}
    for text in texts:
        try:
            phase, mode = parse_graph_mode(text)
        except UnusableInput as exc:
            raise WorkloadError(str(exc)) from None
        modes[phase] = mode
    return modes


def main(args) -> int:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    try:
        modes = _graph_modes(args.graph_mode)
        if args.consumer_python and not Path(args.consumer_python).is_file():
            raise WorkloadError(f"--consumer-python: {args.consumer_python} is not a file")
        if not args.no_plots:
            from ..readers.figures import PlotUnavailable, require_matplotlib
            try:
                require_matplotlib()
            except PlotUnavailable as exc:
                raise WorkloadError(f"plots: {exc}; or pass --no-plots") from None
    except WorkloadError as exc:
        _err(f"sdbench fidelity: {exc}")
        return EXIT_UNUSABLE
    if args.emulated:
        if not args.served:
            _err("sdbench fidelity: --emulated DIR needs --served DIR (the real server's runs "
                 "of the same traffic)")
            return EXIT_UNUSABLE
        return _emulated(Path(args.served), Path(args.emulated), args, modes)
    if args.served:
        if not args.profile or args.report:
            _err("sdbench fidelity: --served DIR needs PROFILE (the profile served), and no "
                 "--report")
            return EXIT_UNUSABLE
        return _served(Path(args.profile), Path(args.served), args, modes)
    if args.report:
        if args.profile:
            _err("sdbench fidelity: give PROFILE or --report DIR, not both")
            return EXIT_UNUSABLE
        return _report(Path(args.report), args, modes)
    if not args.profile:
        _err("sdbench fidelity: give PROFILE (an artifact), or --report DIR")
        return EXIT_UNUSABLE
    return _measure(Path(args.profile), args, modes)


def _served(profile: Path, served: Path, args, modes) -> int:
    from ..run.profile import ProfileUnusable, read_profile
    from ..wire.files import out_dir_problem
    from .served import read_manifest, served_results
    from .served_compare import compare, write
    from .served_settings import ServedUnusable
    out = Path(args.out) if args.out else served
    try:
        artifact = read_profile(profile)
        served_results(served, read_manifest(served))
        problem = out_dir_problem(out)
        if problem:
            raise WorkloadError(f"--out: {problem}")
        report = compare(profile, artifact, served, out, args.consumer_python, args.system,
                         modes, say=lambda line: _err(f"sdbench fidelity: {line}"))
    except (ProfileUnusable, ServedUnusable, WorkloadError, ValueError) as exc:
        _err(f"sdbench fidelity: {exc}")
        return EXIT_UNUSABLE
    from .served_compare import markdown
    print(markdown(report), end="")
    for path in write(report, out, plots=not args.no_plots):
        _err(f"sdbench fidelity: wrote {path}")
    return EXIT_OK


def _emulated(served: Path, emulated: Path, args, modes) -> int:
    from ..run.profile import ProfileUnusable, read_profile
    from ..wire.files import out_dir_problem
    from .emulated_compare import compare_emulated, consumer_beside, markdown, write
    from .served_settings import ServedUnusable
    out = Path(args.out) if args.out else emulated
    try:
        problem = out_dir_problem(out)
        if problem:
            raise WorkloadError(f"--out: {problem}")
        # a PROFILE is refused before anything is compared, consumer or none
        artifact = read_profile(Path(args.profile)) if args.profile else None
        report = compare_emulated(served, emulated)
        if artifact is not None:    # AISimulate's prediction of the same runs, beside
            consumer_beside(report, Path(args.profile), artifact, args.consumer_python, out,
                            args.system, modes, say=lambda line: _err(f"sdbench fidelity: "
                                                                      f"{line}"))
    except (ServedUnusable, ProfileUnusable, WorkloadError, ValueError, OSError) as exc:
        _err(f"sdbench fidelity: {exc}")
        return EXIT_UNUSABLE
    print(markdown(report), end="")
    for path in write(report, out, plots=not args.no_plots):
        _err(f"sdbench fidelity: wrote {path}")
    return EXIT_OK


def _report(folder: Path, args, modes) -> int:
    from .run import report
    try:
        done = report(folder, args.consumer_python, args.system, modes,
                      plots=not args.no_plots, say=_err)
    except ValueError as exc:
        _err(f"sdbench fidelity: {exc}")
        return EXIT_UNUSABLE
    print(summary(done))
    return EXIT_OK


def _measure(profile: Path, args, modes) -> int:
    from ..engine.launch import start_engine
    from ..engine.spec import engine_spec
    from ..engine.surface import describe_failure
    from ..engine.vram import cuda_available
    from ..readers.beside import folder_beside
    from ..run.inputs import check_spec_choices, check_vllm_installed
    from ..run.options import InputError
    from ..run.profile import (
        EngineMismatch,
        ProfileUnusable,
        check_device,
        read_profile,
        spec_choices,
    )
    from ..wire.files import out_dir_problem
    from .run import check_workloads, measure, report, save
    folder = Path(args.out) if args.out else folder_beside(profile)
    try:   # everything checkable before an engine starts
        check_vllm_installed()
        artifact = read_profile(profile)
        check_device(artifact, cuda_available())
        workloads = workloads_from(args, artifact)
        check_workloads(artifact, workloads)
        problem = out_dir_problem(folder)
        if problem:
            raise InputError(f"--out: {problem}")
        choices = spec_choices(artifact, args.model, args.draft)
        check_spec_choices(choices, cli=True)
        spec = engine_spec(**choices)
    except (InputError, ProfileUnusable, WorkloadError, ValueError) as exc:
        _err(f"sdbench fidelity: {exc}")
        return EXIT_UNUSABLE
    _err(f"sdbench fidelity: starting the engine as the profile's ({spec.preset or spec.target}"
         f", K={spec.draft_depth}) ...")
    try:
        engine = start_engine(spec)
    except Exception as exc:  # noqa: BLE001 (vLLM refuses in many ways; one line says why)
        _err(f"sdbench fidelity: the engine did not start: {describe_failure(exc)}")
        return EXIT_FAILED
    _err(f"sdbench fidelity: engine started in {engine.start_seconds:.1f} s on {engine.device}")
    started = time.perf_counter()
    try:
        for w in workloads:
            _err(f"sdbench fidelity: {w.label}: {w.describe()}")
        runs, notes = measure(engine, artifact, workloads, args.warmup_requests)
    except EngineMismatch as exc:
        _err("sdbench fidelity: the engine is not configured as the profile's:")
        for difference in exc.differences:
            _err(f"  - {difference}")
        return EXIT_FAILED
    except Exception as exc:  # noqa: BLE001 (the engine failed: one line)
        _err(f"sdbench fidelity: the serving run failed: {describe_failure(exc)}")
        return EXIT_FAILED
    finally:
        engine.shutdown()
    _err(f"sdbench fidelity: served {sum(len(r.requests) for r in runs)} requests, "
         f"{sum(len(r.steps) for r in runs)} steps in {time.perf_counter() - started:.1f} s")
    save(folder, profile, runs, notes)
    done = report(folder, args.consumer_python, args.system, modes, plots=not args.no_plots,
                  say=_err)
    print(summary(done))
    return EXIT_OK


def summary(done) -> str:
    """A few lines for the terminal: per predictor and step kind, and per run."""
    from .report import ALL_KINDS, mixed_pricing
    from .report_text import _pct
    from .serving_records import STEP_KINDS
    lines = [f"{'predictor':<11} {'kind':<8} {'steps':>6} {'priced':>6} {'median|e|':>9} "
             f"{'p90|e|':>8} {'bias':>7}"]
    (model,) = done.figures["models"].values()
    for predictor, kinds in model.items():
        for kind in (*STEP_KINDS, ALL_KINDS):
            k = kinds[kind]
            lines.append(f"{predictor:<11} {kind:<8} {k['steps']:>6} {k['priced_steps']:>6} "
                         f"{_pct(k['median_abs_error']):>9} {_pct(k['p90_abs_error']):>8} "
                         f"{_pct(k['bias'], signed=True):>7}")
    for predictor, kinds in model.items():
        if kinds["mixed"]["steps"]:
            lines.append(f"{predictor}: {mixed_pricing(kinds['mixed'])}")
    for run in done.figures["runs"]:
        e2e = run["end_to_end"]
        m = e2e["measured"]
        line = (f"{run['label']}: TTFT median {m['ttft']['median_ms']:.2f} ms, ITL median "
                f"{m['itl']['median_ms'] or 0:.2f} ms, E2E median {m['e2e']['median_ms']:.1f} "
                f"ms, {m['output_throughput_tok_s']:.1f} output tok/s")
        p = e2e.get("predicted")
        if p:
            errors = e2e["relative_error"]
            line += (f"; AISimulate TTFT {_pct(errors['ttft_median'], True)}, ITL "
                     f"{_pct(errors['itl_median'], True)}, E2E {_pct(errors['e2e_median'], True)}")
        elif "predict_error" in e2e:
            line += f"; AISimulate failed: {e2e['predict_error'][:200]}"
        lines.append(line)
    lines.append(f"wrote {done.path}")
    return "\n".join(lines)
