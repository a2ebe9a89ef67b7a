"""The consumer's predictions of a serving run: the profile exported as `sdbench export --to
aisimulate` writes it, then AISimulate's own code, run by consumer_side.py in the consumer's
environment (a Python given by --consumer-python or $SDBENCH_CONSUMER_PYTHON; this package
never imports AISimulate), prices every step with its direct FPM interpolation and predicts
each run's workload end to end with `aisimulate predict`.

The export takes one CUDA-graph mode per phase (the consumer reads no graph label): the mode
most of the phase's points ran in, unless the user chooses (--graph-mode PHASE=MODE); and
one acceptance length (the profile's run AL). A preset's dummy weights have no revision: a
placeholder is given, recorded as the user's in the export's manifest."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..wire.contract import (
    ACCEPTANCE_SYNTHETIC,
    DEVICE_CUDA,
    GRAPH_MODES,
    PHASE_DECODE,
    PHASE_PREFILL,
)
from ..wire.model import Artifact
from .export.selecting import export_name
from .export.vocabulary import CONSUMER_ENVIRONMENT, MANIFEST_FILE

CONSUMER_PYTHON_ENV = "SDBENCH_CONSUMER_PYTHON"
SCRIPT = Path(__file__).with_name("consumer_side.py")
PLACEHOLDER_REVISION = "0" * 40
# The consumer's systems by the device name an artifact records (others: --system).
SYSTEMS = {"H200": "h200_sxm"}
PREDICT_TIMEOUT_SECONDS = 900.0


class ConsumerNotRun(Exception):
    """Why the consumer's predictions are absent (one line for the report)."""


def consumer_python(given: str | None) -> str:
    """The consumer environment's Python: the option, else $SDBENCH_CONSUMER_PYTHON."""
    python = given or os.environ.get(CONSUMER_PYTHON_ENV)
    if not python:
        raise ConsumerNotRun(f"no consumer environment was given (--consumer-python PY or "
                             f"${CONSUMER_PYTHON_ENV}); AISimulate's predictions are left out")
    if not Path(python).is_file():
        raise ConsumerNotRun(f"--consumer-python: {python} is not a file")
    return python


def system_of(artifact: Artifact, given: str | None) -> str:
    """The consumer's system: given, or known by the device name. A CPU profile has none,
    and its export is refused for its host timing (the exporter says so, with any name)."""
    if given:
        return given
    if artifact.device != DEVICE_CUDA:
        return "cpu"
    name = str(artifact.identity.device_name.value or "")
    for marker, system in SYSTEMS.items():
        if marker in name:
            return system
    raise ConsumerNotRun(f"identity.device_name {name!r}: no consumer system is known for it; "
                         "pass --system NAME (a consumer systems/NAME.yaml)")


def graph_modes(artifact: Artifact, chosen: Mapping[str, str]) -> dict[str, str]:
    """Per phase whose points ran in several modes: the user's choice, else the mode most
    points ran in (ties: eager, piecewise, full order)."""
    al = artifact.speculative.synthetic_acceptance_length
    modes: dict[str, str] = {}
    for phase in (PHASE_PREFILL, PHASE_DECODE):
        counted = Counter(o.graph_mode for o in getattr(artifact, phase)
                          if phase == PHASE_PREFILL or o.point.acceptance_length == al)
        if phase in chosen:
            modes[phase] = chosen[phase]
        elif len(counted) > 1:
            modes[phase] = max(GRAPH_MODES, key=lambda m: (counted[m], -GRAPH_MODES.index(m)))
    return modes


def export_profile(python: str, profile_path: Path, artifact: Artifact, out: Path,
                   system: str, chosen_modes: Mapping[str, str]) -> tuple[Path, dict]:
    """`sdbench export --to aisimulate` of the profile (this package's CLI, run by the
    consumer's Python, which has the parquet writer); the export folder and its manifest.
    ConsumerNotRun with the exporter's reasons when it refuses (a CPU profile always is)."""
    command = [python, "-m", "pytest_sdbench.cli", "export", str(profile_path), "--to",
               "aisimulate", "--out", str(out), "--system", system]
    for role in ("target", "draft"):
        if not getattr(artifact.identity, role).revision.resolved:
            command += [f"--{role}-revision", PLACEHOLDER_REVISION]
    al = artifact.speculative.synthetic_acceptance_length
    if artifact.speculative.acceptance_control == ACCEPTANCE_SYNTHETIC and al is not None:
        command += ["--acceptance-length", f"{al!r}"]
    modes = graph_modes(artifact, chosen_modes)
    command += [f"--graph-mode={phase}={mode}" for phase, mode in modes.items()]
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [package_root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    (out.parent / "export.log").write_text(" ".join(command) + "\n" + done.stdout + done.stderr)
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        reasons = [line.strip().removeprefix("- ") for line in said
                   if line.startswith("  - ")] or said[-1:]
        raise ConsumerNotRun("`sdbench export --to aisimulate` refuses the profile: "
                             + "; ".join(reasons))
    root = out / export_name(artifact.run_id, al if "--acceptance-length" in command else None,
                             modes)
    return root, json.loads((root / MANIFEST_FILE).read_text())


@dataclass(frozen=True)
class ConsumerRun:
    """One serving run, as the consumer is asked about it (fidelity.run builds it from its
    records: this wing reads no fidelity module)."""
    steps: Sequence[Any]        # fidelity.serving_records.StepRecord: each step's token counts
    requests: Sequence[Any]     # fidelity.workload.PlannedRequest: the workload as planned
    concurrency: int | None     # a closed loop's concurrency; None: timed arrivals
    acceptance_length: float | None   # the run's own measured AL (None: not measured)


def mooncake_rows(planned: Sequence[Any], block: int = 512) -> list[dict]:
    """The workload as the consumer's Mooncake trace rows: arrival in milliseconds (0 for a
    closed loop), lengths, and hash ids of its own for every request (no shared prefix, as
    the served prompts share none)."""
    rows, next_id = [], 1
    for r in planned:
        blocks = -(-r.input_tokens // block)
        rows.append({"timestamp": round(1e3 * (r.arrival_seconds or 0.0), 3),
                     "input_length": r.input_tokens, "output_length": r.output_tokens,
                     "hash_ids": list(range(next_id, next_id + blocks)),
                     "request_id": f"req-{r.index}"})
        next_id += blocks
    return rows


def scheduled_requests(step: Any) -> dict[str, int]:
    """A step as the consumer's ForwardPassMetrics.scheduled_requests: the requests in
    prefill with their new and KV-read tokens, the decoding ones with theirs."""
    return {"num_prefill_requests": step.prefill_requests,
            "sum_prefill_tokens": step.prefill_tokens,
            "sum_prefill_kv_tokens": step.prefill_kv_tokens,
            "num_decode_requests": step.decode_requests,
            "sum_decode_kv_tokens": step.decode_kv_tokens}


def accepted_per_step(artifact: Artifact, run: ConsumerRun) -> float:
    """The consumer's nextn_accepted (drafts accepted a step): the profile's synthetic AL - 1,
    or under natural acceptance the serving run's own measured AL - 1."""
    al = artifact.speculative.synthetic_acceptance_length
    if al is None:
        al = run.acceptance_length or 1.0
    return max(al - 1.0, 0.0)


def engine_limits(artifact: Artifact) -> dict:
    s = artifact.identity.settings
    return {"context_length": s.max_model_len.value,
            "max_batched_tokens": s.max_num_batched_tokens.value,
            "max_sequences": s.max_num_seqs.value, "block_size": s.block_size.value,
            "memory_fraction": s.gpu_memory_utilization.value,
            "enable_chunked_prefill": bool(s.enable_chunked_prefill.value),
            "prefix_caching": bool(s.enable_prefix_caching.value)}


@dataclass(frozen=True)
class ConsumerResult:
    export: str
    manifest: dict
    result: dict


def run_consumer(python: str, profile_path: Path, artifact: Artifact,
                 runs: Sequence[ConsumerRun], folder: Path, system: str | None = None,
                 chosen_modes: Mapping[str, str] | None = None,
                 timeout: float = PREDICT_TIMEOUT_SECONDS) -> ConsumerResult:
    """Export, then consumer_side.py in the consumer's Python; the folder keeps every input
    and output (export, request, traces, predict configs and reports)."""
    folder.mkdir(parents=True, exist_ok=True)
    export, manifest = export_profile(python, profile_path, artifact, folder / "export",
                                      system_of(artifact, system), chosen_modes or {})
    limits = engine_limits(artifact)
    steps, predict_runs = [], []
    for i, run in enumerate(runs):
        steps += [{"run": i, "native_iteration_id": s.native_iteration_id,
                   "scheduled_requests": scheduled_requests(s)} for s in run.steps]
        trace = folder / f"run{i}-trace.jsonl"
        trace.write_text("".join(json.dumps(row) + "\n" for row in mooncake_rows(run.requests)))
        predict_runs.append({
            "run": i, "trace": str(trace), "out": str(folder / f"run{i}-predict"),
            "concurrency": run.concurrency,
            "engine": {**limits, "nextn_accepted": round(accepted_per_step(artifact, run), 6)}})
    request = {"export": str(export), "steps": steps, "runs": predict_runs,
               "environment": dict(CONSUMER_ENVIRONMENT), "predict_timeout_seconds": timeout}
    request_path, result_path = folder / "request.json", folder / "result.json"
    request_path.write_text(json.dumps(request) + "\n")
    try:
        done = subprocess.run([python, str(SCRIPT), str(request_path), str(result_path)],
                              capture_output=True, text=True,
                              timeout=timeout * (len(runs) + 1))
    except subprocess.TimeoutExpired:
        raise ConsumerNotRun(f"the consumer's script ran past {timeout * (len(runs) + 1):g} s")\
            from None
    (folder / "consumer-side.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0 or not result_path.is_file():
        tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise ConsumerNotRun(f"the consumer's script failed ({python}): {tail}")
    return ConsumerResult(str(export), manifest, json.loads(result_path.read_text()))
