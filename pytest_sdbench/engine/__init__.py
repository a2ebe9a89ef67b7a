"""Model presets and engine start-up; the only package that knows vLLM's internals."""

from ..wire.identity import (
    ExecutionIdentity,
    IdentityField,
    KVCacheGroup,
    KVCapacity,
    ModelIdentity,
)
from .launch import SdbenchEngine, start_engine
from .presets import AUTO_PRESET, DEFAULT_PRESET, PRESET_FOR_DEVICE, PRESETS, materialize
from .spec import EngineSpec
from .surface import ServingProbe

__all__ = [
    "AUTO_PRESET",
    "DEFAULT_PRESET",
    "PRESETS",
    "PRESET_FOR_DEVICE",
    "EngineSpec",
    "ExecutionIdentity",
    "IdentityField",
    "KVCacheGroup",
    "KVCapacity",
    "ModelIdentity",
    "SdbenchEngine",
    "ServingProbe",
    "materialize",
    "start_engine",
]
