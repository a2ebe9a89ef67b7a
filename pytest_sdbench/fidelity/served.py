"""`sdbench serve PROFILE --rate R [--rate R2] ...`: serve as users run it. vLLM's OpenAI
server (`vllm serve`, its multiprocess engine core; no code of this project inside it) is
started as a subprocess with the profile's engine settings as its command-line flags, and
driven by vLLM's own client (`vllm bench serve`, random dataset, Poisson arrivals) at each
rate. vLLM's result files (with --save-detailed: every request's start time, lengths, TTFT
and ITLs) are left in the output folder beside a manifest (settings, commands, versions),
for `sdbench fidelity PROFILE --served DIR` to compare with the predictions.

The settings (served_settings.py) come from the one resolution crosscheck and fidelity use
(run.profile.vllm_kwargs: the profile's preset or models, K, acceptance, limits), with the
scheduler's effective settings pinned from the profile's identity: `vllm serve` resolves
vLLM's defaults for another usage context than LLM(...) (on an H200, max_num_batched_tokens
8192 instead of 16384), so what the profile's engine had is passed explicitly. A preset's
target folder holds its own tokenizer (engine/presets.py): nothing is downloaded.

The server runs in a session of its own; it is stopped (SIGTERM to its process group, then
SIGKILL) whatever happens here, Ctrl-C and SIGTERM included, so no engine process outlives
the command."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from ..wire.files import atomic_write_text
from ..wire.model import Artifact, utc_now
from .bench_client import MODULE as BENCH_CLIENT_MODULE
from .bench_client import BenchClient
from .served_metrics import read_metrics, run_means
from .served_settings import (
    DEFAULT_ENV,
    HOST,
    SERVER_ENV,
    ServedOptions,
    ServedUnusable,
    Traffic,
    bench_command,
    bench_flags,
    child_env,
    free_port,
    rate_seeds,
    rate_text,
    serve_command,
    server_kwargs,
    traffic,
    versions,
)

MANIFEST_FILE = "served-manifest.json"
MANIFEST_KIND, MANIFEST_VERSION = "pytest-sdbench/served", 1
HEALTH_TIMEOUT_SECONDS = 900.0    # an 8B model's first start compiles for minutes
STOP_SECONDS = 30.0


class ServingFailed(RuntimeError):
    """The server or the client failed; the message says which and where its log is."""


def group_gone(pgid: int, timeout: float) -> bool:
    """Whether no process of the group is left (a killed one takes a moment to go)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


class Server:
    """`vllm serve` in a session of its own, its output in a log file."""

    group_left = False

    def __init__(self, command: list[str], log: Path, env: dict[str, str]):
        self.command = command
        self.log = log
        self._log = log.open("ab")
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env,
                                        start_new_session=True)

    def wait_healthy(self, url: str, timeout: float) -> float:
        started = time.monotonic()
        while True:
            if self.process.poll() is not None:
                raise ServingFailed(f"`vllm serve` exited with status {self.process.returncode} "
                                    f"before it was healthy: {self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        return time.monotonic() - started
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() - started > timeout:
                raise ServingFailed(f"`vllm serve` was not healthy at {url} within "
                                    f"{timeout:g} s (log: {self.log})")
            time.sleep(0.5)

    def tail(self, lines: int = 3) -> str:
        self._log.flush()
        text = self.log.read_text(errors="replace").strip().splitlines()
        said = [line for line in text if line.strip()][-lines:]
        return " | ".join(said)[-1500:] + f" (log: {self.log})"

    def stop(self, grace: float = STOP_SECONDS) -> int | None:
        """SIGTERM to the server's process group (the API server and its engine core), wait,
        then SIGKILL whatever is left of the group. Returns the server's exit status."""
        try:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
            self.group_left = not group_gone(self.process.pid, timeout=10)
            return self.process.returncode
        finally:
            self._log.close()


@contextlib.contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt here while serving, so that the server is stopped."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:      # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def write_manifest(out: Path, manifest: dict) -> Path:
    return atomic_write_text(out / MANIFEST_FILE, json.dumps(manifest, indent=1) + "\n")


def serve(profile_path: Path, artifact: Artifact, options: ServedOptions, out: Path,
          say: Callable[[str], None] = lambda line: None,
          health_timeout: float = HEALTH_TIMEOUT_SECONDS,
          resolved: tuple[dict, dict] | None = None,
          engine: tuple[list[str], dict[str, str]] | None = None) -> dict:
    """Start `vllm serve` as the profile's engine, run `vllm bench serve` for each run of the
    traffic (each rate, each closed-loop case, each pass), vLLM's request metrics read
    around each, stop the server; return the manifest (written beside the results, also on
    failure). resolved: server_kwargs(artifact), when the caller resolved it before.
    engine: (more `vllm serve` flags, more environment) for an engine of another kind than
    vLLM's own (`sdbench emulate`'s), recorded in the manifest."""
    kwargs, pinned = resolved or server_kwargs(artifact)
    port = options.port or free_port()
    model = str(kwargs["model"])
    out.mkdir(parents=True, exist_ok=True)
    extra_flags, extra_env = engine or ([], {})
    command = [*serve_command(kwargs, port), *extra_flags]
    manifest: dict = {
        "kind": MANIFEST_KIND, "version": MANIFEST_VERSION, "created": utc_now(),
        "profile": {"path": str(profile_path), "run_id": artifact.run_id,
                    "device": artifact.device,
                    "device_name": str(artifact.identity.device_name.value)},
        "settings": {"engine_kwargs": {k: v for k, v in kwargs.items()},
                     "pinned_from_profile": pinned,
                     "resolution": "fidelity.match.vllm_kwargs (the profile's spec choices), then "
                                   "the effective settings pinned_from_profile"},
        "workload": {"dataset": "random", "arrival": "poisson",
                     "rates": list(options.rates), "num_prompts": options.num_prompts,
                     "input_len": options.input_len, "output_len": options.output_len,
                     "seed": options.seed,
                     "seeds_by_rate": {rate_text(r): seed for r, seed in
                                       rate_seeds(options).items()},
                     "cases": [dataclasses.asdict(c) for c in options.cases],
                     "passes": options.passes,
                     "ignore_eos": True, "temperature": 0},
        "server": {"command": command, "host": HOST, "port": port, "log": "server.log",
                   "engine": "emulated" if engine else "vllm",
                   "env": {k: v for k, v in {**child_env(), **extra_env}.items()
                           if k in (*SERVER_ENV, *DEFAULT_ENV, *extra_env)}},
        "versions": versions(), "runs": [], "status": "started"}
    write_manifest(out, manifest)
    env = child_env()
    say(f"starting `vllm serve {model}` on port {port} (log: {out / 'server.log'}) ...")
    server = Server(command, out / "server.log", {**env, **extra_env})
    manifest["server"]["pid"] = server.process.pid
    client: BenchClient | None = None
    try:
        # One client process for every run (bench_client.py: `vllm bench serve`'s own code,
        # imported once, while the server starts).
        client = BenchClient(out / "bench-client.log", env)
        manifest["client"] = {"module": BENCH_CLIENT_MODULE, "log": client.log.name,
                              "pid": client.process.pid, "env_left_out": client.env_left_out}
        with terminated_as_interrupt():
            seconds = server.wait_healthy(f"http://{HOST}:{port}/health", health_timeout)
            manifest["server"]["healthy_after_seconds"] = round(seconds, 3)
            say(f"server healthy after {seconds:.1f} s")
            gone = client.gone()
            if gone:
                raise ServingFailed(gone)
            metrics_url = f"http://{HOST}:{port}/metrics"
            for run_spec in traffic(options):
                manifest["runs"].append(_bench(client, run_spec, model, port, out,
                                               metrics_url, say))
                write_manifest(out, manifest)
                run = manifest["runs"][-1]
                if run["returncode"] != 0 or not (out / run_spec.result).is_file():
                    log = out / run["log"]
                    lines = [x for x in log.read_text(errors="replace").splitlines()
                             if x.strip()]
                    raise ServingFailed(f"`vllm bench serve` of {run_spec.label} failed "
                                        f"(exit {run['returncode']}): "
                                        f"{lines[-1] if lines else ''} (log: {log})")
        manifest["status"] = "done"
    except KeyboardInterrupt:
        manifest["status"] = "interrupted"
        raise
    except BaseException as exc:
        manifest["status"] = f"failed: {exc}"
        raise
    finally:
        try:
            if client is not None:   # unless done, a run in flight is ended at once
                manifest["client"]["exit_status"] = client.close(
                    30.0 if manifest["status"] == "done" else 0.0)
        finally:
            say("stopping the server ...")
            manifest["server"]["exit_status"] = server.stop()
            manifest["server"]["processes_left"] = server.group_left
            if server.group_left:
                say(f"a process of the server's group {server.process.pid} outlived SIGKILL")
            manifest["finished"] = utc_now()
            write_manifest(out, manifest)
    return manifest


def _bench(client: BenchClient, run: Traffic, model: str, port: int, out: Path,
           metrics_url: str, say: Callable[[str], None]) -> dict:
    """One `vllm bench serve` run by the client, vLLM's request metrics read before and after
    it: its manifest entry (its command: the equivalent command line)."""
    bench = bench_command(model, port, run, out)
    name = run.label + (f"-p{run.pass_index}" if run.pass_index else "")
    log = out / f"bench-{name}.log"
    say(f"`vllm bench serve` {name}: {run.num_prompts} prompts of {run.input_len} tokens, "
        f"{run.output_len} out ...")
    before = _metrics(metrics_url)
    started = time.monotonic()
    returncode = client.run(bench_flags(model, port, run, out), log)
    seconds = round(time.monotonic() - started, 3)
    after = _metrics(metrics_url)
    entry = {"label": run.label, "pass": run.pass_index, "rate": run.rate,
             "concurrency": run.concurrency, "num_prompts": run.num_prompts,
             "input_len": run.input_len, "output_len": run.output_len, "seed": run.seed,
             "command": bench, "log": log.name, "result": run.result,
             "returncode": returncode, "seconds": seconds,
             "engine_metrics_ms": run_means(before, after)
             if before is not None and after is not None else None}
    if returncode == 0 and (out / run.result).is_file():
        summary = json.loads((out / run.result).read_text())
        say(f"{name}: {summary.get('completed')} completed, {summary.get('failed', 0)} "
            f"failed; TTFT median {summary.get('median_ttft_ms', float('nan')):.1f} ms, "
            f"TPOT median {summary.get('median_tpot_ms', float('nan')):.2f} ms")
    return entry


def _metrics(url: str) -> dict[str, float] | None:
    try:
        return read_metrics(url)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None   # said by the manifest's null; the run itself stands


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST_FILE
    if not path.is_file():
        raise ServedUnusable(f"--served: {folder} holds no {MANIFEST_FILE} (not an "
                             "`sdbench serve` folder)")
    manifest = json.loads(path.read_text())
    if manifest.get("kind") != MANIFEST_KIND:
        raise ServedUnusable(f"--served: {path} is no `sdbench serve` manifest")
    return manifest


def served_results(folder: Path, manifest: dict) -> list[tuple[float, dict]]:
    """(rate, vLLM's detailed result) of every finished Poisson run of the first pass, in
    the order served."""
    found = []
    for run in manifest["runs"]:
        path = folder / run["result"]
        if run.get("rate") is None or run.get("pass", 0):
            continue
        if run.get("returncode") == 0 and path.is_file():
            found.append((float(run["rate"]), json.loads(path.read_text())))
    if not found:
        raise ServedUnusable(f"--served: {folder} holds no finished `vllm bench serve` result")
    return found
