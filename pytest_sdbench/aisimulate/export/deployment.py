"""The consumer facts derived from the artifact: the engine facts, the precision and the
checkpoint configs (config.json bytes whose sha256 is the artifact's digest)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ...wire.contract import REVISION_PATTERN, SOURCE_USER
from ...wire.model import Artifact
from .facts import (
    FACTS,
    OPTIONAL_FACTS,
    REVISION_FACTS,
    Fact,
    identity_field,
    resolve_fact,
    resolved_value,
)
from .options import ExportOptions
from .vocabulary import (
    AUTO_BACKEND,
    COMM_QUANT_MODE,
    KV_CACHE_DTYPE,
    MOE_CONFIG_KEYS,
    PRECISION_DTYPES,
    UnusableInput,
)

# --- Consumer facts derived from the artifact ------------------------------------------------

@dataclass(frozen=True)
class Deployment:
    """Everything the profile and the table need, each with its source."""
    facts: dict[str, Fact]
    precision: dict[str, str]
    configs: dict[str, tuple[bytes, str]]        # role -> (config.json bytes, source)


def resolve_facts(a: Artifact, options: ExportOptions, reasons: list[str]) -> dict[str, Fact]:
    """The facts an export records. Both revisions are required in every mode, envelopes
    included: an export names the checkpoints it measured by commit, or is refused. The
    engine facts are required by the table only (envelopes record those at hand)."""
    facts: dict[str, Fact] = {}
    for name in FACTS:
        required = name in REVISION_FACTS or not (options.envelope_only
                                                  or name in OPTIONAL_FACTS)
        fact = resolve_fact(a, name, options.user_facts, reasons, required=required)
        if fact is not None:
            facts[name] = fact
    for name in REVISION_FACTS:
        revision = facts.get(name)
        if revision is not None and not re.fullmatch(REVISION_PATTERN, str(revision.value)):
            reasons.append(f"{FACTS[name].path}: {revision.value!r} ({revision.source}) is "
                           "not a pinned 40-hex commit; the consumer pins checkpoints by commit")
    return facts


def resolve_deployment(a: Artifact, options: ExportOptions, reasons: list[str]) -> Deployment:
    facts = resolve_facts(a, options, reasons)
    _system_fact(a, options, facts, reasons)
    for name, path in (("engine_version", "identity.engine_version"),
                       ("architecture", "identity.target.architecture")):
        value = resolved_value(a, path, reasons)
        if value is not None:
            facts[name] = Fact(value, f"artifact {path} ({identity_field(a, path).source})")
    found = a.identity.attention_backend
    facts["attention_backend"] = (
        Fact(found.value, f"artifact identity.attention_backend ({found.source})")
        if found.resolved and isinstance(found.value, str) and found.value else
        Fact(AUTO_BACKEND, f"the consumer's 'auto' (engine decided): "
                           f"identity.attention_backend unresolved ({found.reason})"))
    precision = _precision(a, facts, reasons)
    configs = {role: _config(a, role, options, reasons) for role in ("target", "draft")}
    _check_dense(configs.get("target"), reasons)
    return Deployment(facts, precision, {r: c for r, c in configs.items() if c})


def _system_fact(a: Artifact, options: ExportOptions, facts: dict[str, Fact],
                 reasons: list[str]) -> None:
    if options.system is None:
        name = a.identity.device_name.value if a.identity.device_name.resolved else None
        reasons.append(f"system: the artifact's device {name!r} names no consumer system "
                       "(its systems/<name>.yaml); pass --system NAME, e.g. h200_sxm, "
                       "recorded with source 'user'")
    else:
        facts["system"] = Fact(options.system, SOURCE_USER)


def _precision(a: Artifact, facts: Mapping[str, Fact], reasons: list[str]) -> dict[str, str]:
    dtype = resolved_value(a, "identity.target.dtype", reasons)
    quant = resolved_value(a, "identity.target.quantization", reasons)
    if dtype not in PRECISION_DTYPES or quant != "none":
        if dtype is not None:
            reasons.append(f"identity.target.dtype: {dtype!r} with quantization {quant!r}; "
                           f"this exporter maps unquantized {', '.join(PRECISION_DTYPES)} "
                           "checkpoints only")
        return {}
    kv = facts.get("kv_cache_dtype")
    if kv is None:
        return {}
    if kv.value not in KV_CACHE_DTYPE:
        reasons.append(f"identity.settings.kv_cache_dtype: {kv.value!r} ({kv.source}); this "
                       f"exporter maps {', '.join(sorted(KV_CACHE_DTYPE))} only")
        return {}
    kv_dtype = KV_CACHE_DTYPE[kv.value] or dtype
    return {"gemm_quant_mode": dtype, "moe_quant_mode": dtype, "fmha_quant_mode": dtype,
            "comm_quant_mode": COMM_QUANT_MODE, "kv_cache_dtype": kv_dtype}


def _config(a: Artifact, role: str, options: ExportOptions,
            reasons: list[str]) -> tuple[bytes, str] | None:
    """config.json bytes whose sha256 is the artifact's config digest: the user's file, else
    the checkpoint at the artifact's model path, else a known config (a preset) by digest."""
    path = f"identity.{role}.config_digest"
    digest = resolved_value(a, path, reasons)
    if digest is None:
        return None
    want = str(digest).removeprefix("sha256:")
    given = options.target_config if role == "target" else options.draft_config
    if given is not None:
        file = given / "config.json" if given.is_dir() else given
        try:
            data = file.read_bytes()
        except OSError:
            raise UnusableInput(f"--{role}-config: {file} cannot be read") from None
        got = hashlib.sha256(data).hexdigest()
        if got != want:
            reasons.append(f"{path}: {digest}, but --{role}-config {file} has sha256:{got}; "
                           "that is not the checkpoint the engine ran")
            return None
        return data, f"{SOURCE_USER} (--{role}-config {file})"
    model = getattr(a.identity, role).model
    if model.resolved:
        file = Path(str(model.value)) / "config.json"
        data = file.read_bytes() if file.is_file() else b""
        if hashlib.sha256(data).hexdigest() == want:
            return data, f"the artifact's identity.{role}.model ({file})"
    known = options.known_configs.get(want)
    if known is not None and hashlib.sha256(known.text.encode()).hexdigest() == want:
        return known.text.encode(), known.source
    reasons.append(f"{path}: {digest}; no config.json with that digest is at hand (not at the "
                   f"artifact's identity.{role}.model, no preset matches); the consumer reads "
                   f"the checkpoint's config.json: pass --{role}-config PATH")
    return None


def _check_dense(config: tuple[bytes, str] | None, reasons: list[str]) -> None:
    if config is None:
        return
    data = json.loads(config[0])
    experts = [data[key] for key in MOE_CONFIG_KEYS if isinstance(data, dict) and data.get(key)]
    if experts:
        reasons.append(f"target config.json: a mixture-of-experts model ({experts[0]} experts); "
                       "this exporter maps dense models only")

