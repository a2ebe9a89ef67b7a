"""The KV-capacity rules: the digest, the cache groups and draft layers, the ranks' blocks."""

from __future__ import annotations

from collections import Counter

from ...wire.model import Artifact
from ...wire.typed import digest
from .helpers import Err, older_than, resolved, resolved_int

# ---- KV capacity -------------------------------------------------------------------------

def check_kv(a: Artifact, err: Err, legacy) -> None:
    kv = a.kv_capacity
    if a.integrity.kv_capacity_digest != digest(kv):
        err(f"integrity.kv_capacity_digest: {a.integrity.kv_capacity_digest} does not match "
            "kv_capacity; the KV capacity was altered")
    for name in ("num_blocks", "block_size", "tokens"):
        if getattr(kv, name) <= 0:
            err(f"kv_capacity.{name}: must be > 0, got {getattr(kv, name)}")
    if not kv.source.strip():
        err(f"kv_capacity.source: must say where the capacity was read, got {kv.source!r}")
    if not kv.groups:
        err("kv_capacity.groups: empty; the engine's cache groups are missing")
    if len(kv.groups) == 1 and kv.tokens != kv.num_blocks * kv.block_size:
        err(f"kv_capacity.tokens: {kv.tokens} != num_blocks*block_size = "
            f"{kv.num_blocks * kv.block_size}")
    draft = set(kv.draft_layer_names)
    for i, group in enumerate(kv.groups):
        where = f"kv_capacity.groups[{i}]"
        if group.block_size != kv.block_size:
            err(f"{where}.block_size: {group.block_size} differs from kv_capacity.block_size "
                f"{kv.block_size}")
        if not group.layer_names:
            err(f"{where}.layer_names: empty; a cache group holds layers")
        if not group.spec_type.strip():
            err(f"{where}.spec_type: must name the group's KV cache spec, got "
                f"{group.spec_type!r}")
        want = [n for n in group.layer_names if n in draft]
        if list(group.draft_layers) != want:
            err(f"{where}.draft_layers: {list(group.draft_layers)} differs from the group's "
                f"layers among kv_capacity.draft_layer_names, {want}")
    grouped = Counter(n for g in kv.groups for n in g.layer_names)
    if sum(grouped.values()) != len(grouped):
        twice = sorted(n for n, count in grouped.items() if count > 1)
        err(f"kv_capacity.groups: layers {twice} are in more than one group")
    if kv.groups and not set(grouped) - draft:
        err(f"kv_capacity.groups: every layer ({len(grouped)}) is a draft layer; the target's "
            "layers are missing")
    if a.speculative.draft_depth > 0 and not kv.draft_layer_names:
        err("kv_capacity.draft_layer_names: empty; the draft's layers must be in the capacity")
    for name in kv.draft_layer_names:
        if name not in grouped:
            err(f"kv_capacity.draft_layer_names: {name!r} is in no cache group")
    if len(draft) != len(kv.draft_layer_names):
        err(f"kv_capacity.draft_layer_names: lists a layer twice ({list(kv.draft_layer_names)})")
    tp = resolved_int(a.identity.tensor_parallel_size)
    if not older_than(legacy, 4) and tp is not None and len(kv.rank_num_blocks) != tp:
        err(f"kv_capacity.rank_num_blocks: {len(kv.rank_num_blocks)} entries for "
            f"identity.tensor_parallel_size {tp}")
    for r, blocks in enumerate(kv.rank_num_blocks):
        if blocks != kv.num_blocks:
            err(f"kv_capacity.rank_num_blocks[{r}]: {blocks} differs from "
                f"kv_capacity.num_blocks {kv.num_blocks}")
    per_token = resolved(kv.bytes_per_token)
    if per_token is not None and (type(per_token) is not int or per_token <= 0):
        err(f"kv_capacity.bytes_per_token: must be a positive integer, got {per_token!r}")

