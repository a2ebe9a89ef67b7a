"""Readers for older artifact formats. A legacy artifact is upgraded to the current shape,
marked with its legacy name, and checked against the rules that applied to it; its digests
are checked on the document as written, before anything is filled in.

- schema_version 1, "v1-autoregressive": no speculative decoding. No ``speculative`` block,
  no draft in the identity, decode points without ``draft_depth``/``acceptance_length``,
  snapshot requests without ``draft_tokens``, prefill observations without
  ``kv_seed_regime``/``cache_hit_tokens`` (prefixes were not verified).
- schema_version 2, "v2-phase-specific-speculative": EAGLE3, but one phase per artifact
  (mode ``prefill`` or ``decode``; ``agg`` did not exist), unverified prefixes as in v1, and
  acceptance of the retained step only (no ``run_acceptance_*``).
"""

from __future__ import annotations

import copy

from ..contract import (
    ACCEPTANCE_NATURAL,
    IDENTITY_UNRESOLVED,
    KV_SEED_NONE,
    LEGACY_SCHEMA_VERSIONS,
    MODE_AGG,
    SCHEMA_VERSION,
)
from ..typed import digest

UNVERIFIED_PREFIX = "unverified"  # legacy only: a cached prefix nobody verified as a hit
NO_DRAFT = {"status": IDENTITY_UNRESOLVED, "value": None, "source": None,
            "reason": "autoregressive artifact (schema_version 1): no draft model"}
DRAFT_MODEL_FIELDS = ("model", "revision", "config_digest", "architecture", "dtype",
                      "quantization", "load_format")


def _check_raw_digests(data: dict) -> None:
    integrity = data.get("integrity") or {}
    for part, key in (("identity", "identity_digest"), ("kv_capacity", "kv_capacity_digest"),
                      ("grid", "grid_digest")):
        if part not in data:
            raise ValueError(f"{part}: missing")
        if integrity.get(key) != digest(data[part]):
            raise ValueError(f"integrity.{key}: {integrity.get(key)!r} does not match {part} "
                             f"as written; the legacy artifact was altered")


def _run_acceptance_from_step(data: dict) -> None:
    """v1/v2 kept acceptance of the retained step only; that step is the run's evidence."""
    for obs in data.get("decode", []):
        if isinstance(obs, dict) and "run_acceptance_length" not in obs:
            obs["run_acceptance_length"] = obs.get("observed_acceptance_length")
            obs["run_acceptance_samples"] = len(obs.get("accepted_tokens") or [])


def _unverified_prefill(data: dict) -> None:
    for obs in data.get("prefill", []):
        if isinstance(obs, dict) and "kv_seed_regime" not in obs:
            prefix = (obs.get("point") or {}).get("cached_prefix_tokens")
            obs["kv_seed_regime"] = KV_SEED_NONE if prefix == 0 else UNVERIFIED_PREFIX
            obs["cache_hit_tokens"] = []


def _v1_to_v2(data: dict) -> None:
    data["speculative"] = {"method": "none", "draft_depth": 0,
                           "acceptance_control": ACCEPTANCE_NATURAL,
                           "synthetic_acceptance_length": None}
    ident = data.get("identity", {})
    ident["draft"] = {name: dict(NO_DRAFT) for name in DRAFT_MODEL_FIELDS}
    for name in ("method", "draft_depth", "acceptance_control"):
        ident[name] = dict(NO_DRAFT)
    kv = data.get("kv_capacity", {})
    kv.setdefault("draft_layer_names", [])
    for group in kv.get("groups", []):
        group.setdefault("draft_layers", [])
    for point in (data.get("grid") or {}).get("decode", []):
        point.setdefault("draft_depth", 0)
        point.setdefault("acceptance_length", None)
    for phase in ("prefill", "decode"):
        for obs in data.get(phase, []):
            if phase == "decode":
                obs["point"].setdefault("draft_depth", 0)
                obs["point"].setdefault("acceptance_length", None)
                batch = len(obs.get("snapshot", {}).get("requests", []))
                obs.setdefault("accepted_tokens", [0] * batch)
                obs.setdefault("observed_acceptance_length", 1.0)
                obs.setdefault("run_acceptance_length", 1.0)
                obs.setdefault("run_acceptance_samples", 0)
            for request in obs.get("snapshot", {}).get("requests", []):
                request.setdefault("draft_tokens", 0)


def upgrade(data: dict) -> tuple[dict, str]:
    """The current shape of a legacy artifact, and its legacy marker."""
    version = data["schema_version"]
    marker = LEGACY_SCHEMA_VERSIONS[version]
    if version == 2 and data.get("mode") == MODE_AGG:
        raise ValueError("mode: 'agg' did not exist in schema_version 2 (phase-specific "
                         "artifacts); this artifact is relabelled")
    _check_raw_digests(data)
    data = copy.deepcopy(data)
    if version == 1:
        _v1_to_v2(data)
    _unverified_prefill(data)
    _run_acceptance_from_step(data)
    data["schema_version"] = SCHEMA_VERSION
    # The upgrade filled in fields; the raw digests were checked above.
    data["integrity"] = dict(data["integrity"], identity_digest=digest(data["identity"]),
                             kv_capacity_digest=digest(data["kv_capacity"]),
                             grid_digest=digest(data["grid"]))
    return data, marker
