"""Real checkpoints with random weights, written locally (no download): a Qwen3 target as
`transformers` saves it (config.json, generation_config.json, model.safetensors) and an
EAGLE3 draft in the reference layout that vLLM's llama_eagle3 loader reads (`midlayer.*`,
`fc`, `norm`, its own `lm_head` over a draft vocabulary, `d2t`/`t2d` mapping it onto the
target's; no `embed_tokens`: the draft shares the target's). Each lies in a Hugging Face
cache-style repository, `models--ORG--NAME/{blobs,refs/main,snapshots/<commit>/}`, the
snapshot's files linked to their blobs as the hub's cache does.

Shapes come from a preset (pytest_sdbench/engine/presets.py): `tiny` for CPU tests,
`qwen3-0.6b` for the H200 (scripts/plans/real-checkpoint.txt runs `python -m tests.checkpoints`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pytest_sdbench.engine.presets import PRESETS, Preset, config_text

TARGET_REPO, DRAFT_REPO = "sdbench/{preset}-qwen3-random", "sdbench/{preset}-eagle3-random"
DRAFT_VOCAB = {"tiny": 1024, "qwen3-0.6b": 32000}   # smaller than the target's, as drafts are
INIT_STD = 0.02   # transformers' initializer_range


@dataclass(frozen=True)
class Snapshot:
    """A checkpoint as the hub's cache holds it."""
    repo: str       # ORG/NAME
    path: Path      # .../models--ORG--NAME/snapshots/<commit>
    commit: str     # 40 hex

    @property
    def cache_folder(self) -> Path:
        return self.path.parents[1]


def cache_snapshot(root: Path, repo: str, folder: Path) -> Snapshot:
    """Move the files of `folder` into the cache layout under root: each file a blob named
    by its sha256, linked from snapshots/<commit>/ (the commit: a sha1 over the file names
    and blob digests, stable for the same content); refs/main holds the commit."""
    org, name = repo.split("/")
    base = root / f"models--{org}--{name}"
    blobs = base / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    entries = {}
    for file in sorted(folder.iterdir()):
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        blob = blobs / digest
        if not blob.exists():
            shutil.move(file, blob)
        entries[file.name] = digest
    commit = hashlib.sha1(json.dumps(entries, sort_keys=True).encode()).hexdigest()
    snapshot = base / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for file_name, digest in entries.items():
        link = snapshot / file_name
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(blobs / digest, snapshot))
    (base / "refs").mkdir(exist_ok=True)
    (base / "refs" / "main").write_text(commit)
    return Snapshot(repo, snapshot, commit)


def target_state(preset: Preset, seed: int, out: Path) -> None:
    """The Qwen3 target with transformers' own random initialisation, saved by
    save_pretrained in bfloat16 (tied embeddings: no lm_head.weight)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    config = {k: v for k, v in preset.target_config().items() if k != "torch_dtype"}
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(Qwen3Config(**config)).to(torch.bfloat16)
    model.save_pretrained(out)


def draft_tensors(preset: Preset, draft_vocab: int, seed: int, mapping: bool = True) -> dict:
    """The EAGLE3 head's tensors by their checkpoint names. The draft vocabulary is a random
    sorted subset of the target's; `d2t[d]` is the offset from draft id d to its target id
    (target = d + d2t[d]) and `t2d` marks the target ids the draft can propose."""
    import torch
    g = torch.Generator().manual_seed(seed)
    hidden, heads, kv_heads = preset.hidden_size, preset.num_attention_heads, \
        preset.num_key_value_heads
    head_dim, inter, vocab = preset.head_dim, preset.intermediate_size, preset.vocab_size

    def linear(rows: int, cols: int) -> torch.Tensor:
        return (torch.randn(rows, cols, generator=g) * INIT_STD).to(torch.bfloat16)

    def norm(size: int) -> torch.Tensor:
        return torch.ones(size, dtype=torch.bfloat16)
    tensors = {
        "midlayer.hidden_norm.weight": norm(hidden),
        "midlayer.input_layernorm.weight": norm(hidden),
        "midlayer.post_attention_layernorm.weight": norm(hidden),
        # the first (only) layer reads the embedding and the hidden state side by side
        "midlayer.self_attn.q_proj.weight": linear(heads * head_dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": linear(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": linear(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": linear(hidden, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": linear(inter, hidden),
        "midlayer.mlp.up_proj.weight": linear(inter, hidden),
        "midlayer.mlp.down_proj.weight": linear(hidden, inter),
        "norm.weight": norm(hidden),
        "fc.weight": linear(hidden, len(preset.aux_layer_ids) * hidden),
        "lm_head.weight": linear(draft_vocab, hidden),
    }
    if mapping and draft_vocab != vocab:
        ids = torch.randperm(vocab, generator=g)[:draft_vocab].sort().values
        tensors["d2t"] = ids - torch.arange(draft_vocab)
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[ids] = True
        tensors["t2d"] = t2d
    return tensors


def draft_config(preset: Preset, draft_vocab: int) -> dict:
    return {**preset.draft_config(), "draft_vocab_size": draft_vocab}


def write_target(root: Path, preset_name: str = "tiny", seed: int = 0) -> Snapshot:
    preset = PRESETS[preset_name]
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as staging:
        target_state(preset, seed, Path(staging))
        return cache_snapshot(root, TARGET_REPO.format(preset=preset_name), Path(staging))


def write_draft(root: Path, preset_name: str = "tiny", draft_vocab: int | None = None,
                seed: int = 1, mapping: bool = True, repo: str | None = None) -> Snapshot:
    from safetensors.torch import save_file
    preset = PRESETS[preset_name]
    vocab = draft_vocab or DRAFT_VOCAB[preset_name]
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as staging:
        folder = Path(staging)
        (folder / "config.json").write_text(config_text(draft_config(preset, vocab)))
        save_file(draft_tensors(preset, vocab, seed, mapping), folder / "model.safetensors",
                  metadata={"format": "pt"})
        return cache_snapshot(root, repo or DRAFT_REPO.format(preset=preset_name), folder)


def write_pair(root: Path, preset_name: str = "tiny",
               draft_vocab: int | None = None) -> tuple[Snapshot, Snapshot]:
    """A target and its EAGLE3 draft (draft vocabulary DRAFT_VOCAB[preset] unless given;
    the target's own size writes no mapping) under root."""
    root.mkdir(parents=True, exist_ok=True)
    return write_target(root, preset_name), write_draft(root, preset_name, draft_vocab)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="write a random-weight target + EAGLE3 draft "
                                     "in a Hugging Face cache layout; print both snapshots")
    parser.add_argument("--preset", default="tiny", choices=sorted(DRAFT_VOCAB))
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--draft-vocab", type=int, help="the draft's vocabulary (default: "
                        f"{DRAFT_VOCAB}; the target's size: the same shapes as the preset's "
                        "dummy-weight draft, no mapping)")
    args = parser.parse_args(argv)
    target, draft = write_pair(args.root, args.preset, args.draft_vocab)
    print(json.dumps({"target": str(target.path), "target_commit": target.commit,
                      "draft": str(draft.path), "draft_commit": draft.commit}))


if __name__ == "__main__":
    main()
