"""The artifact contract: model, builder, atomic store, fail-closed validator, legacy
readers and the published JSON Schema."""

from ..wire.contract import PHASES, SWEEP_INDEX_KIND
from .store import UnusableArtifact, read_json
from .validate.report import DEFAULT_K_WINDOW, Report, validate_data


def is_sweep_index(data: object) -> bool:
    """A K sweep's index (artifact.sweep), not an artifact: `sdbench validate` and `show`
    read it, the commands that take an artifact refuse it in one line."""
    return isinstance(data, dict) and data.get("kind") == SWEEP_INDEX_KIND


def check_claims_an_artifact(data: dict, path) -> None:
    """UnusableArtifact unless the object claims to be an artifact: every schema version
    carries `kind` and `schema_version`, and an object with neither (a grid manifest, a
    consumer's plan) is no artifact to judge valid or invalid, but unusable."""
    if "kind" in data or "schema_version" in data:
        return
    grid = " (a grid manifest: `sdbench collect --grid` reads it)" if \
        set(PHASES) & set(data) else ""
    raise UnusableArtifact(f"{path}: not an artifact{grid}; it has neither 'kind' nor "
                           "'schema_version'")


def validate_path(path, k_window=DEFAULT_K_WINDOW) -> Report:
    """Validate the artifact file at ``path``; UnusableArtifact if it is no artifact at all
    (a K-sweep index and a grid manifest included)."""
    data = read_json(path)
    if is_sweep_index(data):
        raise UnusableArtifact(f"{path}: a K-sweep index, not an artifact; `sdbench show "
                               f"{path}` lists its artifacts")
    check_claims_an_artifact(data, path)
    return validate_data(data, k_window)

