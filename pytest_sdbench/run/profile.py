"""An engine configured exactly as the profile's: its spec rebuilt from the artifact, and the
started engine's identity and settings checked against the artifact's, field by field.

The spec is rebuilt through the collector's own spec builder (engine.spec.engine_spec) from
the choices that made the artifact: the preset its configs' digests name (or the user's
checkpoints), K, the synthetic acceptance length, the engine arguments the user gave (the
artifact keeps them, identity.settings.user_engine_args), and whether the preset ran under
its oracle limits (read back from the effective settings). Passing every effective setting
back as an explicit engine argument instead would start a different engine in general
(vLLM derives some settings, CUDA-graph capture sizes among them, differently when they are
given), so the same choices are made again and the result is checked: every identity field
and effective setting must be equal, or the run is refused naming the field."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ..artifact import validate_path
from ..artifact.store import UnusableArtifact
from ..engine.presets import PRESETS, config_texts
from ..engine.spec import GRAPH_BATCHES
from ..wire.contract import DEVICE_CUDA
from ..wire.identity import ExecutionIdentity, IdentityField, ModelIdentity
from ..wire.model import Artifact

# Identity fields that name where a model was read, not what it is (its config digest does)
# or what the user asked (user_engine_args; the effective settings are compared instead).
NOT_COMPARED = ("target.model", "draft.model", "settings.user_engine_args")
# Compared only where both sides resolved them: a revision labels the weights; a preset's
# dummy weights have none unless the user gave one.
LABELS = ("target.revision", "draft.revision")


class ProfileUnusable(ValueError):
    """The profile cannot drive a fidelity run; the message names the field."""


class EngineMismatch(ValueError):
    """The engine is not configured as the profile's; each difference names the field."""

    def __init__(self, differences: list[str]):
        self.differences = differences
        super().__init__("the engine is not configured as the profile's: "
                         + "; ".join(differences))


def read_profile(path: str | Path) -> Artifact:
    """The validated artifact, or ProfileUnusable naming what is missing."""
    try:
        report = validate_path(path)
    except UnusableArtifact as exc:
        raise ProfileUnusable(str(exc)) from None
    if not report.ok or report.artifact is None:
        raise ProfileUnusable(f"{path} is not a valid artifact ({len(report.errors)} "
                              f"violation(s); run `sdbench validate {path}`)")
    artifact = report.artifact
    if not artifact.identity.settings.max_num_seqs.resolved:
        raise ProfileUnusable(f"{path}: a legacy artifact ({report.legacy}) records no engine "
                              "settings (identity.settings), so no engine can be configured "
                              "as its was")
    tp = artifact.identity.tensor_parallel_size.value
    if tp != 1:
        raise ProfileUnusable(f"identity.tensor_parallel_size: {tp}; a fidelity run drives a "
                              "single-rank engine step by step")
    if not artifact.prefill and not artifact.decode:
        raise ProfileUnusable("the profile holds no observation (prefill and decode empty)")
    return artifact


def check_device(artifact: Artifact, cuda: bool) -> None:
    """The profile's device must be this machine's (a CUDA profile needs a CUDA device)."""
    here = DEVICE_CUDA if cuda else "cpu"
    if artifact.device != here:
        raise ProfileUnusable(f"device: the profile was measured on {artifact.device} "
                              f"({artifact.identity.device_name.value}); this machine's engine "
                              f"runs on {here}")


def _value(field: IdentityField):
    return field.value if field.resolved else None


def preset_of(artifact: Artifact) -> str | None:
    """The preset whose target and draft config.json the artifact's digests name."""
    known = {digest: source for digest, (_text, source) in config_texts().items()}
    found = []
    for role in ("target", "draft"):
        digest = _value(getattr(artifact.identity, role).config_digest)
        source = known.get(str(digest).removeprefix("sha256:")) if digest else None
        if source is None:
            return None
        found.append(source.split()[1])     # "preset NAME ROLE config"
    return found[0] if found[0] == found[1] else None


def user_engine_args(artifact: Artifact) -> dict:
    """The engine arguments the user gave to the collection, as values again."""
    return {name: json.loads(text)
            for name, text in artifact.identity.settings.user_engine_args.items()}


def ran_under_oracle_limits(artifact: Artifact, preset: str) -> bool:
    """Whether the preset ran under its oracle limits: each limit holds in the effective
    settings (or the user's own engine argument set that setting), and the engine ran
    eager or captured the oracle's graphs only (vLLM's defaults capture many sizes)."""
    settings, given = artifact.identity.settings, artifact.identity.settings.user_engine_args
    oracle_graphs = tuple(sorted((artifact.speculative.draft_depth + 1) * b
                                 for b in GRAPH_BATCHES))
    graphs = _value(settings.enforce_eager) is True or \
        _value(settings.cudagraph_capture_sizes) == oracle_graphs
    return graphs and all(name in given or _value(getattr(settings, name)) == value
                          for name, value in PRESETS[preset].engine_limits)


def spec_choices(artifact: Artifact, model: str | None = None,
                 draft: str | None = None) -> dict:
    """The keyword arguments of engine.spec.engine_spec that made the artifact's engine."""
    ident, spec = artifact.identity, artifact.speculative
    choices: dict = dict(draft_depth=spec.draft_depth,
                         acceptance_length=spec.synthetic_acceptance_length,
                         user_engine_args=user_engine_args(artifact),
                         target_revision=_user_revision(ident.target),
                         draft_revision=_user_revision(ident.draft))
    if (model is None) != (draft is None):
        raise ProfileUnusable("--model and --draft go together")
    if model is not None:
        return {**choices, "model": model, "draft": draft}
    preset = preset_of(artifact)
    if preset is None:
        paths = [_value(getattr(ident, role).model) for role in ("target", "draft")]
        if all(p and (Path(str(p)) / "config.json").is_file() for p in paths):
            return {**choices, "model": str(paths[0]), "draft": str(paths[1])}
        raise ProfileUnusable(f"identity.target.config_digest: the profile's models are no "
                              f"preset's and their directories ({paths[0]}, {paths[1]}) are "
                              "not here; pass --model DIR --draft DIR")
    oracle = ran_under_oracle_limits(artifact, preset)
    graphs = oracle and artifact.device == DEVICE_CUDA and \
        _value(ident.settings.enforce_eager) is False
    return {**choices, "preset": preset, "vllm_defaults": not oracle, "cuda_graphs": graphs}


def _user_revision(model: ModelIdentity) -> str | None:
    """A revision the user gave at collection (so that the identity compares equal)."""
    field = model.revision
    return str(field.value) if field.resolved and field.source == "user" else None


def _leaves(node, prefix: str = ""):
    """(dotted path, IdentityField) of every field of an identity, depth first."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        path = f"{prefix}{f.name}"
        if isinstance(value, IdentityField):
            yield path, value
        elif dataclasses.is_dataclass(value):
            yield from _leaves(value, path + ".")


def _shown(field: IdentityField) -> str:
    return repr(field.value) if field.resolved else f"unresolved ({field.reason})"


def identity_differences(profile: ExecutionIdentity, engine: ExecutionIdentity) -> list[str]:
    """Every identity field and effective setting in which the engine differs from the
    profile's, one line each naming the field (identity.<path>)."""
    mine = dict(_leaves(engine))
    differences = []
    for path, theirs in _leaves(profile):
        if path in NOT_COMPARED:
            continue
        ours = mine[path]
        if path in LABELS and not (theirs.resolved and ours.resolved):
            continue
        if (theirs.resolved, theirs.value) != (ours.resolved, ours.value):
            differences.append(f"identity.{path}: the profile's engine had {_shown(theirs)}, "
                               f"this engine has {_shown(ours)}")
    return differences


def check_engine(artifact: Artifact, engine) -> list[str]:
    """Refuse (EngineMismatch) an engine configured otherwise than the profile's; the notes
    that do not refuse (the KV blocks an engine sized from free memory got) are returned."""
    differences = identity_differences(artifact.identity, engine.identity)
    if engine.kv_capacity.block_size != artifact.kv_capacity.block_size:
        differences.append(f"kv_capacity.block_size: the profile's engine had "
                           f"{artifact.kv_capacity.block_size}, this engine has "
                           f"{engine.kv_capacity.block_size}")
    if differences:
        raise EngineMismatch(differences)
    notes = []
    if engine.kv_capacity.num_blocks != artifact.kv_capacity.num_blocks:
        notes.append(f"kv_capacity.num_blocks: the profile's engine had "
                     f"{artifact.kv_capacity.num_blocks} blocks, this engine has "
                     f"{engine.kv_capacity.num_blocks} (sized at start-up from free memory)")
    return notes


def vllm_kwargs(artifact: Artifact) -> dict:
    """LLM(...) arguments that configure vLLM as the profile's engine was: the profile's
    models, K, acceptance and settings (the one resolution of `sdbench fidelity`,
    `crosscheck` and `serve`). No option of this project's observer: no per-step graph
    metrics."""
    from ..engine import compat
    from ..engine.spec import engine_spec
    spec = engine_spec(**spec_choices(artifact))
    kwargs = compat.engine_kwargs(spec, artifact.device)
    kwargs.pop("cudagraph_metrics", None)
    return kwargs
