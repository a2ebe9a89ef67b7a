"""Model presets and engine start-up; the only package that knows vLLM's internals."""

from .facts import ExecutionIdentity, IdentityField, KVCacheGroup, KVCapacity, ModelIdentity
from .launch import SdbenchEngine, ServingProbe, start_engine
from .presets import DEFAULT_PRESET, PRESETS, materialize
from .spec import EngineSpec

__all__ = ["DEFAULT_PRESET", "PRESETS", "EngineSpec", "ExecutionIdentity", "IdentityField",
           "KVCacheGroup", "KVCapacity", "ModelIdentity", "SdbenchEngine", "ServingProbe", "materialize",
           "start_engine"]
