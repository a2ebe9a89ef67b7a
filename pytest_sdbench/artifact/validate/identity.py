"""The speculative-decoding and identity rules: the method, K and acceptance against the
identity; the device against its name, attention backend and graph modes; the settings."""

from __future__ import annotations

from ...wire.contract import (
    ACCEPTANCE_SYNTHETIC,
    ATTENTION_BACKENDS_BY_DEVICE,
    CUDAGRAPH_NONE,
    DEVICE_CPU,
    DEVICE_CUDA,
    DEVICES_WITH_SYNTHETIC_ACCEPTANCE,
    GPU_NAME_PREFIXES,
    IDENTITY_RESOLVED,
    SPEC_METHOD_EAGLE3,
    SPEC_METHOD_NONE,
)
from ...wire.identity import IdentityField
from ...wire.model import Artifact
from ...wire.typed import digest
from .helpers import V1, Err, is_gpu_name, resolved, resolved_int

# ---- speculative decoding and the identity ---------------------------------------------

# The identity facts that say which draft an EAGLE3 run ran: always read from its config.
DRAFT_NAMED_BY = ("model", "architecture")


def check_speculative(a: Artifact, err: Err, legacy) -> None:
    spec, ident = a.speculative, a.identity
    if legacy == V1:
        if spec.method != SPEC_METHOD_NONE or spec.draft_depth != 0:
            err(f"speculative: method {spec.method!r}, K={spec.draft_depth} in an "
                f"autoregressive artifact ({V1})")
        return
    if spec.method != SPEC_METHOD_EAGLE3:
        err(f"speculative.method: {spec.method!r}; only {V1} artifacts measure no "
            f"speculative decoding, every other one measures {SPEC_METHOD_EAGLE3!r}")
    if resolved(ident.method) != spec.method:
        err(f"identity.method: {resolved(ident.method)!r} differs from speculative.method "
            f"{spec.method!r}")
    if spec.method == SPEC_METHOD_EAGLE3:
        for name in DRAFT_NAMED_BY:
            fact = getattr(ident.draft, name)
            if fact.status != IDENTITY_RESOLVED:
                err(f"identity.draft.{name}: unresolved ({fact.reason!r}); an "
                    f"{SPEC_METHOD_EAGLE3} run names the draft model it ran")
    if spec.draft_depth < 1:
        err(f"speculative.draft_depth: must be >= 1 under {SPEC_METHOD_EAGLE3}, got "
            f"{spec.draft_depth}")
    if resolved(ident.draft_depth) != spec.draft_depth or type(resolved(ident.draft_depth)) \
            is not int:
        err(f"speculative.draft_depth: {spec.draft_depth} differs from identity.draft_depth "
            f"{resolved(ident.draft_depth)!r}")
    control = spec.acceptance_control
    if resolved(ident.acceptance_control) != control:
        err(f"identity.acceptance_control: {resolved(ident.acceptance_control)!r} differs from "
            f"speculative.acceptance_control {control!r}")
    synthetic = control == ACCEPTANCE_SYNTHETIC
    al = spec.synthetic_acceptance_length
    if synthetic != (al is not None):
        err(f"speculative.synthetic_acceptance_length: {al} under {control} acceptance "
            "(synthetic needs a number, natural needs null)")
    elif al is not None and not 1.0 <= al <= spec.draft_depth + 1:
        err(f"speculative.synthetic_acceptance_length: {al} is outside [1, K+1 = "
            f"{spec.draft_depth + 1}]")
    if synthetic and a.device not in DEVICES_WITH_SYNTHETIC_ACCEPTANCE:
        err(f"speculative.acceptance_control: {control!r} on a {a.device!r} run; vLLM's "
            f"synthetic acceptance runs on {', '.join(DEVICES_WITH_SYNTHETIC_ACCEPTANCE)} only")


def check_identity(a: Artifact, err: Err, legacy) -> None:
    _check_identity_fields(a.identity, "identity", err)
    if a.integrity.identity_digest != digest(a.identity):
        err(f"integrity.identity_digest: {a.integrity.identity_digest} does not match the "
            "identity; the execution identity was altered after the engine started")
    ident, device = a.identity, a.device
    if resolved(ident.device) != device:
        err(f"device: {device!r} differs from identity.device {resolved(ident.device)!r}")
    name = resolved(ident.device_name)
    if not isinstance(name, str) or not name:
        err(f"identity.device_name: must be a resolved name, got {name!r}")
    elif is_gpu_name(name) != (device == DEVICE_CUDA):
        err(f"identity.device_name: {name!r} on a {device!r} run; a GPU's name begins with "
            f"one of {', '.join(GPU_NAME_PREFIXES)}, a CPU's with none")
    backend = resolved(ident.attention_backend)
    for other, backends in ATTENTION_BACKENDS_BY_DEVICE.items():
        if other != device and backend in backends:
            err(f"identity.attention_backend: {backend!r} is a {other} backend, on a "
                f"{device!r} run")
    graphs = resolved(ident.cudagraph_mode)
    if device == DEVICE_CPU and graphs is not None and graphs != CUDAGRAPH_NONE:
        err(f"identity.cudagraph_mode: {graphs!r} on a {device!r} run; a CPU engine captures "
            "no CUDA graphs")
    pp = resolved_int(ident.pipeline_parallel_size)
    if pp is None or pp < 1:
        err("identity.pipeline_parallel_size: must be a resolved integer >= 1, got "
            f"{ident.pipeline_parallel_size.value!r}")
    _check_settings(a, err)


# Settings that are limits: a resolved one is a positive integer.
POSITIVE_SETTINGS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size",
                     "kv_cache_memory_bytes")
BOOLEAN_SETTINGS = ("enable_chunked_prefill", "enable_prefix_caching", "enforce_eager")


def _check_settings(a: Artifact, err: Err) -> None:
    """identity.settings against itself, the KV capacity and the device (unresolved settings,
    as in legacy artifacts, are not judged)."""
    settings, where = a.identity.settings, "identity.settings"
    for name in POSITIVE_SETTINGS:
        value = resolved(getattr(settings, name))
        if value is not None and (type(value) is not int or value <= 0):
            err(f"{where}.{name}: must be a positive integer, got {value!r}")
    for name in BOOLEAN_SETTINGS:
        value = resolved(getattr(settings, name))
        if value is not None and type(value) is not bool:
            err(f"{where}.{name}: must be a boolean, got {value!r}")
    block = resolved(settings.block_size)
    if block is not None and block != a.kv_capacity.block_size:
        err(f"{where}.block_size: {block!r} differs from kv_capacity.block_size "
            f"{a.kv_capacity.block_size}")
    share = resolved(settings.gpu_memory_utilization)
    if share is not None and (type(share) not in (int, float) or not 0 < share <= 1):
        err(f"{where}.gpu_memory_utilization: must lie in (0, 1], got {share!r}")
    sizes = resolved(settings.cudagraph_capture_sizes)
    if sizes is not None and (not isinstance(sizes, tuple) or any(s <= 0 for s in sizes)):
        err(f"{where}.cudagraph_capture_sizes: must be a list of positive integers, got "
            f"{sizes!r}")
    elif sizes and a.device == DEVICE_CPU:
        err(f"{where}.cudagraph_capture_sizes: {list(sizes)} on a {a.device!r} run; a CPU "
            "engine captures no CUDA graphs")
    graphs = resolved(a.identity.cudagraph_mode)
    if resolved(settings.enforce_eager) is True and graphs not in (None, CUDAGRAPH_NONE):
        err(f"identity.cudagraph_mode: {graphs!r} under {where}.enforce_eager true; an eager "
            f"engine's mode is {CUDAGRAPH_NONE!r}")


def _check_identity_fields(node, where: str, err: Err) -> None:
    if isinstance(node, IdentityField):
        if node.status == IDENTITY_RESOLVED:
            if node.value is None or not node.source or node.reason is not None:
                err(f"{where}: resolved fields need a value and a source and no reason, got "
                    f"value={node.value!r} source={node.source!r} reason={node.reason!r}")
            elif isinstance(node.value, str) and not node.value.strip():
                err(f"{where}: resolved to a blank string {node.value!r}; a resolved fact "
                    "names what was read (an unknown one is unresolved, with a reason)")
        elif not node.reason or node.value is not None:
            err(f"{where}: unresolved fields need a reason and no value, got "
                f"value={node.value!r} reason={node.reason!r}")
        return
    for name in getattr(node, "__dataclass_fields__", {}):
        _check_identity_fields(getattr(node, name), f"{where}.{name}", err)

