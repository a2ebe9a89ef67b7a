"""One option table for the pytest plugin and the ``sdbench`` command, as pytest-benchmark
shares its ``add_*_options(addoption, prefix)``: each option is written once, with its
default and help, and spelled ``--sdbench-NAME`` in pytest and ``--NAME`` in ``sdbench
collect`` (the only spellings: tests/test_options.py compares the two parsers). A CLI alias
(``--out`` for ``--artifact-dir``) is a second spelling of the same option, never another.

Values are parsed here (types that raise argparse.ArgumentTypeError name the option as the
user spelled it); checks that need more than one option live in inputs.py.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.placement import CpuListError, parse_cpus
from ..engine.presets import AUTO_PRESET, PRESETS
from ..engine.spec import DEFAULT_STALL_SECONDS, STALL_ENV, parse_stall_seconds
from ..wire.contract import (
    DEFAULT_DRAFT_DEPTH,
    DEFAULT_MAX_ROUNDS,
    DEFAULT_ORDER_SEED,
    DEFAULT_REPEATS,
    K_WINDOW,
    MODE_AGG,
    MODES,
    PINNED_CONFIDENCE,
    REPEAT_ORDERS,
    REPEAT_ROUNDS,
)
from ..wire.rounds import PlanError, RepeatPlan, UntilPinned

PYTEST_PREFIX, CLI_PREFIX = "--sdbench-", "--"
# Where artifacts go when --sdbench-artifact-dir / --artifact-dir is not given: under pytest's
# rootdir (plugin.artifact_dir), or the current folder for `sdbench collect`.
DEFAULT_ARTIFACT_DIR = "sdbench-artifacts"
DEFAULT_MIXED = "default"   # --mixed: the mixed grid derived from the engine's limits


class InputError(ValueError):
    """User input that no engine could run, found before one starts (inputs.py,
    checkpoints.py); one line, naming the option as the user spells it."""


def draft_depths(text: str) -> tuple[int, ...]:
    """K as '3', a range '1-5' or a list '1,3,5'."""
    try:
        if "-" in text:
            low, high = (int(x) for x in text.split("-", 1))
            depths = tuple(range(low, high + 1))
        else:
            depths = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected K, LOW-HIGH or K1,K2,..., got {text!r}") from None
    if not depths or any(k < 1 for k in depths) or len(set(depths)) != len(depths):
        raise argparse.ArgumentTypeError(
            f"draft depths must be distinct integers >= 1, got {text!r}")
    return depths


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def half_width(text: str) -> float:
    """A relative width: '2%' or 0.02, in (0, 1)."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a relative width like 2% or 0.02, got "
                                         f"{text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must lie between 0 and 100% (exclusive), got "
                                         f"{text!r}")
    return value


def percent(text: str) -> float:
    """A percentage >= 0: '50' or '50%'."""
    raw = text.strip().removesuffix("%")
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage like 50 or 50%, got "
                                         f"{text!r}") from None
    if not (value >= 0 and math.isfinite(value)):   # NaN and inf too
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def stall_seconds(text: str) -> float:
    try:
        return parse_stall_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cpu_list(text: str) -> tuple[int, ...]:
    try:
        return parse_cpus(text)
    except CpuListError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def engine_arg(text: str) -> tuple[str, Any]:
    """KEY=VALUE, with vLLM's name for KEY; VALUE is read as JSON when it parses
    (numbers, true/false, objects), else kept as a string."""
    key, sep, raw = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with a vLLM engine argument "
                                         f"name, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def engine_config(text: str) -> dict[str, Any]:
    """An engine-config file (YAML or JSON, like vLLM's --config): a mapping of vLLM engine
    argument names to values."""
    path = Path(text)
    try:
        raw = path.read_text()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: cannot be read ({exc.strerror})") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml
            data = yaml.safe_load(raw)
        else:
            data = json.loads(raw)
    except Exception as exc:  # noqa: BLE001 (any parse error is the file's fault)
        detail = " ".join(str(exc).split())   # YAML's errors span lines; the refusal is one
        raise argparse.ArgumentTypeError(f"{text}: not valid YAML/JSON ({detail})") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise argparse.ArgumentTypeError(f"{text}: expected a mapping of engine argument "
                                         "names to values")
    return {k.replace("-", "_"): v for k, v in data.items()}


@dataclass(frozen=True)
class Option:
    name: str                     # spelled --sdbench-NAME (pytest) and --NAME (CLI)
    help: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    action: str | None = None
    metavar: str | None = None
    commands: tuple[str, ...] = ("collect",)   # the CLI subcommands that take it
    cli_aliases: tuple[str, ...] = ()          # more CLI spellings (--out), same option
    extra: dict = field(default_factory=dict)

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    def kwargs(self) -> dict:
        out: dict[str, Any] = {"help": self.help, "default": self.default}
        for key in ("type", "choices", "action", "metavar"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return {**out, **self.extra}


OPTIONS: tuple[Option, ...] = (
    Option("mode", "phases to collect: prefill, decode, mixed (a decode batch and prompts "
           "admitted beside it, one step), or agg (every phase the grid holds; prefill and "
           "decode points never share a batch); default agg", default=MODE_AGG,
           choices=MODES),
    Option("preset", "built-in model preset with dummy weights (default auto: tiny on CPU, "
           "qwen3-0.6b on CUDA)", default=AUTO_PRESET, choices=(AUTO_PRESET, *sorted(PRESETS))),
    Option("model", "target checkpoint directory (instead of a preset)", metavar="DIR"),
    Option("draft", "EAGLE3 draft checkpoint directory (with the target)", metavar="DIR"),
    Option("k", f"draft depth K, or a sweep 'LOW-HIGH' / 'K1,K2' (one engine per K); "
           f"default {DEFAULT_DRAFT_DEPTH}", default=(DEFAULT_DRAFT_DEPTH,), type=draft_depths,
           metavar="K"),
    Option("grid", "grid manifest (JSON) instead of the default grid; or a consumer grid: "
           "'aisimulate', 'aisimulate-native', 'aisimulate:PLAN.json' (docs/export.md)",
           metavar="JSON"),
    Option("mixed", f"mixed points to collect too: '{DEFAULT_MIXED}' (derived from the "
           "engine's limits: a decode batch x a prompt's new tokens, and columns of context, "
           "cached prefix and split prompts) or a grid manifest's mixed points; mode mixed "
           f"takes '{DEFAULT_MIXED}' without it", metavar="default|JSON"),
    Option("repeats", f"measure each point N times, each an observation of its own: by "
           f"default in N rounds of the whole grid, each round in a fresh seeded order, so "
           f"that a point's samples spread over the collection (default {DEFAULT_REPEATS})",
           default=DEFAULT_REPEATS, type=positive_int, metavar="N"),
    Option("repeat-order", f"{REPEAT_ROUNDS} (default): each repeat is a round of the whole "
           "grid; back_to_back: a point's repeats one after the other (their spread "
           "understates the host's noise)", default=REPEAT_ROUNDS, choices=REPEAT_ORDERS),
    Option("until-pinned", f"after the fixed rounds, keep adding rounds for the points whose "
           f"median is not pinned yet: until the half width of its "
           f"{100 * PINNED_CONFIDENCE:.0f}%% confidence interval is within WIDTH of it (e.g. "
           f"2%%), up to --max-rounds",
           type=half_width, metavar="WIDTH"),
    Option("max-rounds", f"with until-pinned: the most rounds a point takes (default "
           f"{DEFAULT_MAX_ROUNDS})", default=DEFAULT_MAX_ROUNDS, type=positive_int,
           metavar="N"),
    Option("order-seed", f"the seed every round's order is drawn from (default "
           f"{DEFAULT_ORDER_SEED}; recorded)", default=DEFAULT_ORDER_SEED,
           type=non_negative_int, metavar="N"),
    Option("cpus", "pin every thread of the engine's process to these CPUs (a list like "
           "0-3,8; recorded with the threads' placement; default: the process's own mask)",
           type=cpu_list, metavar="LIST"),
    Option("engine-arg", "a vLLM engine argument KEY=VALUE, spelled as vLLM spells it "
           "(repeatable; JSON values)", default=[], type=engine_arg, action="append",
           metavar="KEY=VALUE"),
    Option("engine-config", "a YAML or JSON file of vLLM engine arguments (like vLLM's "
           "--config); --engine-arg wins over it", type=engine_config, metavar="FILE"),
    Option("target-revision", "the target checkpoint's revision (40-hex commit), recorded "
           "with source 'user'", metavar="REV"),
    Option("draft-revision", "the draft checkpoint's revision (40-hex commit), recorded "
           "with source 'user'", metavar="REV"),
    Option("vllm-defaults", "run a preset as vLLM serves it: drop the preset's oracle limits "
           "(KV size, batch and length caps, eager); vLLM's defaults on the device apply",
           default=False, action="store_true"),
    Option("cuda-graphs", "oracle presets on CUDA: run with CUDA graphs (default eager; "
           "refused without CUDA); engines outside the presets' test limits follow vLLM's "
           "own default",
           default=False, action="store_true"),
    Option("acceptance-length", "CUDA: synthetic acceptance length for decode points",
           type=float, metavar="AL"),
    Option("tp", "tensor parallel size N: N rank processes, one device each, each running "
           "the engine under vLLM's external_launcher; rank 0 writes the artifact "
           "(default 1: one process)", default=1, type=positive_int, metavar="N"),
    Option("stall-seconds", f"fail the engine (shut down, not reused) when its step loop "
           f"makes no progress for SECONDS within a request it serves; tensor parallel: how "
           f"long the other ranks get to answer after one failed (default {STALL_ENV} when "
           f"set, else {DEFAULT_STALL_SECONDS:g})", type=stall_seconds, metavar="SECONDS"),
    Option("artifact-dir", f"where artifacts are written (default {DEFAULT_ARTIFACT_DIR}/: "
           "under pytest's rootdir, or in the current folder for `sdbench collect`; --out "
           "in the CLI is the same option)", metavar="DIR", cli_aliases=("--out",)),
    Option("plots", "draw each artifact beside it (<name>-decode.png, <name>-prefill.png, "
           "<name>.html; needs matplotlib: pip install 'pytest-sdbench[plot]')",
           default=False, action="store_true"),
    # Test selection, as pytest-benchmark's --benchmark-skip/--benchmark-only: pytest only.
    Option("skip", "skip every test that starts an engine (marked sdbench_engine)",
           default=False, action="store_true", commands=()),
    Option("only", "run only the tests that start an engine (marked sdbench_engine); wins "
           "over --sdbench-skip", default=False, action="store_true", commands=()),
    # The `sdbench compare` gate at session finish, as pytest-benchmark's
    # --benchmark-compare/--benchmark-compare-fail: pytest only (compare_gate.py).
    Option("compare", "compare each artifact this run writes with BASELINE (the `sdbench "
           "compare` gate), shown in the sdbench summary", metavar="BASELINE", commands=()),
    Option("compare-fail", "with --sdbench-compare: fail the session when the gate fails "
           "(or no artifact was written)", default=False, action="store_true", commands=()),
    Option("compare-fail-above", "with --sdbench-compare: a point regresses only when slower "
           "by more than its noise and PCT percent (`sdbench compare --fail-above`; default "
           "0: its noise alone)", type=percent, metavar="PCT", commands=()),
)


def add_pytest_options(group) -> None:
    for option in OPTIONS:
        group.addoption(PYTEST_PREFIX + option.name, dest=f"sdbench_{option.dest}",
                        **option.kwargs())


def add_cli_options(parser: argparse.ArgumentParser, command: str,
                    leave_out: tuple[str, ...] = ()) -> None:
    """The options of CLI subcommand `command`, less those named in leave_out (the
    benchmark, which takes the engine options, writes no artifact of its own)."""
    for option in OPTIONS:
        if command in option.commands and option.name not in leave_out:
            parser.add_argument(CLI_PREFIX + option.name, *option.cli_aliases,
                                dest=option.dest, **option.kwargs())


def spelled(name: str, cli: bool) -> str:
    """How the user spells an option in pytest or in the CLI (for error messages)."""
    return (CLI_PREFIX if cli else PYTEST_PREFIX) + name


def k_window_note(depths: tuple[int, ...], cli: bool) -> str | None:
    """What to tell the user of draft depths outside the consumer's import window (None:
    all inside): they are collected all the same, and `sdbench validate` flags them."""
    low, high = K_WINDOW
    outside = [k for k in depths if not low <= k <= high]
    if not outside:
        return None
    return (f"{spelled('k', cli)} {outside} lies outside the import window K={low}-{high}; "
            "collected and kept, and flagged by `sdbench validate`")


def repeat_plan(values: dict, cli: bool) -> RepeatPlan:
    """The repeat policy from the options (by dest); InputError names the option."""
    values = with_defaults(values)
    until = values["until_pinned"]
    if until is None and values["max_rounds"] != DEFAULT_MAX_ROUNDS:
        raise InputError(f"{spelled('max-rounds', cli)}: takes {spelled('until-pinned', cli)} "
                         "(the cap of rounds for points that are not pinned yet)")
    try:
        return RepeatPlan(
            repeats=values["repeats"], order=values["repeat_order"], seed=values["order_seed"],
            until_pinned=None if until is None else UntilPinned(
                max_half_width=until, confidence=PINNED_CONFIDENCE,
                max_rounds=values["max_rounds"]))
    except PlanError as exc:   # its field is an option's name
        raise InputError(f"{spelled(exc.field.replace('_', '-'), cli)}: {exc.why}") from None


def with_defaults(values: dict) -> dict:
    """The options' values with every option the caller left out at the table's default
    (one home for the defaults: OPTIONS)."""
    filled = {option.dest: option.default for option in OPTIONS}
    filled.update({name: value for name, value in values.items() if value is not None})
    for option in OPTIONS:   # an appended option given no value stays an empty list
        if option.action == "append" and filled[option.dest] is None:
            filled[option.dest] = []
    return filled


def user_engine_args(values: dict) -> dict[str, Any]:
    """The engine arguments from the config file, then --engine-arg over them."""
    args = dict(values.get("engine_config") or {})
    args.update(dict(values.get("engine_arg") or []))
    return args
