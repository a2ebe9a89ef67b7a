"""The engine's arguments checked across fields before the engine starts: vLLM's own config
classes built from the arguments the engine would be started with (EngineArgs and its
create_engine_config), so that a value only the whole config refuses (max_model_len=0: a
ModelConfig error) is refused in one line naming the argument, its value and vLLM's reason,
before the 15-90 s of an engine start. Field-level values (max_num_seqs=-4) are refused
earlier, without vLLM's import (compat.refused_engine_argument)."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from . import compat
from .spec import EngineSpec


class RefusedConfig(NamedTuple):
    name: str | None      # the engine argument the refusal names (None: none of the user's)
    value: Any
    config: str           # the vLLM config class that refused it, e.g. ModelConfig
    reason: str           # vLLM's message, one line


def engine_config_refusal(spec: EngineSpec, device: str | None = None) -> RefusedConfig | None:
    """vLLM's refusal of the engine config `spec` would start with, or None. A spec of a
    tensor-parallel engine is checked by each rank's own start (its config needs the
    launcher's environment)."""
    if spec.tensor_parallel_size > 1:
        return None
    saved = compat.prepare_environment()
    try:
        from vllm.engine.arg_utils import EngineArgs
        kwargs = compat.engine_kwargs(spec, device or compat.device_type())
        names = set(EngineArgs.__dataclass_fields__)
        try:
            EngineArgs(**{k: v for k, v in kwargs.items() if k in names}).create_engine_config()
        except Exception as exc:  # noqa: BLE001 (vLLM refuses with pydantic's and ValueErrors)
            return _refusal(exc, kwargs, spec.user_engine_args)
        return None
    finally:
        compat.restore_environment(saved)


def _refusal(exc: Exception, kwargs: dict, user: dict) -> RefusedConfig:
    """Which argument the refusal is about: a pydantic error's field, else the first of the
    user's engine arguments (then the engine's) its message names."""
    config, reason = type(exc).__name__, " ".join(str(exc).split())
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        config = str(getattr(exc, "title", config))
        reason = " ".join(str(first.get("msg", reason)).split()).removeprefix("Value error, ")
        loc = [str(p) for p in first.get("loc", ()) if isinstance(p, str)]
        if loc and loc[-1] in kwargs:
            return RefusedConfig(loc[-1], kwargs[loc[-1]], config, reason)
    for names in (user, kwargs):
        for name in names:
            if re.search(rf"\b{re.escape(name)}\b", reason):
                return RefusedConfig(name, kwargs.get(name, names[name]), config, reason)
    return RefusedConfig(None, None, config, reason)
