"""Model presets built locally: a Qwen3 target and a one-layer EAGLE3 draft of equal width,
written as config.json files and loaded with dummy weights. No hub access, ever.

The draft shares the target's embedding and LM head under load_format="dummy", so hidden size,
head shape and vocabulary stay equal to the target's. The three aux layers are named
explicitly: a few-layer target makes vLLM's default (2, n//2, n-3) collapse to two ids.

The target folder also holds a word-level tokenizer over the preset's vocabulary (HF
`tokenizers` WordLevel, whitespace split, written here as its JSON, no library needed), so
that `vllm serve TARGET` and `vllm bench serve --dataset-name random --tokenizer TARGET` run
with no download: id i is the word "t<i>" and ids 0-2 are the unk, bos and eos tokens (the
config's bos and eos ids), whose text is no prefix or substring of another token. A random
id decodes to one word and that word encodes back to the one id. Engines that start with
skip_tokenizer_init never read it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..wire.files import atomic_write_text

DRAFT_ARCHITECTURE = "LlamaForCausalLMEagle3"
TARGET_ARCHITECTURE = "Qwen3ForCausalLM"


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    aux_layer_ids: tuple[int, int, int]
    max_position_embeddings: int = 40960
    tie_word_embeddings: bool = True     # the target's (Qwen3-8B's are untied)
    # The oracle's engine limits for the preset (dropped with vllm_defaults): the KV cache
    # and batch budget of a real-width model are kept small so that its oracle fits a
    # 3.6 GiB VRAM mark.
    engine_limits: tuple[tuple[str, int], ...] = ()

    def common(self) -> dict:
        return dict(
            hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads, head_dim=self.head_dim,
            vocab_size=self.vocab_size, max_position_embeddings=self.max_position_embeddings,
            rms_norm_eps=1e-6, rope_theta=1_000_000.0, torch_dtype="bfloat16",
            bos_token_id=1, eos_token_id=2, hidden_act="silu",
        )

    def target_config(self) -> dict:
        return dict(self.common(), architectures=[TARGET_ARCHITECTURE], model_type="qwen3",
                    num_hidden_layers=self.num_hidden_layers,
                    tie_word_embeddings=self.tie_word_embeddings,
                    attention_bias=False)

    def draft_config(self) -> dict:
        aux = list(self.aux_layer_ids)
        # vLLM 0.26 reads the top-level key; newer releases also read eagle_config.
        return dict(self.common(), architectures=[DRAFT_ARCHITECTURE], model_type="llama",
                    num_hidden_layers=1, draft_vocab_size=self.vocab_size,
                    tie_word_embeddings=False, eagle_aux_hidden_state_layer_ids=aux,
                    eagle_config={"eagle_aux_hidden_state_layer_ids": aux,
                                  "use_aux_hidden_state": True})


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("tiny", "4-layer Qwen3 (hidden 256) + 1-layer EAGLE3 draft; sized for CPU",
               hidden_size=256, intermediate_size=512, num_hidden_layers=4,
               num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=4096,
               aux_layer_ids=(1, 2, 3), max_position_embeddings=4096,
               engine_limits=(("kv_cache_memory_bytes", 1 << 30), ("max_num_seqs", 16),
                              ("max_num_batched_tokens", 4096), ("max_model_len", 4096))),
        Preset("qwen3-0.6b", "Qwen3-0.6B's public architecture + matching 1-layer EAGLE3 head",
               hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
               num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
               aux_layer_ids=(2, 14, 25),
               engine_limits=(("kv_cache_memory_bytes", 384 << 20), ("max_num_seqs", 8),
                              ("max_num_batched_tokens", 2048), ("max_model_len", 2048))),
        # Production-sized: a step's time is the GPU's (decode 8 ms at B=1 to 29 ms at B=64
        # and 8k context on an H200), not the host's; about 16 GiB of bf16 weights.
        Preset("qwen3-8b", "Qwen3-8B's public architecture + matching 1-layer EAGLE3 head; "
               "GPU-bound steps (about 16 GiB of weights)",
               hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
               num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
               aux_layer_ids=(2, 18, 33), tie_word_embeddings=False,
               engine_limits=(("kv_cache_memory_bytes", 2 << 30), ("max_num_seqs", 8),
                              ("max_num_batched_tokens", 2048), ("max_model_len", 2048))),
    )
}
DEFAULT_PRESET = "tiny"
AUTO_PRESET = "auto"   # tiny on CPU, qwen3-0.6b on CUDA
PRESET_FOR_DEVICE = {"cpu": "tiny", "cuda": "qwen3-0.6b"}


def config_text(config: dict) -> str:
    """The exact text of a preset's config.json: its sha256 is the identity's config digest."""
    return json.dumps(config, indent=2, sort_keys=True)


def config_texts() -> dict[str, tuple[str, str]]:
    """sha256 -> (config.json text, which preset and role) for every preset's two configs:
    an export ships the config a preset's artifact names by digest."""
    texts = {}
    for preset in PRESETS.values():
        for role, config in (("target", preset.target_config()),
                             ("draft", preset.draft_config())):
            text = config_text(config)
            texts[hashlib.sha256(text.encode()).hexdigest()] = (text, f"preset {preset.name} "
                                                                      f"{role} config")
    return texts


def _write_json(path: Path, data: dict) -> None:
    """Atomically: pytest-xdist workers may write the same preset at the same moment (same
    content; the last rename wins)."""
    _write_text(path, config_text(data))


def _write_text(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        atomic_write_text(path, text)


# The tokenizer's special tokens, by id (bos and eos as in Preset.common). Their text holds
# no "t<digits>" word and no word holds theirs.
UNK_TOKEN, BOS_TOKEN, EOS_TOKEN = "<unk>", "<s>", "</s>"
SPECIAL_TOKENS = (UNK_TOKEN, BOS_TOKEN, EOS_TOKEN)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def token_text(token_id: int) -> str:
    """The word of a preset tokenizer's id (ids 0-2: the special tokens)."""
    return SPECIAL_TOKENS[token_id] if token_id < len(SPECIAL_TOKENS) else f"t{token_id}"


def tokenizer_files(preset: Preset) -> dict[str, str]:
    """The text of each tokenizer file for the preset: tokenizer.json (WordLevel model,
    Whitespace pre-tokenizer, no normalizer, no post-processor: nothing is added to a
    prompt, so a prompt of N words is N tokens; no decoder: tokens are joined by spaces),
    tokenizer_config.json (PreTrainedTokenizerFast, for transformers.AutoTokenizer) and
    special_tokens_map.json."""
    vocab = {token_text(i): i for i in range(preset.vocab_size)}
    added = [{"id": i, "content": text, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, text in enumerate(SPECIAL_TOKENS)]
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
                 "normalizer": None, "pre_tokenizer": {"type": "Whitespace"},
                 "post_processor": None, "decoder": None,
                 "model": {"type": "WordLevel", "vocab": vocab, "unk_token": UNK_TOKEN}}
    specials = {"unk_token": UNK_TOKEN, "bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **specials,
              "model_max_length": preset.max_position_embeddings,
              "clean_up_tokenization_spaces": False, "add_bos_token": False,
              "add_eos_token": False,
              "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                                       for t in added}}
    return {"tokenizer.json": json.dumps(tokenizer, separators=(",", ":")),
            "tokenizer_config.json": json.dumps(config, indent=2, sort_keys=True),
            "special_tokens_map.json": json.dumps(specials, indent=2, sort_keys=True)}


def materialize(preset_name: str, root: Path) -> tuple[Path, Path]:
    """Write the preset's target and draft config directories under root, the target's with
    the preset's tokenizer (tokenizer_files); return both paths."""
    if preset_name not in PRESETS:
        raise ValueError(f"model preset: unknown value {preset_name!r}; "
                         f"choose one of {sorted(PRESETS)}")
    preset = PRESETS[preset_name]
    digest = hashlib.sha256(json.dumps([preset.target_config(), preset.draft_config()],
                                       sort_keys=True).encode()).hexdigest()[:12]
    base = root / f"{preset.name}-{digest}"
    target, draft = base / "target", base / "draft"
    target.mkdir(parents=True, exist_ok=True)
    draft.mkdir(parents=True, exist_ok=True)
    _write_json(target / "config.json", preset.target_config())
    _write_json(draft / "config.json", preset.draft_config())
    for name, text in tokenizer_files(preset).items():
        _write_text(target / name, text)
    return target, draft
