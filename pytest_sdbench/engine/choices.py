"""The engine the user chose, and every check of it that can be made before an engine starts
(a start takes 15-90 s): the model pair (model_pair.check_checkpoints), the revisions, CUDA
graphs and the synthetic acceptance length on this device, the stall bound, the CPU list,
the engine arguments' names against vLLM's EngineArgs and their values against its config
classes, and the limits an engine of these choices will run under that are known before it
starts. Each refusal (spec.ChoiceError) is one line naming the option as the user spells it
(`opt`) and the value."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..wire.contract import REVISION_PATTERN
from ..wire.points import KnownLimits
from .compat import BLOCK_SIZE
from .engine_args import engine_argument_names, refused_engine_argument
from .model_pair import check_checkpoints, vllm_version
from .placement import CpuListError, check_cpus
from .presets import PRESETS
from .spec import ChoiceError, EngineSpec, default_stall_seconds, engine_spec, resolve_preset
from .vram import cuda_available

Spell = Callable[[str], str]   # option name -> as the user spells it (--model, --sdbench-model)


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
    user_engine_args: Mapping[str, Any]   # the config file's, then --engine-arg over them
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


def check_engine_choices(choices: EngineChoices, depths: tuple[int, ...],
                         given: Mapping[str, Mapping[str, Any]], opt: Spell
                         ) -> tuple[KnownLimits, str]:
    """Every check of the choices for each K of the run; `given`: the engine arguments by
    the option that gave them (engine-arg, engine-config). The limits known before the
    engine starts, and where they come from (known_limits)."""
    check_model_choices(choices, depths, opt)
    if choices.stall_seconds is None:
        default_stall_seconds()   # the option's default: the variable, when set, is a bound
    if choices.cpus:
        try:
            check_cpus(choices.cpus)
        except CpuListError as exc:
            raise ChoiceError(f"{opt('cpus')}: {exc}") from None
    check_engine_arg_names(given, opt)
    check_engine_arg_values(given, opt)
    return known_limits(choices)


def check_model_choices(choices: EngineChoices, depths: tuple[int, ...], opt: Spell) -> None:
    """The model pair (under the load format of the user's engine arguments), the
    revisions, CUDA graphs and the acceptance length on this device (for each K)."""
    model, draft = choices.model, choices.draft
    if (model is None) != (draft is None):
        raise ChoiceError(f"{opt('model')} and {opt('draft')} go together: give both a target "
                          f"and an EAGLE3 draft directory (got {model!r} and {draft!r})")
    for name, value in (("target-revision", choices.target_revision),
                        ("draft-revision", choices.draft_revision)):
        if value is not None and not re.fullmatch(REVISION_PATTERN, value):
            raise ChoiceError(f"{opt(name)}: a revision is a full 40-hex git commit, got "
                              f"{value!r}")
    if model is not None and draft is not None:
        check_checkpoints(model, draft, opt, choices.user_engine_args.get("load_format"),
                          (choices.target_revision, choices.draft_revision))
    if choices.cuda_graphs and not cuda_available():
        raise ChoiceError(f"{opt('cuda-graphs')}: CUDA graphs are captured on a CUDA device; "
                          f"this machine has none (vLLM's CPU engine runs eager)")
    al = choices.acceptance_length
    if al is not None:
        if not cuda_available():
            raise ChoiceError(f"{opt('acceptance-length')}: vLLM's synthetic rejection "
                              f"sampler runs on CUDA only; this machine has no CUDA device")
        if not all(1.0 <= al <= k + 1 for k in depths):
            raise ChoiceError(f"{opt('acceptance-length')}: must lie in [1, K+1] for every K "
                              f"{list(depths)}, got {al}")


def check_engine_arg_names(given: Mapping[str, Mapping[str, Any]], opt: Spell) -> None:
    """Each engine argument the user named is one vLLM's LLM(...) takes (EngineArgs' fields
    and LLM's own parameters, read from vLLM's source: compat.engine_argument_names)."""
    if not any(given.values()):
        return
    known = engine_argument_names()
    if known is None:
        return   # no vLLM here, or its source moved: the engine start says what is wrong
    for option, names in given.items():
        unknown = sorted(set(names) - known)
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ChoiceError(f"{opt(option)}: {unknown[0]!r} is not an engine argument of "
                              f"vLLM {vllm_version()}: EngineArgs has no such field{hint}")


def check_engine_arg_values(given: Mapping[str, Mapping[str, Any]], opt: Spell) -> None:
    """Each engine argument's value against vLLM's own config classes
    (compat.refused_engine_argument): a value vLLM would refuse only once the engine starts
    (8-90 s) is refused now, naming the field and the value. Values only the whole config
    refuses are config_check's, once the spec is built."""
    for option, args in given.items():
        refused = refused_engine_argument(dict(args)) if args else None
        if refused is not None:
            raise ChoiceError(f"{opt(option)}: {refused.name}={refused.value!r} is refused by "
                              f"vLLM {vllm_version()}'s {refused.config_field}: "
                              f"{refused.reason}")


# The engine settings a grid must fit that can be known before the engine starts.
_KNOWN_LIMITS = tuple(f.name for f in dataclasses.fields(KnownLimits) if f.name != "kv_tokens")


def known_limits(choices: EngineChoices) -> tuple[KnownLimits, str]:
    """The limits an engine of these choices will run under that are known before it starts
    (a preset's oracle limits and KV block size, unless --vllm-defaults; the user's engine
    arguments over them), and where they come from, for the message. The KV capacity is
    known only once the engine has started."""
    known: dict[str, Any] = {}
    sources = []
    preset = None if choices.model else resolve_preset(choices.preset)
    if preset is not None and not choices.vllm_defaults:
        known.update(PRESETS[preset].engine_limits,
                     block_size=BLOCK_SIZE["cuda" if cuda_available() else "cpu"])
        sources.append(f"the {preset} preset's oracle limits")
    user = {k: v for k, v in choices.user_engine_args.items() if k in _KNOWN_LIMITS}
    if user:
        known.update(user)
        sources.append("your engine arguments")
    limits = {k: v for k, v in known.items()
              if k in _KNOWN_LIMITS and type(v) is int and v > 0}
    return KnownLimits(**limits), " and ".join(sources)
