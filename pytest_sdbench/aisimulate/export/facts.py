"""The facts an export records: resolved in the artifact, or given by the user (source
'user'), never invented; the parsing of the user's --fact and --graph-mode values."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...wire.contract import GRAPH_MODES, REVISION_PATTERN, SOURCE_USER, TWO_PHASES
from ...wire.identity import IdentityField
from ...wire.model import Artifact
from .vocabulary import UnusableInput

# --- Facts: resolved in the artifact, or given by the user (source 'user'), never invented --

@dataclass(frozen=True)
class FactSpec:
    path: str          # where the artifact keeps it
    option: str        # how the user gives it when the artifact leaves it unresolved
    parse: type


FACTS: dict[str, FactSpec] = {
    "target_revision": FactSpec("identity.target.revision", "--target-revision REV", str),
    "draft_revision": FactSpec("identity.draft.revision", "--draft-revision REV", str),
    "max_num_seqs": FactSpec("identity.settings.max_num_seqs", "--fact max_num_seqs=N", int),
    "max_num_batched_tokens": FactSpec("identity.settings.max_num_batched_tokens",
                                       "--fact max_num_batched_tokens=N", int),
    "max_model_len": FactSpec("identity.settings.max_model_len", "--fact max_model_len=N", int),
    "gpu_memory_utilization": FactSpec("identity.settings.gpu_memory_utilization",
                                       "--fact gpu_memory_utilization=F", float),
    "kv_cache_dtype": FactSpec("identity.settings.kv_cache_dtype",
                               "--fact kv_cache_dtype=NAME", str),
    "kv_bytes_per_token": FactSpec("kv_capacity.bytes_per_token",
                                   "--fact kv_bytes_per_token=N", int),
    # only the consumer's collection plan reads it: an export without it has no plan
    "enforce_eager": FactSpec("identity.settings.enforce_eager",
                              "--fact enforce_eager=true|false", bool),
}
OPTIONAL_FACTS = ("enforce_eager",)
REVISION_FACTS = ("target_revision", "draft_revision")
USER_FACT_NAMES = tuple(name for name in FACTS if name not in REVISION_FACTS)


def parse_user_fact(text: str) -> tuple[str, object]:
    """NAME=VALUE of one fact the artifact may leave unresolved; UnusableInput otherwise."""
    name, sep, raw = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or name not in USER_FACT_NAMES:
        raise UnusableInput(f"--fact: expected NAME=VALUE with NAME one of "
                            f"{', '.join(USER_FACT_NAMES)}; got {text!r}")
    return name, check_user_value(name, raw.strip())


def parse_graph_mode(text: str) -> tuple[str, str]:
    """PHASE=MODE of --graph-mode: the one CUDA-graph mode a phase's export keeps."""
    phase, sep, mode = (part.strip() for part in text.partition("="))
    if not sep or phase not in TWO_PHASES or mode not in GRAPH_MODES:
        raise UnusableInput(f"--graph-mode: expected PHASE=MODE with PHASE one of "
                            f"{', '.join(TWO_PHASES)} and MODE one of {', '.join(GRAPH_MODES)}; "
                            f"got {text!r}")
    return phase, mode


def check_user_value(name: str, raw: str) -> object:
    spec = FACTS[name]
    if spec.parse is bool:
        if raw.lower() not in ("true", "false"):
            raise UnusableInput(f"--fact {name}: expected true or false, got {raw!r}")
        return raw.lower() == "true"
    if spec.parse is str:
        if name in REVISION_FACTS and not re.fullmatch(REVISION_PATTERN, raw):
            raise UnusableInput(f"{spec.option.split()[0]}: a revision is a full 40-hex git "
                                f"commit, got {raw!r}")
        if not raw:
            raise UnusableInput(f"--fact {name}: empty value")
        return raw
    try:
        value = spec.parse(raw)
    except ValueError:
        raise UnusableInput(f"--fact {name}: expected {spec.parse.__name__}, got {raw!r}") from None
    low_ok = value > 0 and math.isfinite(value)
    if not low_ok or (name == "gpu_memory_utilization" and value > 1):
        raise UnusableInput(f"--fact {name}: out of range, got {raw!r}")
    return value


@dataclass(frozen=True)
class Fact:
    value: object
    source: str


def identity_field(artifact: Artifact, path: str) -> IdentityField:
    node: Any = artifact
    for part in path.split("."):
        node = getattr(node, part)
    assert isinstance(node, IdentityField), path
    return node


def resolve_fact(artifact: Artifact, name: str, user: Mapping[str, object],
                 reasons: list[str], required: bool = True) -> Fact | None:
    """The artifact's value (a user value must agree with it) or, where the artifact leaves
    the field unresolved, the user's; else (when required) a reason naming the field and
    the option."""
    spec = FACTS[name]
    found = identity_field(artifact, spec.path)
    if found.resolved:
        if name in user and user[name] != found.value:
            reasons.append(f"{spec.path}: the artifact holds {found.value!r} (source "
                           f"{found.source}); the user's {name}={user[name]!r} contradicts it")
            return None
        return Fact(found.value, f"artifact {spec.path} ({found.source})")
    if name in user:
        return Fact(user[name], SOURCE_USER)
    if not required:
        return None
    reasons.append(f"{spec.path}: unresolved ({found.reason}); the consumer needs it: "
                   f"pass {spec.option}, recorded with source 'user'")
    return None


def resolved_value(artifact: Artifact, path: str, reasons: list[str]) -> object:
    found = identity_field(artifact, path)
    if not found.resolved:
        reasons.append(f"{path}: unresolved ({found.reason}); the consumer needs it")
        return None
    return found.value

