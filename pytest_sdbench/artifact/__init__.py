"""The artifact contract: model, builder, atomic store, fail-closed validator, legacy
readers and the published JSON Schema."""

from ..wire.contract import SWEEP_INDEX_KIND
from .store import UnusableArtifact, read_json
from .validate.report import DEFAULT_K_WINDOW, Report, validate_data


def is_sweep_index(data: object) -> bool:
    """A K sweep's index (artifact.sweep), not an artifact: `sdbench validate` and `show`
    read it, the commands that take an artifact refuse it in one line."""
    return isinstance(data, dict) and data.get("kind") == SWEEP_INDEX_KIND


def validate_path(path, k_window=DEFAULT_K_WINDOW) -> Report:
    """Validate the artifact file at ``path``; UnusableArtifact if it is no artifact at all
    (a K-sweep index included)."""
    data = read_json(path)
    if is_sweep_index(data):
        raise UnusableArtifact(f"{path}: a K-sweep index, not an artifact; `sdbench show "
                               f"{path}` lists its artifacts")
    return validate_data(data, k_window)

