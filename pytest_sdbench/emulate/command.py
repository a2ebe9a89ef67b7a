"""`sdbench emulate PROFILE [--port P] [--rate R ... --case C:ISL:OSL ... --passes P --out DIR]
[-- vllm serve arguments]`: vLLM's own server whose every step takes the profile's price.

Without traffic arguments it serves on 127.0.0.1 until interrupted (Ctrl-C), printing the
base URL; its logs and step log go to --out (else a new temporary folder). With --rate or
--case it runs `sdbench serve`'s traffic (`vllm bench serve`, the same runs, seeds and result
files) against the emulation and writes `sdbench serve`'s folder: served-manifest.json
(server.engine "emulated", and an "emulation" section: its settings, async scheduling, the
step log's figures), vLLM's result files, /metrics around each run, and steps.jsonl.

Exit 0: served (or stopped by Ctrl-C while serving); 1: the server or a client run failed;
2: unusable input, said in one line before anything starts (a profile it cannot price: not
an artifact, no decode or prefill rows, host-timed CPU rows, a K or acceptance length the
rows do not have; arguments the emulation owns)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from ..fidelity.serve_command import add_traffic_args, check_out_folder, options_of

EXIT_OK, EXIT_FAILED, EXIT_UNUSABLE = 0, 1, 2
HELP = ("serve the profile as an emulated engine: `vllm serve` (its API server, tokenizer, "
        "scheduler, metrics) with each forward pass replaced by the profile's price of the "
        "step; no model and no GPU; with --rate/--case, `sdbench serve`'s traffic against it")
DESCRIPTION = HELP[0].upper() + HELP[1:] + "."
EPILOG = ("Arguments after `--` go to `vllm serve` as they are and override the profile's "
          "settings (e.g. `-- --max-num-seqs 8`), except those the emulation sets itself "
          "(the executor, its settings, host, port, KV blocks and block size, load format) "
          "or the profile's rows fix (K, acceptance length, one rank).")
NAME = "sdbench emulate"
PASSTHROUGH = True   # cli.main hands what follows `--` on as args.passthrough


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profile", metavar="PROFILE",
                        help="an artifact collected on a GPU (device-timed rows)")
    add_traffic_args(parser, out_required=False)


def _traffic_given(args) -> bool:
    return bool(args.rate or args.case)


def main(args) -> int:
    from ..fidelity.served import ServingFailed
    from ..fidelity.served_settings import ServedUnusable, check_options
    from ..run.inputs import check_vllm_installed
    from ..run.options import InputError
    from .server import EmulationRefused, prepare
    out = Path(args.out) if args.out else None
    try:   # everything checkable before a server starts
        options = options_of(args)
        if not args.health_timeout > 0:
            raise ServedUnusable(f"--health-timeout: must be > 0 seconds, got "
                                 f"{args.health_timeout:g}")
        check_vllm_installed()
        prepared = prepare(args.profile, getattr(args, "passthrough", []))
        if _traffic_given(args):
            check_options(options, prepared.artifact)
            if out is None:
                raise InputError("--out: a folder for the served runs is required with "
                                 "--rate / --case")
        elif args.passes != 1 or args.num_prompts or args.input_len or args.output_len:
            raise InputError("--passes / --num-prompts / --input-len / --output-len: give "
                             "--rate or --case (traffic), or none of them to serve until "
                             "interrupted")
        else:
            check_options(options.__class__(rates=(1.0,), num_prompts=1, input_len=1,
                                             output_len=1, port=options.port),
                          prepared.artifact)   # the port's checks
        if out is not None:
            check_out_folder(out)
    except (InputError, EmulationRefused, ServedUnusable, ValueError) as exc:
        _err(f"{NAME}: {exc}")
        return EXIT_UNUSABLE
    try:
        if _traffic_given(args):
            assert out is not None
            return _serve_traffic(prepared, options, out, args.health_timeout)
        return _serve_until_interrupted(prepared, out, options.port, args.health_timeout)
    except ServingFailed as exc:
        _err(f"{NAME}: {exc}")
        return EXIT_FAILED


def _say(line: str) -> None:
    _err(f"{NAME}: {line}")


def _serve_traffic(prepared, options, out: Path, health_timeout: float) -> int:
    from ..fidelity.served import MANIFEST_FILE, serve, write_manifest
    from .server import STEP_LOG
    step_log = out / STEP_LOG
    manifest: dict = {}
    try:
        manifest = serve(prepared.profile, prepared.artifact, options, out, say=_say,
                         health_timeout=health_timeout,
                         resolved=(prepared.kwargs, prepared.pinned),
                         engine=prepared.engine(step_log))
    finally:
        if (out / MANIFEST_FILE).is_file():   # the emulation's part, also on failure
            import json
            manifest = manifest or json.loads((out / MANIFEST_FILE).read_text())
            manifest["emulation"] = emulation_section(prepared, step_log)
            write_manifest(out, manifest)
    for run in manifest["runs"]:
        which = run["label"] + (f" pass {run['pass']}" if run["pass"] else "")
        print(f"{which}: {out / run['result']}")
    figures = manifest["emulation"].get("steps") or {}
    _say(f"{figures.get('steps', 0)} steps ({figures.get('outside', 0)} outside the "
         f"profile's rows, priced at the nearest); async scheduling "
         f"{'on' if figures.get('async_scheduling') else 'off'}; step log {step_log}")
    print(f"wrote {out / MANIFEST_FILE}")
    return EXIT_OK


def emulation_section(prepared, step_log: Path) -> dict:
    """The manifest's account of the emulation: its settings, how async scheduling came to
    be as it is, and the step log's figures (steplog.summary)."""
    from .steplog import read_step_log, summary
    settings = prepared.settings(step_log).to_json()
    section: dict = {"executor": prepared.engine(step_log)[0][1], "settings": settings,
                     "extra_vllm_args": list(prepared.extra_args), "step_log": step_log.name,
                     "profiled_engine_async_scheduling": settings["async_scheduling"]}
    if step_log.is_file():
        data = read_step_log(step_log)
        header = data.header
        section["async_scheduling"] = header.get("async_scheduling")
        section["async_scheduling_turned_on_over_the_platform"] = header.get(
            "async_scheduling_turned_on")
        section["acceptance"] = {k: header.get(k) for k in (
            "num_spec_tokens", "acceptance_length", "unconditional_rates",
            "expected_acceptance_length")}
        section["num_gpu_blocks"] = header.get("num_gpu_blocks")
        section["steps"] = summary(data)
    else:
        section["steps"] = None
    return section


def _serve_until_interrupted(prepared, out: Path | None, port: int | None,
                             health_timeout: float) -> int:
    from .server import start
    from .steplog import read_step_log, summary
    folder = out if out is not None else Path(tempfile.mkdtemp(prefix="sdbench-emulate-"))
    server = None
    try:
        server = start(prepared, folder, port, health_timeout, say=_say)
        _say(f"healthy after {server.healthy_after_seconds:.1f} s; serving until "
             f"interrupted (Ctrl-C); logs in {folder}")
        print(server.url, flush=True)
        while server.server.process.poll() is None:
            time.sleep(0.5)
        _err(f"{NAME}: `vllm serve` exited with status {server.server.process.returncode}: "
             f"{server.server.tail()}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        _say("interrupted: stopping the server")
        return EXIT_OK
    finally:
        if server is not None:
            server.stop()
            if server.step_log.is_file():
                figures = summary(read_step_log(server.step_log))
                _say(f"{figures['steps']} steps served ({figures['outside']} outside the "
                     f"profile's rows); step log {server.step_log}")
