"""A fidelity run from end to end, into one folder:

    measure()  serve each workload on an engine configured as the profile's (checked)
    save()     fidelity-run.json (the runs as recorded) and profile.json (a copy)
    report()   predictions (ours; AISimulate's when its environment is given), fidelity.json,
               fidelity.md, steps.csv and the PNGs

report() needs no engine: `sdbench fidelity --report DIR` recomputes it from the folder (a
run measured on a GPU host, reported where the consumer's environment is)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..aisimulate.fidelity import (
    ConsumerNotRun,
    ConsumerRun,
    consumer_python,
    graph_modes,
    run_consumer,
)
from ..engine.restoration import restoration_violations
from ..readers.beside import REPORT_MD, folder_beside
from ..run.profile import check_engine, read_profile
from ..wire.contract import DEVICE_CUDA
from ..wire.files import atomic_write_text
from ..wire.model import Artifact, utc_now
from .predict import Interpolator
from .report import OURS, REPORT_KIND, build_figures, step_rows
from .report_text import markdown, steps_csv
from .serve import serve_workload
from .serving_records import ServingRun
from .workload import (
    ARRIVAL_CONCURRENCY,
    Lengths,
    Workload,
    check_fits,
    plan,
    workload_from_json,
)

RUN_KIND, RUN_VERSION = "pytest-sdbench/fidelity-run", 1
RUN_FILE, PROFILE_FILE = "fidelity-run.json", "profile.json"
REPORT_JSON, STEPS_CSV, CONSUMER_DIR = "fidelity.json", "steps.csv", "consumer"
DEFAULT_WARMUP_REQUESTS = 8


class EngineNotRestored(AssertionError):
    """After the serving run the engine does not hold or serve what it did at start-up."""


def default_workload(device: str, seed: int = 0) -> Workload:
    """A short Poisson workload for the device: on a CPU, small enough for CI."""
    if device == DEVICE_CUDA:
        return Workload("poisson", Lengths(128, 1024), Lengths(32, 256), seed=seed, rate=8.0,
                        duration_seconds=30.0)
    return Workload("poisson", Lengths(32, 256), Lengths(8, 32), seed=seed, rate=2.0,
                    duration_seconds=8.0)


def check_workloads(artifact: Artifact, workloads: Sequence[Workload]) -> None:
    """Every request must fit the profile's engine (WorkloadError names the option)."""
    for workload in workloads:
        max_len = artifact.identity.settings.max_model_len.value
        check_fits(workload, max_len if isinstance(max_len, int) else 0,
                   "the profile's engine's")


def measure(engine, artifact: Artifact, workloads: Sequence[Workload],
            warmup_requests: int = DEFAULT_WARMUP_REQUESTS) -> tuple[list[ServingRun], list[str]]:
    """Check the engine against the profile (match.EngineMismatch), serve each workload in
    turn (the warm-up before the first), and check the engine is restored afterwards."""
    notes = check_engine(artifact, engine)
    check_workloads(artifact, workloads)
    al = artifact.speculative.synthetic_acceptance_length
    runs = [serve_workload(engine, w, al, warmup_requests if i == 0 else 0)
            for i, w in enumerate(workloads)]
    problems = restoration_violations(engine)
    if problems:
        raise EngineNotRestored("after the serving run: " + "; ".join(problems))
    return runs, notes


def save(folder: Path, profile_path: Path, runs: Sequence[ServingRun],
         notes: Sequence[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / PROFILE_FILE).resolve() != Path(profile_path).resolve():
        shutil.copyfile(profile_path, folder / PROFILE_FILE)
    record = {"kind": RUN_KIND, "version": RUN_VERSION, "created_at": utc_now(),
              "profile": str(Path(profile_path).resolve()), "engine_notes": list(notes),
              "runs": [r.to_json() for r in runs]}
    return atomic_write_text(folder / RUN_FILE, json.dumps(record) + "\n")


def load(folder: Path) -> tuple[Artifact, list[ServingRun], list[str], str]:
    """The folder's profile and runs; ValueError naming the file when it holds none."""
    path = folder / RUN_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: no fidelity run can be read ({exc})") from None
    if not isinstance(record, dict) or record.get("kind") != RUN_KIND:
        kind = record.get("kind") if isinstance(record, dict) else None
        raise ValueError(f"{path}: kind is {kind!r}, not {RUN_KIND!r}")
    artifact = read_profile(folder / PROFILE_FILE)
    runs = [ServingRun.from_json(r) for r in record["runs"]]
    return artifact, runs, list(record.get("engine_notes", [])), str(record["profile"])


@dataclass
class FidelityReport:
    folder: Path
    figures: dict
    rows: list

    @property
    def path(self) -> Path:
        return self.folder / REPORT_MD

    def errors(self, predictor: str = OURS, kind: str = "decode") -> dict:
        """The error figures of one predictor and step kind (report.kind_figures)."""
        (model,) = self.figures["models"].values()
        return model[predictor][kind]


def consumer_run(run: ServingRun) -> ConsumerRun:
    """A serving run as the consumer's side takes it: its steps, its workload as planned."""
    workload = workload_from_json(run.workload)
    return ConsumerRun(run.steps, plan(workload),
                       workload.concurrency if workload.arrival == ARRIVAL_CONCURRENCY else None,
                       run.observed_acceptance_length())


def report(folder: Path, python: str | None = None, system: str | None = None,
           chosen_modes: Mapping[str, str] | None = None, plots: bool = True,
           say=lambda text: None) -> FidelityReport:
    """Price every recorded step (ours; the consumer's when its Python is given), write the
    figures, the Markdown, the CSV and the PNGs into the folder."""
    artifact, runs, notes, original = load(folder)
    profile_path = folder / PROFILE_FILE
    consumer: dict = {}
    consumer_steps = None
    try:
        ran = run_consumer(consumer_python(python), profile_path, artifact,
                           [consumer_run(run) for run in runs], folder / CONSUMER_DIR, system,
                           chosen_modes)
        result = ran.result
        consumer = {"status": "run", "version": result.get("consumer", {}).get("version"),
                    "export": ran.export, "graph_modes": graph_modes(artifact,
                                                                     chosen_modes or {}),
                    "loader_error": result.get("loader_error"),
                    "predictions": result.get("predictions", [])}
        consumer_steps = result.get("steps") if not result.get("loader_error") else None
        if result.get("loader_error"):
            consumer = {"status": "not run", "reason": "the consumer's loader refused the "
                        f"export: {result['loader_error']}"}
    except ConsumerNotRun as exc:
        consumer = {"status": "not run", "reason": str(exc)}
    say(f"sdbench fidelity: AISimulate: {consumer.get('status')}"
        + (f" ({consumer['reason']})" if consumer.get("reason") else ""))
    rows = step_rows(runs, Interpolator.from_artifact(artifact), consumer_steps)
    figures = build_figures(Path(original), artifact, runs, rows, consumer, notes)
    figures["files"] = {"run": RUN_FILE, "profile": PROFILE_FILE, "markdown": REPORT_MD,
                        "steps": STEPS_CSV}
    if plots:
        from .plots import draw
        for name, data in draw(figures, rows).items():
            (folder / name).write_bytes(data)
    atomic_write_text(folder / STEPS_CSV, steps_csv(rows))
    atomic_write_text(folder / REPORT_JSON, json.dumps(figures, indent=1) + "\n")
    atomic_write_text(folder / REPORT_MD, markdown(figures, rows))
    assert figures["kind"] == REPORT_KIND
    return FidelityReport(folder, figures, rows)


def run_fidelity(engine, profile_path: Path, workloads: Sequence[Workload],
                 folder: Path | None = None, python: str | None = None,
                 warmup_requests: int = DEFAULT_WARMUP_REQUESTS, plots: bool = True,
                 say=lambda text: None) -> FidelityReport:
    """measure + save + report on a started engine (the pytest fixture's path)."""
    artifact = read_profile(profile_path)
    folder = folder or folder_beside(Path(profile_path))
    runs, notes = measure(engine, artifact, workloads, warmup_requests)
    save(folder, Path(profile_path), runs, notes)
    return report(folder, python, plots=plots, say=say)
