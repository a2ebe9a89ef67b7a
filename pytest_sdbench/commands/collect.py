"""`sdbench collect`: start an engine per K, collect, write the artifact (and the K-sweep
index of a sweep): the run (run.service) outside pytest. Exit 0 complete, 1 failed or
partial, 2 unusable input (nothing started), 130 interrupted (what was measured is kept and
named)."""

from __future__ import annotations

import argparse
import json
import time

from ..run.options import DEFAULT_ARTIFACT_DIR, add_cli_options, k_window_note
from ..wire.contract import STATUS_COMPLETE
from .show import table
from .terminal import EXIT_INVALID, EXIT_OK, EXIT_UNUSABLE, err

HELP = ("start an engine, collect a profile, write the artifact (one engine and artifact per K "
        "of a sweep, plus an index)")
DESCRIPTION = ("Start a vLLM engine with an EAGLE3 draft, collect a profile, write the "
               "artifact. The options are the pytest plugin's without the --sdbench- prefix "
               "(pytest_sdbench/run/options.py). Exit 0 complete, 1 failed or partial, 2 "
               "unusable input (nothing started), 130 interrupted (what was measured is kept "
               "and named).")


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    add_cli_options(parser, "collect")


def main(args) -> int:
    import os
    import warnings
    # A person reads the progress and the table; vLLM's log lines would bury them (set
    # VLLM_LOGGING_LEVEL to see them).
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    warnings.filterwarnings("ignore", category=FutureWarning)
    from ..engine.host import registry_dir
    from ..run.inputs import check_vllm_installed, read_inputs
    from ..run.options import InputError
    from ..run.service import CollectionService, EngineNotStarted
    note = k_window_note(args.k, cli=True)
    if note:
        err(f"sdbench collect: note: {note}")
    try:   # everything checkable before an engine starts (15-90 s), read once
        check_vllm_installed()
        inputs = read_inputs(vars(args), cli=True,
                             out_dir=args.artifact_dir or DEFAULT_ARTIFACT_DIR)
        registry_dir()   # another user's registry folder is refused (a ValueError)
        assert inputs.out_dir is not None
        service = CollectionService(inputs, inputs.out_dir, say=err)
        specs = [service.spec(k) for k in inputs.depths]
        for spec in specs:   # vLLM's config across fields, before any engine starts
            service.check_engine_config(spec)
    except (InputError, ValueError, EngineNotStarted) as exc:
        err(f"sdbench collect: {exc}")
        return EXIT_UNUSABLE
    runs, worst = [], EXIT_OK
    for spec in specs:
        code, run = _collect_one(service, spec)
        worst = max(worst, code)
        if run is None:
            return code
        runs.append(run)
    if len(runs) > 1:
        line = service.write_sweep_index([(r.artifact, r.path) for r in runs])
        print(f"wrote the K-sweep index {line}")
    return worst


def _collect_one(service, spec):
    """Start the engine of one K, collect, free it. (exit code, CollectionRun or None)"""
    from ..engine.surface import describe_failure
    from ..run.collect import ArtifactNotWritten, InvalidArtifact, describe, describe_time
    from ..run.service import EngineNotStarted
    from ..wire.points import GridError
    err(f"sdbench: starting the engine ({spec.preset or spec.target}, K={spec.draft_depth}) ...")
    try:
        engine = service.start(spec)
    except EngineNotStarted as exc:
        err(f"sdbench collect: {exc}")
        return (EXIT_UNUSABLE if exc.unusable else EXIT_INVALID), None
    err(f"sdbench: engine started in {engine.start_seconds:.1f} s on {engine.device}")
    started = time.perf_counter()

    def progress(done, total, label):
        err(f"sdbench [{done}/{total}] {label} ({time.perf_counter() - started:.1f} s)")
    try:
        run = service.collect(engine, progress=progress)
    except GridError as exc:
        err(f"sdbench collect: {exc}")
        return EXIT_UNUSABLE, None
    except InvalidArtifact as exc:
        err(f"sdbench collect: {exc}")
        return EXIT_INVALID, None
    except ArtifactNotWritten as exc:   # the table still, and where the data is
        print(table(exc.artifact))
        err(f"sdbench collect: {exc}")
        if exc.partial_path is None:
            err("sdbench collect: the artifact follows on stdout as JSON")
            from ..wire import typed
            print(json.dumps(typed.encode(exc.artifact), indent=1))
        return EXIT_INVALID, None
    except Exception as exc:  # noqa: BLE001 (the engine failed; the partial line was said)
        err(f"sdbench collect: the collection failed: {describe_failure(exc)}")
        return EXIT_INVALID, None
    finally:
        engine.shutdown()
    print(table(run.artifact))
    print(f"wrote {describe(run)}")
    if getattr(run, "result", None) is not None:
        print(f"time: {describe_time(run.result)}")
    page = service.plot(run.path, run.artifact)
    if page is not None:
        print(f"wrote the plots {page}")
    return (EXIT_OK if run.artifact.status == STATUS_COMPLETE else EXIT_INVALID), run
