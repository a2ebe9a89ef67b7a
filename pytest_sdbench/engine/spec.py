"""What engine to start: the user's choices, validated, before vLLM is imported, and the
spec built from them (engine_spec: a preset written into the model folder, model_root, or
the user's own checkpoints).

A field left None is not passed to vLLM, so vLLM's own default for the device applies.
The oracle presets set small limits of their own (presets.Preset.engine_limits) so that
the oracle fits a small VRAM mark; `vllm_defaults` drops them. The user's engine arguments
(`user_engine_args`) are applied last, over everything. The stall bound of the engine's step
watchdog travels with the spec (to every rank of a tensor-parallel engine)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..wire.contract import ACCEPTANCE_NATURAL, ACCEPTANCE_SYNTHETIC, DEFAULT_DRAFT_DEPTH
from ..wire.files import private_dir
from .compat import BLOCK_SIZE
from .presets import AUTO_PRESET, PRESET_FOR_DEVICE, PRESETS, materialize
from .vram import cuda_available

# The step watchdog's bound (launch.StepWatchdog): --sdbench-stall-seconds /
# `sdbench collect --stall-seconds`; when not given, $SDBENCH_STALL_SECONDS, else the default.
STALL_ENV, DEFAULT_STALL_SECONDS = "SDBENCH_STALL_SECONDS", 120.0


class ChoiceError(ValueError):
    """A choice of the user's that no engine could run, found before one starts; one line,
    naming the option as the user spells it and the value."""


def parse_stall_seconds(text: str) -> float:
    """A stall bound: a number of seconds > 0. ValueError says why (the caller names it)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"must be > 0, got {text!r}")
    return value


def default_stall_seconds() -> float:
    """The bound when none is given: $SDBENCH_STALL_SECONDS if set, else
    DEFAULT_STALL_SECONDS. ValueError names the variable."""
    text = os.environ.get(STALL_ENV)
    if text is None:
        return DEFAULT_STALL_SECONDS
    try:
        return parse_stall_seconds(text)
    except ValueError as exc:
        raise ValueError(f"{STALL_ENV}: {exc}") from None


@dataclass(frozen=True)
class EngineSpec:
    """Target + EAGLE3 draft and the engine settings asked for (None: vLLM's default)."""
    target: str
    draft: str
    preset: str | None = None           # the preset these paths were built from, if any
    oracle_limits: bool = False         # the preset's small oracle limits are applied
    draft_depth: int = DEFAULT_DRAFT_DEPTH
    load_format: str | None = None      # "dummy" for presets (no weights on disk)
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_memory_bytes: int | None = None
    block_size: int | None = None
    enforce_eager: bool | None = None
    cudagraph_capture_sizes: tuple[int, ...] = ()
    synthetic_acceptance_length: float | None = None  # CUDA only: vLLM's synthetic sampler
    async_scheduling: bool | None = None
    seed: int = 0
    # A generate() whose step loop makes no progress this long fails the engine
    # (launch.StepWatchdog); a tensor-parallel proxy gives late ranks as long after a failure.
    stall_seconds: float = field(default_factory=default_stall_seconds)
    # Tensor parallel: N rank processes, each running the engine in-process under vLLM's
    # external_launcher (engine/tp.py starts them); 1: the single-process executor.
    tensor_parallel_size: int = 1
    # --sdbench-cpus: every thread of the engine's process pinned to these CPUs (None: the
    # process's own mask, left alone); the placement read after start-up is recorded.
    cpus: tuple[int, ...] | None = None
    target_revision: str | None = None  # given by the user (recorded with source 'user')
    draft_revision: str | None = None
    extra: dict = field(default_factory=dict, hash=False)  # further LLM(...) arguments
    # The vLLM engine arguments the user gave, by vLLM's name; applied last, over the above.
    user_engine_args: dict = field(default_factory=dict, hash=False)

    @property
    def acceptance_control(self) -> str:
        return (ACCEPTANCE_NATURAL if self.synthetic_acceptance_length is None
                else ACCEPTANCE_SYNTHETIC)

    def __post_init__(self):
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size: must be >= 1, got "
                             f"{self.tensor_parallel_size}")
        if not self.stall_seconds > 0:
            raise ValueError(f"stall_seconds: must be > 0, got {self.stall_seconds}")
        if self.draft_depth < 1:
            raise ValueError(f"draft_depth: must be >= 1, got {self.draft_depth}")
        al = self.synthetic_acceptance_length
        if al is not None and not 1.0 <= al <= self.draft_depth + 1:
            raise ValueError(f"synthetic_acceptance_length: must lie in [1, "
                             f"{self.draft_depth + 1}], got {al}")


MODEL_ROOT_ENV = "SDBENCH_MODEL_ROOT"  # where presets are written (default: a user cache)


def user_cache_root() -> Path:
    """This user's cache folder, as vLLM and Hugging Face find it: $XDG_CACHE_HOME, else
    ~/.cache."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def model_root() -> Path:
    """Where presets are written: $SDBENCH_MODEL_ROOT, else a cache folder of this user's
    own ($XDG_CACHE_HOME or ~/.cache, then pytest-sdbench/models), private (0700): a shared,
    predictable temp folder would let another user plant the config an engine loads."""
    chosen = os.environ.get(MODEL_ROOT_ENV)
    if chosen:
        return Path(chosen)
    return private_dir(user_cache_root() / "pytest-sdbench", MODEL_ROOT_ENV) / "models"


# CUDA graphs: batches 1, 2 and 4 of uniform decode steps (1 + K tokens each) are captured.
GRAPH_BATCHES = (1, 2, 4)


def resolve_preset(preset: str | None) -> str:
    if preset in (None, AUTO_PRESET):
        return PRESET_FOR_DEVICE["cuda" if cuda_available() else "cpu"]
    return preset


def engine_spec(preset: str | None = AUTO_PRESET, model: str | None = None,
                draft: str | None = None, draft_depth: int = DEFAULT_DRAFT_DEPTH,
                cuda_graphs: bool = False, acceptance_length: float | None = None,
                vllm_defaults: bool = False, user_engine_args: dict | None = None,
                target_revision: str | None = None, draft_revision: str | None = None,
                stall_seconds: float | None = None, **settings) -> EngineSpec:
    """A spec from a preset name ('auto': by device), or from the user's own target and
    draft directories. A preset runs under its oracle limits (small KV cache, batch and
    length caps, eager unless cuda_graphs) unless vllm_defaults; a user's checkpoint runs
    with vLLM's defaults. The user's engine arguments apply over either. The choices are
    checked before (inputs.read_inputs, or inputs.check_engine_choices): a model and its
    draft go together. stall_seconds None: default_stall_seconds()."""
    device = "cuda" if cuda_available() else "cpu"
    if model is not None and draft is not None:  # both or neither (checked before)
        target, draft_path, preset = str(model), str(draft), None
    else:
        preset = resolve_preset(preset)
        target_dir, draft_dir = materialize(preset, model_root())
        target, draft_path = str(target_dir), str(draft_dir)
        settings = {"load_format": "dummy", **settings}
        if not vllm_defaults:
            graphs = dict(enforce_eager=False, cudagraph_capture_sizes=tuple(
                (draft_depth + 1) * b for b in GRAPH_BATCHES)) if cuda_graphs \
                else dict(enforce_eager=True)
            settings = {**dict(PRESETS[preset].engine_limits),
                        "block_size": BLOCK_SIZE[device], **graphs, **settings}
    return EngineSpec(target=target, draft=draft_path, preset=preset, draft_depth=draft_depth,
                      synthetic_acceptance_length=acceptance_length,
                      oracle_limits=preset is not None and not vllm_defaults,
                      target_revision=target_revision, draft_revision=draft_revision,
                      user_engine_args=dict(user_engine_args or {}),
                      stall_seconds=default_stall_seconds() if stall_seconds is None
                      else stall_seconds, **settings)
