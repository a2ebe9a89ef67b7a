"""What every rule section of the validator shares: the legacy marker's schema version,
the reading of identity fields, the bounds of a real step."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ...wire.contract import (
    GPU_NAME_PREFIXES,
    IDENTITY_RESOLVED,
    LEGACY_SCHEMA_VERSIONS,
    PHASES,
    STEP_SECONDS_MAX,
    STEP_SECONDS_MIN,
)
from ...wire.identity import IdentityField
from ...wire.model import Artifact

V1 = LEGACY_SCHEMA_VERSIONS[1]
Err = Callable[[str], None]
_LEGACY_VERSION = {marker: version for version, marker in LEGACY_SCHEMA_VERSIONS.items()}


def older_than(legacy: str | None, version: int) -> bool:
    """The artifact was written in a schema_version before `version` (then upgraded)."""
    return legacy is not None and _LEGACY_VERSION[legacy] < version


# ---- helpers ---------------------------------------------------------------------------

def resolved(f: IdentityField):
    """A resolved identity value, or None."""
    return f.value if f.status == IDENTITY_RESOLVED else None


def resolved_int(f: IdentityField) -> int | None:
    v = resolved(f)
    return v if type(v) is int else None


def is_gpu_name(name: str) -> bool:
    """A GPU's device name: it begins with one of the GPU name prefixes, as a whole word."""
    return any(name == p or name.startswith(p + " ") for p in GPU_NAME_PREFIXES)


def all_observations(a: Artifact):
    for phase in PHASES:
        for i, obs in enumerate(getattr(a, phase)):
            yield phase, i, obs


def fsum_or_inf(values: Sequence[float]) -> float:
    try:
        return math.fsum(values)
    except OverflowError:
        return math.inf


def is_real_step(seconds: float, device: str) -> bool:
    return math.isfinite(seconds) and STEP_SECONDS_MIN <= seconds <= STEP_SECONDS_MAX[device]

