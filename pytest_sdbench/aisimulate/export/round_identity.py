"""The consumer's identity of a speculative round: the execution profile, the four
execution columns, the cell id."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

from ...wire.contract import K_WINDOW, SPEC_METHOD_EAGLE3
from .vocabulary import (
    AUTO_BACKEND,
    AUTOREGRESSIVE_EXECUTION_PROFILE,
    EXECUTION_COLUMNS,
    POINT_SOURCE,
    SELECTOR_PREFIX,
    TIMING_SCOPE,
    backend_columns,
    topology,
)

# --- The consumer's identity ----------------------------------------------------------------

def canonical_hash(payload: object) -> str:
    """The consumer's canonical hash (sorted keys, compact separators)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def execution_profile(k: int, draft_path: str, draft_revision: str) -> dict:
    if not 1 <= k <= K_WINDOW[1]:
        raise AssertionError(f"a speculative execution profile needs K in 1-{K_WINDOW[1]}, "
                             f"got {k}")
    return {"kind": "speculative_round", "method": SPEC_METHOD_EAGLE3, "num_draft_tokens": k,
            "draft_model": draft_path, "draft_revision": draft_revision,
            "timing_scope": TIMING_SCOPE}


def speculative_identity(model_revision: str, profile: dict) -> tuple[str, str, str, str]:
    """The four execution columns of a speculative round, as the consumer's Rust
    _normalize_fpm_execution_profile writes the selector (key order fixed, compact)."""
    ordered = {key: profile[key] for key in ("kind", "method", "num_draft_tokens",
                                             "draft_model", "draft_revision", "timing_scope")}
    selector = SELECTOR_PREFIX + json.dumps(
        {"model_revision": model_revision, "execution_profile": ordered},
        separators=(",", ":"), ensure_ascii=False)
    return ("", selector, "none", "text")


def assert_speculative(execution: Sequence[str], k: int) -> None:
    """Never an autoregressive identity for K > 0: the consumer would import it silently and
    load it at nextn=0, pricing EAGLE3 rounds as plain steps."""
    profile = execution[1] if len(execution) == len(EXECUTION_COLUMNS) else None
    ok = (k >= 1 and isinstance(profile, str) and profile.startswith(SELECTOR_PREFIX)
          and json.loads(profile[len(SELECTOR_PREFIX):])["execution_profile"]
          ["num_draft_tokens"] == k)
    if not ok or profile == AUTOREGRESSIVE_EXECUTION_PROFILE:
        raise AssertionError(f"refusing to write execution identity {tuple(execution)!r} for "
                             f"K={k}: a K>0 profile must carry its speculative round")


def cell_id(*, model_path: str, system: str, phase: str, tp: int,
            precision: Mapping[str, str], execution: Sequence[str],
            attention_backend: str = AUTO_BACKEND) -> str:
    """The consumer planner's _cell_id for this cell."""
    payload = {
        "backend": "vllm", "model_path": model_path, "system": system, "phase": phase,
        "topology": topology(tp), "weight_quantization": precision["gemm_quant_mode"],
        "kv_cache_dtype": precision["kv_cache_dtype"], **backend_columns(attention_backend),
        **dict(zip(EXECUTION_COLUMNS, execution, strict=True)),
        "input_text_sha256": "", "point_source": POINT_SOURCE,
    }
    return "fpm-" + canonical_hash(payload)[:16]

