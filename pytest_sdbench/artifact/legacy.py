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
- schema_version 3, "v3-single-sample": one observation per point after a single warm-up
  pass; no engine settings, communication, KV bytes per token, run environment, start
  time or timed total. Those are read as unresolved (or null), never filled with a guess;
  the per-rank KV blocks are the one rank's blocks, and the point summaries are computed
  from the one sample each point has.
- schema_version 4, "v4-back-to-back-repeats": a point's repeats taken one after the other
  right after its warm-up; no rounds, no host canary, no CPU placement. Read as the
  back_to_back policy with no rounds recorded (their order and the host's speed are
  unknown, and stay so); each summary gains the fields derived from its samples.
- schema_version 5, "v5-first-decode-step": decode retained the transient first decode step
  (steady_step); no GPU clock; the median's interval the normal one.
- schema_version 6, "v6-two-phases": prefill and decode only; no mixed phase (no mixed
  points, observations or policy).

A label must fit the document: a document holding a field that a later schema_version
introduced (FIELDS_INTRODUCED) is not of the version it claims, and is refused, never
read as legacy with the newer fields dropped or overwritten.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

from ..wire import typed
from ..wire.contract import (
    ACCEPTANCE_NATURAL,
    IDENTITY_UNRESOLVED,
    KV_SEED_NONE,
    KV_SEED_UNVERIFIED,
    LEGACY_SCHEMA_VERSIONS,
    MEDIAN_NORMAL_Z,
    MODE_AGG,
    REPEAT_BACK_TO_BACK,
    SCHEMA_VERSION,
    SPEC_METHOD_NONE,
    STEP_TIME_SINGLE_RANK,
    STOP_FIXED,
    WARMUP_SINGLE_PASS,
)
from ..wire.model import summarize
from ..wire.typed import digest

NO_DRAFT = {"status": IDENTITY_UNRESOLVED, "value": None, "source": None,
            "reason": "autoregressive artifact (schema_version 1): no draft model"}
DRAFT_MODEL_FIELDS = ("model", "revision", "config_digest", "architecture", "dtype",
                      "quantization", "load_format")


class LegacyError(ValueError):
    """A document that cannot be read as the legacy version it is labelled; every reason."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("; ".join(errors))


# The fields each schema_version introduced ("[]": every item of a list). A document
# labelled older than a field's version cannot hold that field: it was relabelled.
FIELDS_INTRODUCED: dict[int, tuple[str, ...]] = {
    2: ("speculative", "identity.draft", "identity.method", "identity.draft_depth",
        "identity.acceptance_control", "kv_capacity.draft_layer_names",
        "kv_capacity.groups[].draft_layers", "grid.decode[].draft_depth",
        "grid.decode[].acceptance_length", "decode[].point.draft_depth",
        "decode[].point.acceptance_length", "decode[].accepted_tokens",
        "decode[].observed_acceptance_length", "prefill[].snapshot.requests[].draft_tokens",
        "decode[].snapshot.requests[].draft_tokens"),
    3: ("prefill[].kv_seed_regime", "prefill[].cache_hit_tokens",
        "decode[].run_acceptance_length", "decode[].run_acceptance_samples"),
    4: ("started_at", "environment", "summaries", "timed_seconds",
        "measurement_policy.repeats", "measurement_policy.warmup",
        "measurement_policy.step_time_rule", "identity.distributed_executor_backend",
        "identity.communication", "identity.settings", "kv_capacity.bytes_per_token",
        "kv_capacity.rank_num_blocks", "prefill[].repeat", "decode[].repeat",
        "prefill[].warmup_passes", "decode[].warmup_passes", "prefill[].warmup_settled",
        "decode[].warmup_settled", "prefill[].timing.rank_seconds",
        "decode[].timing.rank_seconds"),
    5: ("measurement_policy.repeat_order", "measurement_policy.order_seed",
        "measurement_policy.until_pinned", "prefill[].round", "decode[].round",
        "summaries[].median_half_width", "summaries[].stop", "summaries[].canary_spread",
        "environment.cpu_placement", "rounds", "host_canary", "observer_cost"),
    6: ("prefill[].gpu_clock", "decode[].gpu_clock", "measurement_policy.median_interval"),
    7: ("mixed", "grid.mixed", "measurement_policy.mixed"),
}


def _present(node, parts: list[str], path: str = "") -> Iterator[str]:
    """The concrete paths where a FIELDS_INTRODUCED pattern's field is present."""
    if not isinstance(node, dict):
        return
    name, rest = parts[0], parts[1:]
    each = name.endswith("[]")
    key = name[:-2] if each else name
    if key not in node:
        return
    where = f"{path}.{key}" if path else key
    if not rest:
        yield where
    elif each:
        items = node[key] if isinstance(node[key], list) else []
        for i, item in enumerate(items):
            yield from _present(item, rest, f"{where}[{i}]")
    else:
        yield from _present(node[key], rest, where)


def label_errors(data: dict, version: int) -> list[str]:
    """Why ``data`` is not shaped as the legacy ``version`` it is labelled (empty: it is)."""
    marker = LEGACY_SCHEMA_VERSIONS[version]
    errors = []
    if version == 2 and data.get("mode") == MODE_AGG:
        errors.append("mode: 'agg' did not exist in schema_version 2 (phase-specific "
                      "artifacts); this artifact is relabelled")
    for introduced, patterns in sorted(FIELDS_INTRODUCED.items()):
        if introduced <= version:
            continue
        for pattern in patterns:
            found = list(_present(data, pattern.split(".")))
            if found:
                more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
                errors.append(f"schema_version: {version} ({marker}) does not fit the "
                              f"document: {found[0]}{more} is a field of schema_version "
                              f"{introduced} and later; the artifact is relabelled")
    return errors


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
        if isinstance(obs, dict):
            obs.setdefault("run_acceptance_length", obs.get("observed_acceptance_length"))
            obs.setdefault("run_acceptance_samples", len(obs.get("accepted_tokens") or []))


def _unverified_prefill(data: dict) -> None:
    for obs in data.get("prefill", []):
        if isinstance(obs, dict):
            prefix = (obs.get("point") or {}).get("cached_prefix_tokens")
            obs.setdefault("kv_seed_regime", KV_SEED_NONE if prefix == 0 else KV_SEED_UNVERIFIED)
            obs.setdefault("cache_hit_tokens", [])


def _v1_to_v2(data: dict) -> None:
    data.setdefault("speculative", {"method": SPEC_METHOD_NONE, "draft_depth": 0,
                                    "acceptance_control": ACCEPTANCE_NATURAL,
                                    "synthetic_acceptance_length": None})
    ident = data.get("identity", {})
    ident.setdefault("draft", {name: dict(NO_DRAFT) for name in DRAFT_MODEL_FIELDS})
    for name in ("method", "draft_depth", "acceptance_control"):
        ident.setdefault(name, dict(NO_DRAFT))
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


NOT_RECORDED = "not recorded before schema_version 4"
SETTING_NAMES = ("max_num_seqs", "max_num_batched_tokens", "max_model_len",
                 "gpu_memory_utilization", "kv_cache_memory_bytes", "kv_cache_dtype",
                 "block_size", "cudagraph_capture_sizes", "enable_chunked_prefill",
                 "enable_prefix_caching", "enforce_eager")


def _unrecorded() -> dict:
    return {"status": IDENTITY_UNRESOLVED, "value": None, "source": None,
            "reason": NOT_RECORDED}


def _v3_to_v4(data: dict) -> None:
    policy = data.get("measurement_policy")
    if isinstance(policy, dict):
        policy.setdefault("prefill", None)
        policy.setdefault("decode", None)
        policy.setdefault("repeats", 1)
        policy.setdefault("warmup", {"rule": WARMUP_SINGLE_PASS, "min_passes": 1,
                                     "max_passes": 1, "tolerance": 0.0})
        policy.setdefault("step_time_rule", STEP_TIME_SINGLE_RANK)
    ident = data.get("identity")
    if isinstance(ident, dict):
        ident.setdefault("distributed_executor_backend", _unrecorded())
        ident.setdefault("communication", _unrecorded())
        ident.setdefault("settings", {**{name: _unrecorded() for name in SETTING_NAMES},
                                      "user_engine_args": {}})
    kv = data.get("kv_capacity")
    if isinstance(kv, dict):
        kv.setdefault("bytes_per_token", _unrecorded())
        kv.setdefault("rank_num_blocks", [kv.get("num_blocks")])
    data.setdefault("started_at", None)
    data.setdefault("environment", None)
    data.setdefault("timed_seconds", None)
    summaries = []
    for phase in ("prefill", "decode"):
        for obs in data.get(phase) or []:
            if isinstance(obs, dict):
                obs.setdefault("repeat", 0)
                obs.setdefault("warmup_passes", 1)
                obs.setdefault("warmup_settled", False)
                seconds = (obs.get("timing") or {}).get("seconds")
                if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
                    summaries.append(typed.encode(
                        # a missing point_index stays None; the validator reports it
                        summarize(phase, obs.get("point_index"),  # type: ignore[arg-type]
                                  [float(seconds)], STOP_FIXED, None, MEDIAN_NORMAL_Z)))
    data.setdefault("summaries", summaries)


def _samples(data: dict, phase: str, index) -> list[float]:
    """The seconds of a point's observations, in the order they were taken (repeat)."""
    found = [(obs.get("repeat"), (obs.get("timing") or {}).get("seconds"))
             for obs in data.get(phase) or [] if isinstance(obs, dict)
             and obs.get("point_index") == index]
    seconds = [s for _, s in sorted(found, key=lambda item: (type(item[0]) is not int,
                                                              item[0] if type(item[0]) is int
                                                              else 0))]
    return [float(s) for s in seconds
            if isinstance(s, (int, float)) and not isinstance(s, bool)]


def _v4_to_v5(data: dict) -> None:
    policy = data.get("measurement_policy")
    if isinstance(policy, dict):
        policy.setdefault("repeat_order", REPEAT_BACK_TO_BACK)
        policy.setdefault("order_seed", None)
        policy.setdefault("until_pinned", None)
    for phase in ("prefill", "decode"):
        for obs in data.get(phase) or []:
            if isinstance(obs, dict):
                obs.setdefault("round", 0)
    for summary in data.get("summaries") or []:
        if isinstance(summary, dict):
            side, index = summary.get("phase"), summary.get("point_index")
            derived = summarize(side, index,  # type: ignore[arg-type]
                                _samples(data, str(side), index) or [1.0], STOP_FIXED, None,
                                MEDIAN_NORMAL_Z)
            summary.setdefault("median_half_width", derived.median_half_width)
            summary.setdefault("stop", STOP_FIXED)
            summary.setdefault("canary_spread", None)
    env = data.get("environment")
    if isinstance(env, dict):
        env.setdefault("cpu_placement", None)
    data.setdefault("rounds", [])
    data.setdefault("host_canary", None)
    data.setdefault("observer_cost", None)


def _v5_to_v6(data: dict) -> None:
    """No GPU clock was read before v6; the decode policy stays steady_step (what it was);
    the median's interval was the normal one."""
    policy = data.get("measurement_policy")
    if isinstance(policy, dict):
        policy.setdefault("median_interval", MEDIAN_NORMAL_Z)
    for phase in ("prefill", "decode"):
        for obs in data.get(phase) or []:
            if isinstance(obs, dict):
                obs.setdefault("gpu_clock", None)


def _v6_to_v7(data: dict) -> None:
    """No mixed phase before v7: no mixed point, observation or policy."""
    data.setdefault("mixed", [])
    for name in ("grid", "measurement_policy"):
        block = data.get(name)
        if isinstance(block, dict):
            block.setdefault("mixed", [] if name == "grid" else None)


def upgrade(data: dict) -> tuple[dict, str]:
    """The current shape of a legacy artifact, and its legacy marker. Raises LegacyError when
    the document does not fit its label, ValueError when its digests do not fit it. Fields
    present are never overwritten: the upgrade only adds what the old format lacked."""
    version = data["schema_version"]
    marker = LEGACY_SCHEMA_VERSIONS[version]
    errors = label_errors(data, version)
    if errors:
        raise LegacyError(errors)
    _check_raw_digests(data)
    data = copy.deepcopy(data)
    if version == 1:
        _v1_to_v2(data)
    if version < 3:
        _unverified_prefill(data)
        _run_acceptance_from_step(data)
    if version < 4:
        _v3_to_v4(data)
    if version < 5:
        _v4_to_v5(data)
    if version < 6:
        _v5_to_v6(data)
    _v6_to_v7(data)
    data["schema_version"] = SCHEMA_VERSION
    # The upgrade filled in fields; the raw digests were checked above.
    data["integrity"] = dict(data["integrity"], identity_digest=digest(data["identity"]),
                             kv_capacity_digest=digest(data["kv_capacity"]),
                             grid_digest=digest(data["grid"]))
    return data, marker
