"""The consumer's side of a fidelity report, run as a script in the consumer's own
environment (AISimulate's wheel; never in the project's, and never imported by the package):

    CONSUMER_PYTHON consumer_side.py REQUEST.json RESULT.json

REQUEST.json (written by pytest_sdbench/aisimulate/fidelity.py) names an `sdbench export --to
aisimulate` folder, the serving runs' steps as the consumer's ForwardPassMetrics
(scheduled_requests) and, per run, an `aisimulate predict` configuration and its workload as a
Mooncake trace. This script:

1. loads the export's FPM table with the consumer's own loader (RustForwardPassPerfModel at
   nextn=K, direct FPM interpolation, no fallback) and prices every step with
   estimate_forward_pass_detailed, as its `onboard validate-serving --forward-evidence`
   does; a step it refuses is kept with its message;
2. runs `python -m aisimulate predict` for each run's workload and keeps its summary and
   per-request records.

It reads no pytest_sdbench module (the consumer's environment may hold another version)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:600]


def systems_root(export: Path, manifest: dict) -> Path:
    """The export's systems folder with the consumer's own YAML of the system beside it."""
    import aisimulate_core  # type: ignore[import-not-found]
    root = export / manifest["table"]["systems_root"]
    system = manifest["system"]
    shutil.copy(Path(aisimulate_core.__file__).parent / "systems" / f"{system}.yaml",
                root / f"{system}.yaml")
    return root


def loader(export: Path, manifest: dict, profile: dict, systems: Path):
    from aisimulate_core.sdk.rust_engine_step import (  # type: ignore[import-not-found]
        ForwardPassPerfModelConfig,
        RustForwardPassPerfModel,
    )
    config = ForwardPassPerfModelConfig(
        model=manifest["model_path"], system=manifest["system"], backend="vllm",
        worker_type="aggregated", backend_version=manifest["backend_version"],
        fpm_profile=profile, tp=manifest["topology"]["tp"], pp=1, attention_dp=1,
        nextn=manifest["nextn"], estimation_mode="fpm_interpolation", database_mode="SILICON",
        fallback_policy="deny", estimator_config={"fpm_interpolation": {"method": "direct"}},
        systems_paths=(str(systems),))
    return RustForwardPassPerfModel.best_available(config)


def price_steps(model, steps: list[dict]) -> list[dict]:
    priced = []
    for step in steps:
        row = {"run": step["run"], "native_iteration_id": step["native_iteration_id"]}
        try:
            detail = model.estimate_forward_pass_detailed(
                {"scheduled_requests": step["scheduled_requests"]})
            row["ms"] = float(detail["latency_ms"])
            queries = [q for rank in detail.get("ranks", []) for q in rank.get("queries", [])]
            row["resolution"] = ",".join(sorted({str(q.get("resolution")) for q in queries}))
        except Exception as error:  # noqa: BLE001 - the consumer refuses in many ways
            row["error"] = first_line(error)
        priced.append(row)
    return priced


def predict_config(manifest: dict, profile: dict, systems: Path, run: dict) -> dict:
    """The consumer's prediction configuration of one run: the export's deployment with its
    engine limits, the speculative round (nextn = K, nextn_accepted = AL - 1), direct FPM
    interpolation without fallback, and the run's workload as a Mooncake trace."""
    engine = run["engine"]
    load = ({"type": "trace_timestamps"} if run["concurrency"] is None else
            {"type": "concurrency", "concurrency": run["concurrency"]})
    return {
        "traffic": {"source": {"type": "trace", "paths": [run["trace"]], "format": "mooncake"},
                    "load": load},
        "engine": {
            "mode": "aggregated", "model": manifest["model_path"], "fpm_profile": profile,
            "hardware": manifest["system"], "backend": "vllm",
            "backend_version": manifest["backend_version"], "nextn": manifest["nextn"],
            "nextn_accepted": engine["nextn_accepted"],
            "enable_chunked_prefill": engine["enable_chunked_prefill"],
            "workers": {"aggregated": {
                "context_length": engine["context_length"],
                "scheduler": {"max_batched_tokens": engine["max_batched_tokens"],
                              "max_sequences": engine["max_sequences"]},
                "kv_cache": {"block_size": engine["block_size"],
                             "prefix_caching": engine["prefix_caching"],
                             "capacity": {"type": "default",
                                          "memory_fraction": engine["memory_fraction"]}},
                "timing": {"estimation_mode": "fpm_interpolation", "fallback_policy": "deny",
                           "estimator_config": {"fpm_interpolation": {"method": "direct"}},
                           "systems_paths": [str(systems)]}}}},
    }


def predict(manifest: dict, profile: dict, systems: Path, run: dict, timeout: float) -> dict:
    import yaml
    out = Path(run["out"])
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / "predict.yaml"
    config_path.write_text(yaml.safe_dump(predict_config(manifest, profile, systems, run),
                                          sort_keys=False))
    command = [sys.executable, "-m", "aisimulate", "predict", "-c", str(config_path),
               "--output-dir", str(out / "output"), "--overwrite", "--capture-per-request",
               "--format", "json"]
    result = {"run": run["run"], "command": " ".join(command), "config": str(config_path)}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **manifest["consumer"]["environment"]})
    except subprocess.TimeoutExpired:
        return {**result, "error": f"aisimulate predict ran past {timeout:g} s"}
    result["returncode"] = done.returncode
    (out / "stdout.txt").write_text(done.stdout)
    (out / "stderr.txt").write_text(done.stderr)
    report = out / "output" / "prediction.json"
    if done.returncode != 0 or not report.is_file():
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return {**result, "error": (lines[-2] if len(lines) > 1 and "exited with status"
                                    in lines[-1] else (lines[-1] if lines else
                                                       f"exit {done.returncode}"))[:2000]}
    native = json.loads(report.read_text())
    summary = native.get("summary", native)
    result["summary"] = {k: v for k, v in summary.items()
                         if isinstance(v, (int, float, str)) or v is None}
    records = out / "output" / "requests.jsonl"
    result["requests"] = [
        {key: row.get(key) for key in ("arrival_time_ms", "ttft_ms", "itl_ms", "e2e_latency_ms",
                                       "input_length", "output_length", "terminal_status")}
        for row in map(json.loads, records.read_text().splitlines() if records.is_file() else [])]
    return result


def main(argv: list[str]) -> int:
    request_path, result_path = map(Path, argv)
    request = json.loads(request_path.read_text())
    os.environ.update(request["environment"])
    export = Path(request["export"])
    manifest = json.loads((export / "import-manifest.json").read_text())
    profile = json.loads((export / manifest["fpm_profile"]).read_text())
    systems = systems_root(export, manifest)
    result: dict = {"consumer": {}, "steps": [], "predictions": []}
    try:
        import importlib.metadata
        result["consumer"]["version"] = importlib.metadata.version("aisimulate")
        model = loader(export, manifest, profile, systems)
        try:
            result["steps"] = price_steps(model, request["steps"])
        finally:
            model.close()
    except Exception as error:  # noqa: BLE001 - the loader's refusal is a finding
        result["loader_error"] = first_line(error)
    for run in request["runs"]:
        result["predictions"].append(predict(manifest, profile, systems, run,
                                             float(request["predict_timeout_seconds"])))
    result_path.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    # Run as a script, its own folder (the wing's modules: export/, grids.py, ...) is first
    # on sys.path; none of them may shadow a module of the consumer's.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.exit(main(sys.argv[1:]))
