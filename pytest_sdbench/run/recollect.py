"""The `sdbench collect` command that collects an artifact's engine again, with more rounds:
what a refusal that needs another collection (compare, on too few rounds) names. The
choices are the ones that made the artifact's engine (fidelity.match.spec_choices); the
spellings are the option table's (options.spelled)."""

from __future__ import annotations

import json
import shlex

from ..wire.model import Artifact
from .options import spelled
from .profile import ProfileUnusable, spec_choices


def collect_command(a: Artifact, repeats: int) -> str:
    """`sdbench collect ...` for the artifact's mode, models, K, acceptance, tensor
    parallelism, revisions and engine arguments, in `repeats` rounds. Its grid is the
    default one: a grid the user gave lives in a file the artifact does not name."""
    choices = _choices(a)
    words = ["sdbench", "collect", spelled("mode", True), a.mode]
    if choices.get("preset"):
        words += [spelled("preset", True), choices["preset"]]
        words += [spelled(flag, True) for flag in ("vllm-defaults", "cuda-graphs")
                  if choices.get(flag.replace("-", "_"))]
    else:
        words += [spelled("model", True), choices["model"], spelled("draft", True),
                  choices["draft"]]
    words += [spelled("k", True), str(choices["draft_depth"])]
    if choices.get("acceptance_length") is not None:
        words += [spelled("acceptance-length", True), f"{choices['acceptance_length']:g}"]
    tp = a.identity.tensor_parallel_size
    if tp.resolved and tp.value != 1:
        words += [spelled("tp", True), str(tp.value)]
    for option in ("target-revision", "draft-revision"):
        if choices.get(option.replace("-", "_")):
            words += [spelled(option, True), choices[option.replace("-", "_")]]
    for name, value in sorted(choices["user_engine_args"].items()):
        words += [spelled("engine-arg", True), f"{name}={json.dumps(value)}"]
    words += [spelled("repeats", True), str(repeats)]
    return shlex.join(words)


def _choices(a: Artifact) -> dict:
    """spec_choices; where the artifact's models are no preset's and their folders are not
    here, the folders it recorded (or DIR), for the user to point at. A legacy artifact
    that recorded no engine settings: its preset as the preset runs by default."""
    try:
        choices = spec_choices(a)
        if not a.identity.settings.max_num_seqs.resolved:   # legacy: no settings recorded,
            choices["vllm_defaults"] = choices["cuda_graphs"] = False   # the preset's own
        return choices
    except ProfileUnusable:
        paths = [model.value if model.resolved and model.value else "DIR"
                 for model in (a.identity.target.model, a.identity.draft.model)]
        return spec_choices(a, model=str(paths[0]), draft=str(paths[1]))
