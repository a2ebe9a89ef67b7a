"""Model presets: written locally, equal widths for target and draft, safe to write at once."""

import json

import pytest


def test_presets_are_written_locally_and_concurrently_safe(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from pytest_sdbench.engine.presets import PRESETS, materialize
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: materialize("qwen3-0.6b", tmp_path), range(8)))
    target, draft = results[0]
    assert all(r == results[0] for r in results)
    target_cfg = json.loads((target / "config.json").read_text())
    draft_cfg = json.loads((draft / "config.json").read_text())
    preset = PRESETS["qwen3-0.6b"]
    assert target_cfg["num_hidden_layers"] == 28
    assert target_cfg["vocab_size"] == 151936
    assert draft_cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert draft_cfg["eagle_aux_hidden_state_layer_ids"] == list(preset.aux_layer_ids)
    assert len(set(preset.aux_layer_ids)) == 3  # three distinct aux layers
    for key in ("hidden_size", "head_dim", "vocab_size", "num_attention_heads"):
        assert draft_cfg[key] == target_cfg[key]
    assert sorted(p.name for p in target.iterdir()) == ["config.json",
                                                        "special_tokens_map.json",
                                                        "tokenizer.json",
                                                        "tokenizer_config.json"]
    assert sorted(p.name for p in draft.iterdir()) == ["config.json"]
    with pytest.raises(ValueError, match="model preset: unknown value 'huge'"):
        materialize("huge", tmp_path)


def test_a_preset_tokenizer_round_trips_random_ids_one_token_each(tmp_path):
    """`vllm serve` and `vllm bench serve --dataset-name random` read the preset's own
    tokenizer (no download): transformers loads it, random ids decode to one word each and
    encode back to the same ids, nothing is added to a prompt, and the special tokens are
    the config's bos and eos ids and appear in no other token."""
    import random

    from transformers import AutoTokenizer

    from pytest_sdbench.engine.presets import PRESETS, SPECIAL_TOKENS, materialize
    target, _ = materialize("tiny", tmp_path)
    config = json.loads((target / "config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(str(target), local_files_only=True)
    vocab = PRESETS["tiny"].vocab_size
    assert tokenizer.vocab_size == len(tokenizer) == vocab == config["vocab_size"]
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (config["bos_token_id"],
                                                                config["eos_token_id"])
    assert sorted(tokenizer.all_special_ids) == [0, 1, 2]
    assert tokenizer.num_special_tokens_to_add() == 0
    words = tokenizer.convert_ids_to_tokens(list(range(vocab)))
    for special in SPECIAL_TOKENS:
        assert [w for w in words if special in w or w in special] == [special]
    rng = random.Random(7)
    for length in (1, 2, 17, 1000):
        ids = [rng.randrange(len(SPECIAL_TOKENS), vocab) for _ in range(length)]
        text = tokenizer.decode(ids)
        assert len(text.split()) == length
        assert tokenizer(text).input_ids == ids
    # the special tokens are read as themselves, and skipped when decoding
    assert tokenizer("<s> t5 </s>").input_ids == [1, 5, 2]
    assert tokenizer.decode([1, 5, 2], skip_special_tokens=True) == "t5"
    # written again unchanged (the configs' digest names the folder)
    assert materialize("tiny", tmp_path)[0] == target
