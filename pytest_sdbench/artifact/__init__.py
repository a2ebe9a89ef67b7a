"""The artifact contract: model, builder, atomic store, fail-closed validator, legacy
readers and the published JSON Schema."""

from ..wire.model import Artifact
from . import schema
from .build import build_artifact
from .store import UnusableArtifact, read_json, write_artifact
from .validate import DEFAULT_K_WINDOW, Report, validate_data


def validate_path(path, k_window=DEFAULT_K_WINDOW) -> Report:
    """Validate the artifact file at ``path``; UnusableArtifact if it is no artifact at all."""
    return validate_data(read_json(path), k_window)


__all__ = [
    "DEFAULT_K_WINDOW",
    "Artifact",
    "Report",
    "UnusableArtifact",
    "build_artifact",
    "read_json",
    "schema",
    "validate_data",
    "validate_path",
    "write_artifact",
]
