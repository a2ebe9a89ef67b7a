"""`vllm serve` of the emulated engine, configured from the profile: the command and the
fixture start it through here.

The settings are `sdbench serve`'s (fidelity/served_settings.server_kwargs: the profile's
models, K, acceptance and pinned scheduler settings, as `vllm serve` flags), with the
emulated engine's on top: the executor (--distributed-executor-backend), the profile's KV
block size, --load-format dummy (no weights are read), and the emulator's settings as
--additional-config (the profile, its KV blocks and acceptance length, async scheduling as
the profiled engine ran it, the step log). Extra `vllm serve` arguments follow and override
the profile's settings, except those the emulation owns or its rows fix (refused, one line).

Everything that can refuse does so in prepare(), before a process starts."""

from __future__ import annotations

import json
import os
import site
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest_sdbench

from ..fidelity.served import Server
from ..fidelity.served_settings import HOST, child_env, free_port, serve_command, server_kwargs
from ..run.profile import ProfileUnusable, read_profile
from ..wire.model import Artifact
from . import EXECUTOR_QUALNAME, SETTINGS_KEY
from .pricing import Unpriceable, check_priceable
from .settings import EmulationSettings

STEP_LOG, SERVER_LOG = "steps.jsonl", "server.log"
HEALTH_TIMEOUT_SECONDS = 300.0   # no model to load: about 15 s on a 2-core CPU host
# `vllm serve` flags the emulation sets itself (the seam, its settings, where it listens)
OWNED_FLAGS = ("distributed-executor-backend", "worker-cls", "additional-config", "host",
               "port", "num-gpu-blocks-override", "block-size", "load-format")
# flags whose value the profile's rows fix (one rank; K and AL checked below)
ONE_RANK_FLAGS = ("tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size")
SHORT_FLAGS = {"tp": "tensor-parallel-size", "pp": "pipeline-parallel-size",
               "dp": "data-parallel-size", "sc": "speculative-config"}


class EmulationRefused(ValueError):
    """The profile or the arguments cannot be emulated; one line, before anything starts."""


@dataclass(frozen=True)
class Prepared:
    """An emulation ready to start: the profile, its engine settings and the extra flags."""
    profile: Path
    artifact: Artifact
    kwargs: dict
    pinned: dict
    extra_args: tuple[str, ...] = ()

    def settings(self, step_log: Path | None) -> EmulationSettings:
        identity = self.artifact.identity.async_scheduling
        return EmulationSettings(
            profile=str(self.profile), num_gpu_blocks=self.artifact.kv_capacity.num_blocks,
            acceptance_length=self.artifact.speculative.synthetic_acceptance_length,
            async_scheduling=bool(identity.value) if identity.resolved else None,
            step_log=None if step_log is None else str(step_log))

    def engine(self, step_log: Path | None) -> tuple[list[str], dict[str, str]]:
        """The emulated engine's extra `vllm serve` flags and environment."""
        settings = {SETTINGS_KEY: self.settings(step_log).to_json()}
        flags = ["--distributed-executor-backend", EXECUTOR_QUALNAME,
                 "--block-size", str(self.artifact.kv_capacity.block_size),
                 "--additional-config", json.dumps(settings, sort_keys=True),
                 *self.extra_args]
        return flags, engine_env()


def prepare(profile: str | Path, extra_args: Sequence[str] = ()) -> Prepared:
    """The profile read, checked priceable and resolved to engine settings, and the extra
    arguments checked; EmulationRefused (one line) otherwise."""
    path = Path(profile).resolve()
    try:
        artifact = read_profile(path)
        check_priceable(artifact)
        kwargs, pinned = server_kwargs(artifact)
    except (ProfileUnusable, Unpriceable, ValueError) as exc:
        raise EmulationRefused(f"{profile}: {exc}") from None
    check_extra_args(extra_args, artifact)
    kwargs = {k: v for k, v in kwargs.items() if k not in ("block_size",)}
    kwargs["load_format"] = "dummy"
    return Prepared(path, artifact, kwargs, pinned, tuple(extra_args))


def _flags(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """(name without dashes, underscores as dashes; its value) of each flag given."""
    found: list[tuple[str, str | None]] = []
    for i, arg in enumerate(args):
        if not arg.startswith("-") or arg in ("-", "--"):
            continue
        name, eq, given = arg.lstrip("-").partition("=")
        name = SHORT_FLAGS.get(name.replace("_", "-"), name.replace("_", "-"))
        value: str | None = given
        if not eq:
            nxt = args[i + 1] if i + 1 < len(args) else None
            value = nxt if nxt is not None and not nxt.startswith("--") else None
        found.append((name, value))
    return found


def check_extra_args(args: Sequence[str], artifact: Artifact) -> None:
    """Refuse extra `vllm serve` arguments the emulation owns or the profile's rows fix."""
    spec = artifact.speculative
    for name, value in _flags(args):
        if name in OWNED_FLAGS:
            raise EmulationRefused(f"-- --{name}: the emulation sets it (the profile's "
                                   "engine, its KV blocks and block size, dummy weights; "
                                   "the port is --port)")
        if name in ONE_RANK_FLAGS and value not in (None, "1"):
            raise EmulationRefused(f"-- --{name} {value}: the profile's rows are one rank's")
        if name == "speculative-config":
            try:
                given = json.loads(value or "")
            except json.JSONDecodeError:
                raise EmulationRefused(f"-- --speculative-config {value!r}: not JSON") from None
            k = given.get("num_speculative_tokens", spec.draft_depth)
            if k != spec.draft_depth:
                raise EmulationRefused(f"-- --speculative-config: K={k}; the profile's "
                                       f"decode rows are at K={spec.draft_depth}")
            length = given.get("synthetic_acceptance_length",
                               spec.synthetic_acceptance_length)
            if length != spec.synthetic_acceptance_length:
                raise EmulationRefused(f"-- --speculative-config: acceptance length "
                                       f"{length}; the profile's decode rows are at "
                                       f"{spec.synthetic_acceptance_length}")
            if given.get("method", "eagle3") != "eagle3":
                raise EmulationRefused(f"-- --speculative-config: method "
                                       f"{given['method']!r}; the profile is EAGLE3's")


def engine_env() -> dict[str, str]:
    """The engine's processes import this very pytest_sdbench (the API server resolves the
    executor's qualified name): its folder first on PYTHONPATH, unless it is an installed
    package (found there anyway)."""
    root = Path(pytest_sdbench.__file__).resolve().parents[1]
    if any(root == Path(p).resolve() for p in site.getsitepackages()):
        return {}
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).resolve() != root]
    return {"PYTHONPATH": os.pathsep.join([str(root), *rest])}


@dataclass
class EmulatedServer:
    """A started emulated `vllm serve` on 127.0.0.1 (stop() ends its process group)."""
    prepared: Prepared
    folder: Path
    port: int
    command: list[str]
    server: Server
    healthy_after_seconds: float = 0.0
    stopped: bool = field(default=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def step_log(self) -> Path:
        return self.folder / STEP_LOG

    @property
    def log(self) -> Path:
        return self.folder / SERVER_LOG

    def stop(self) -> int | None:
        """Stop the server (idempotent); its exit status."""
        if self.stopped:
            return self.server.process.returncode
        self.stopped = True
        return self.server.stop()


def start(prepared: Prepared, folder: Path, port: int | None = None,
          health_timeout: float = HEALTH_TIMEOUT_SECONDS,
          say: Callable[[str], None] = lambda line: None) -> EmulatedServer:
    """Start the emulated server and wait until it is healthy (stopped again on failure)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    flags, env = prepared.engine(folder / STEP_LOG)
    command = [*serve_command(prepared.kwargs, port), *flags]
    say(f"starting the emulated `vllm serve` on {HOST}:{port} (log: {folder / SERVER_LOG})")
    server = Server(command, folder / SERVER_LOG, {**child_env(), **env})
    emulated = EmulatedServer(prepared, folder, port, command, server)
    started = time.monotonic()
    try:
        server.wait_healthy(f"{emulated.url}/health", health_timeout)
    except BaseException:
        emulated.stop()
        raise
    emulated.healthy_after_seconds = round(time.monotonic() - started, 3)
    return emulated
