"""Real checkpoints (issue 25): random weights written locally in a Hugging Face cache layout
(tests/checkpoints.py), loaded by vLLM's own loader through the pytest options; and what a
user gets wrong about a checkpoint pair, refused before an engine starts, one line each,
naming the option and the value. `sdbench collect` on the same checkpoints, with its
export, is tests/test_cli.py::test_collect_writes_a_valid_artifact_from_user_checkpoints."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pytest_sdbench.artifact import validate_path
from pytest_sdbench.cli import main
from pytest_sdbench.engine.model_files import safetensors_shapes
from pytest_sdbench.engine.presets import PRESETS
from pytest_sdbench.run.inputs import read_inputs
from pytest_sdbench.run.options import InputError

from .checkpoints import DRAFT_VOCAB, write_draft

TINY = PRESETS["tiny"]


def test_the_checkpoints_lie_in_a_cache_layout_as_the_hub_writes_it(real_checkpoints):
    """Each snapshot folder is named by its commit, which refs/main names; its files are
    links to content-addressed blobs; the target holds transformers' key names (tied
    embeddings: no lm_head), the draft the EAGLE3 reference layout with a smaller vocabulary
    and its mapping (no embed_tokens: it shares the target's)."""
    target, draft = real_checkpoints
    for snapshot in (target, draft):
        assert re.fullmatch(r"[0-9a-f]{40}", snapshot.commit)
        assert snapshot.path.name == snapshot.commit
        assert snapshot.cache_folder.name == "models--" + snapshot.repo.replace("/", "--")
        assert (snapshot.cache_folder / "refs" / "main").read_text() == snapshot.commit
        for file in snapshot.path.iterdir():
            assert file.is_symlink()
            assert file.resolve().parent == snapshot.cache_folder / "blobs"
    assert sorted(p.name for p in target.path.iterdir()) == [
        "config.json", "generation_config.json", "model.safetensors"]
    config = json.loads((target.path / "config.json").read_text())
    assert "transformers_version" in config
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    shapes = safetensors_shapes([target.path / "model.safetensors"])
    assert shapes["model.embed_tokens.weight"] == (TINY.vocab_size, TINY.hidden_size)
    assert "lm_head.weight" not in shapes
    assert sum(name.endswith(".self_attn.q_norm.weight") for name in shapes) == \
        TINY.num_hidden_layers
    head = json.loads((draft.path / "config.json").read_text())
    small = DRAFT_VOCAB["tiny"]
    assert (head["vocab_size"], head["draft_vocab_size"]) == (TINY.vocab_size, small)
    shapes = safetensors_shapes([draft.path / "model.safetensors"])
    assert shapes["fc.weight"] == (TINY.hidden_size, 3 * TINY.hidden_size)
    assert shapes["midlayer.self_attn.q_proj.weight"] == (
        TINY.num_attention_heads * TINY.head_dim, 2 * TINY.hidden_size)
    assert shapes["lm_head.weight"] == (small, TINY.hidden_size)
    assert (shapes["d2t"], shapes["t2d"]) == ((small,), (TINY.vocab_size,))
    assert not any("embed_tokens" in name for name in shapes)
    from safetensors.torch import load_file
    tensors = load_file(draft.path / "model.safetensors")
    import torch
    targets = torch.arange(small) + tensors["d2t"]
    assert bool((targets[1:] > targets[:-1]).all())   # distinct target ids, in order
    assert int(targets[-1]) < TINY.vocab_size
    assert torch.equal(tensors["t2d"].nonzero().flatten(), targets)


# ---- refusals, before any engine starts ---------------------------------------------------

def _copy(snapshot: Path, to: Path, config: dict | None = None, weights: bool = True) -> Path:
    """The snapshot's files as plain files in `to`, the config edited, the weights kept or
    left out."""
    to.mkdir(parents=True)
    for file in snapshot.iterdir():
        if weights or file.suffix != ".safetensors":
            shutil.copyfile(file, to / file.name)
    if config:
        data = json.loads((to / "config.json").read_text())
        (to / "config.json").write_text(json.dumps({**data, **config}))
    return to


def _cases(tmp_path: Path, real_checkpoints) -> dict[str, tuple[list[str], str]]:
    """case -> (collect arguments with {opt} for the option prefix, the one line refused).
    The line's options are spelled {opt}model, {opt}draft, ... ('--' or '--sdbench-')."""
    target, draft = real_checkpoints
    t, d = str(target.path), str(draft.path)
    wide = _copy(draft.path, tmp_path / "wide-draft", {"hidden_size": 512})
    other_vocab = _copy(draft.path, tmp_path / "vocab-draft", {"vocab_size": 8192})
    large = _copy(draft.path, tmp_path / "large-draft", {"draft_vocab_size": 8192})
    unmapped = write_draft(tmp_path / "unmapped", mapping=False).path
    empty = _copy(target.path, tmp_path / "config-only", weights=False)
    renamed = _copy(target.path, tmp_path / "models--sdbench--renamed" / "snapshots" / "main")
    wrong_rev = "0" * 40
    return {
        "draft hidden size": (
            ["{opt}model", t, "{opt}draft", str(wide)],
            f"{{opt}}draft: hidden_size=512 in {wide}/config.json does not fit the target's "
            f"hidden_size=256 ({{opt}}model {t}): the draft's fc reads the target's hidden "
            "states"),
        "draft vocabulary": (
            ["{opt}model", t, "{opt}draft", str(other_vocab)],
            f"{{opt}}draft: vocab_size=8192 in {other_vocab}/config.json does not fit the "
            f"target's vocab_size=4096 ({{opt}}model {t}): the draft proposes the target's "
            "token ids"),
        "draft vocabulary larger than the target's": (
            ["{opt}model", t, "{opt}draft", str(large)],
            f"{{opt}}draft: draft_vocab_size=8192 in {large}/config.json does not fit the "
            f"target's vocab_size=4096 ({{opt}}model {t}): a draft vocabulary is a part of "
            "the target's"),
        "smaller draft vocabulary without its mapping": (
            ["{opt}model", t, "{opt}draft", str(unmapped)],
            f"{{opt}}draft: draft_vocab_size=1024 in {unmapped}/config.json is smaller than "
            "the target's vocab_size=4096, but its weights hold no d2t tensor mapping draft "
            "ids to target ids (vLLM would propose target id d for draft id d)"),
        "folder without weights": (
            ["{opt}model", str(empty), "{opt}draft", d],
            f"{{opt}}model: {str(empty)!r} holds no weights (*.safetensors, *.bin or *.pt) "
            "for load_format 'auto'; give the checkpoint folder with its weights, or "
            "{opt}engine-arg load_format=dummy for random ones"),
        "snapshot folder not named by a commit": (
            ["{opt}model", str(renamed), "{opt}draft", d],
            f"{{opt}}model: {str(renamed)!r} sits in a Hugging Face cache's snapshots/ "
            "folder, but its name 'main' is not a 40-hex commit: give the folder "
            "snapshots/<commit>/ (the cache's refs/ name it)"),
        "revision against the snapshot's commit": (
            ["{opt}model", t, "{opt}draft", d, "{opt}target-revision", wrong_rev],
            f"{{opt}}target-revision: {wrong_rev!r} contradicts the commit {target.commit} "
            f"of the cache snapshot {{opt}}model {t}"),
    }


def _spelled(items: list[str], prefix: str) -> list[str]:
    return [item.replace("{opt}", prefix) for item in items]


def test_the_cli_refuses_a_bad_pair_in_one_line_before_the_engine(tmp_path, real_checkpoints,
                                                                   capsys, monkeypatch):
    from pytest_sdbench.engine import launch
    monkeypatch.setattr(launch, "start_engine", lambda spec: pytest.fail("an engine started"))
    for case, (args, line) in _cases(tmp_path, real_checkpoints).items():
        out = tmp_path / "out"
        code = main(["collect", *_spelled(args, "--"), "--out", str(out)])
        err = capsys.readouterr().err.splitlines()
        assert (code, err) == (2, ["sdbench collect: " + line.replace("{opt}", "--")]), case
        assert not out.exists(), case


def test_the_pytest_options_refuse_the_same_pairs(tmp_path, real_checkpoints):
    """What the plugin checks at configure time (a usage error, exit 4: test_faults.py
    shows the plugin's side), spelled as pytest spells the options."""
    for case, (args, line) in _cases(tmp_path, real_checkpoints).items():
        spelled = _spelled(args, "--sdbench-")
        values = {name.removeprefix("--sdbench-").replace("-", "_"): value
                  for name, value in zip(spelled[::2], spelled[1::2], strict=True)}
        with pytest.raises(InputError) as refused:
            read_inputs(values, cli=False)
        assert str(refused.value) == line.replace("{opt}", "--sdbench-"), case


def test_a_dummy_load_needs_no_weights(tmp_path, real_checkpoints, monkeypatch):
    """load_format=dummy (an engine argument, or the engine-config file's) reads no file:
    a config-only folder passes the weight check."""
    from pytest_sdbench.engine import model_pair as checkpoints
    monkeypatch.setattr(checkpoints, "vllm_architectures", lambda: None)
    target, draft = real_checkpoints
    empty = _copy(target.path, tmp_path / "config-only", weights=False)
    values = {"model": str(empty), "draft": str(draft.path)}
    with pytest.raises(InputError, match="holds no weights"):
        read_inputs(values, cli=True)
    read_inputs({**values, "engine_arg": [("load_format", "dummy")]}, cli=True)
    read_inputs({**values, "engine_config": {"load_format": "DUMMY"}}, cli=True)


def test_what_a_folder_says_about_itself(tmp_path):
    """engine/checkpoint.py on constructed folders: the cache commit at any depth below a
    snapshot, a misnamed snapshot only right under a cache repository's snapshots/, the
    weight files each load format reads, headers that are not safetensors."""
    from pytest_sdbench.engine import model_files as checkpoint
    commit = "ab" * 20
    sub = tmp_path / "models--org--name" / "snapshots" / commit / "draft"
    sub.mkdir(parents=True)
    assert checkpoint.snapshot_commit(sub) == checkpoint.snapshot_commit(sub.parent) == commit
    assert checkpoint.snapshot_commit(tmp_path) is None
    assert checkpoint.misnamed_snapshot(sub.parent) is None
    assert checkpoint.misnamed_snapshot(sub) is None
    main_ = tmp_path / "models--org--name" / "snapshots" / "main"
    main_.mkdir()
    assert checkpoint.misnamed_snapshot(main_) == "main"
    (tmp_path / "mine" / "snapshots" / "v1").mkdir(parents=True)   # not a cache repository
    assert checkpoint.misnamed_snapshot(tmp_path / "mine" / "snapshots" / "v1") is None
    (sub / "pytorch_model.bin").write_bytes(b"")
    (sub / "extra.pt").write_bytes(b"")
    assert checkpoint.weight_files(sub, "auto") == [sub / "pytorch_model.bin"]
    assert checkpoint.weight_files(sub, "safetensors") == []
    assert checkpoint.weight_files(sub, "pt") == [sub / "extra.pt"]
    assert checkpoint.weight_files(sub, "dummy") is None
    assert checkpoint.weight_files(sub, "gguf") is None
    bad = sub / "model.safetensors"
    for content in (b"", b"\x01", (2 ** 40).to_bytes(8, "little") + b"{}",
                    (2).to_bytes(8, "little") + b"[]"):
        bad.write_bytes(content)
        with pytest.raises(ValueError, match=str(bad)):
            checkpoint.safetensors_shapes([bad])
    assert checkpoint.weight_files(sub, "auto") == [bad]   # safetensors first, as vLLM's


def test_an_unreadable_draft_header_is_refused_naming_the_file(tmp_path, real_checkpoints):
    target, draft = real_checkpoints
    broken = _copy(draft.path, tmp_path / "broken-draft", weights=False)
    (broken / "model.safetensors").write_bytes(b"\x00" * 4)
    with pytest.raises(InputError) as refused:
        read_inputs({"model": str(target.path), "draft": str(broken)}, cli=True)
    assert str(refused.value) == (f"--draft: {broken}/model.safetensors: not a safetensors "
                                  "file (header length -1)")


# ---- the pytest options on real checkpoints, through vLLM's loader -------------------------

REAL_CHECKPOINT_TEST = """
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from pytest_sdbench.wire.contract import STATUS_COMPLETE
from pytest_sdbench.engine import compat

EXPECTED = json.loads(Path("expected.json").read_text())


def test_profile_of_real_checkpoints(sdbench_collection, sdbench_engine):
    a = sdbench_collection.artifact
    assert a.status == STATUS_COMPLETE
    for role in ("target", "draft"):
        found, want = getattr(a.identity, role), EXPECTED[role]
        assert found.revision.value == want["commit"]
        assert found.revision.source == f"hf cache snapshot folder name ({want['path']})"
        assert found.config_digest.value == want["config_digest"]
        assert found.load_format.value == "auto"
    assert a.identity.acceptance_control.value == "natural"
    runner = compat.worker(sdbench_engine.llm).model_runner
    head = runner.drafter.model
    # vLLM read the draft's token mapping from disk (without it the mapping stays zeros)
    d2t = load_file(Path(EXPECTED["draft"]["path"]) / "model.safetensors")["d2t"]
    assert torch.equal(head.draft_id_to_target_id.cpu(), d2t)
    # and the target's weights (no dummy): its embedding, which the draft shares
    embed = load_file(Path(EXPECTED["target"]["path"]) / "model.safetensors")[
        "model.embed_tokens.weight"]
    assert torch.equal(head.model.embed_tokens.weight.cpu(), embed)
"""


@pytest.mark.slow
@pytest.mark.sdbench_engine
def test_pytest_options_profile_real_checkpoints(pytester, real_checkpoints):
    import hashlib
    target, draft = real_checkpoints
    expected = {role: {"path": str(s.path), "commit": s.commit, "config_digest": "sha256:" +
                       hashlib.sha256((s.path / "config.json").read_bytes()).hexdigest()}
                for role, s in (("target", target), ("draft", draft))}
    (pytester.path / "expected.json").write_text(json.dumps(expected))
    (pytester.path / "grid.json").write_text(json.dumps({
        "prefill": [{"batch_size": 1, "new_tokens": 48, "cached_prefix_tokens": 0}],
        "decode": [{"batch_size": 2, "context_tokens": 64, "draft_depth": 3,
                    "acceptance_length": None}]}))
    pytester.makepyfile(test_real=REAL_CHECKPOINT_TEST)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--sdbench-model={target.path}",
        f"--sdbench-draft={draft.path}", "--sdbench-grid=grid.json",
        "--sdbench-artifact-dir=out", "--sdbench-engine-arg=max_model_len=1024",
        "--sdbench-engine-arg=kv_cache_memory_bytes=268435456",
        # eager: vLLM's default torch.compile on a 2-core CPU adds about 45 s to the start
        "--sdbench-engine-arg=enforce_eager=true", timeout=600)
    result.assert_outcomes(passed=1)
    (artifact,) = (pytester.path / "out").glob("sdbench-agg-*.json")
    assert validate_path(artifact).ok
