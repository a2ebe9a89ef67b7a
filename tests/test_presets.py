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
    assert sorted(p.name for p in target.iterdir()) == ["config.json"]
    with pytest.raises(ValueError, match="model preset: unknown value 'huge'"):
        materialize("huge", tmp_path)
