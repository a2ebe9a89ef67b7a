"""Writing and reading artifact files. Writes are atomic (files.atomic_write_text): a
reader never sees half an artifact."""

from __future__ import annotations

import json
from pathlib import Path

from ..files import atomic_write_text
from ..wire import typed


class UnusableArtifact(ValueError):
    """The input is not an artifact at all: missing file, not JSON, not an object."""


def write_artifact(artifact, path: str | Path) -> Path:
    return atomic_write_text(path, json.dumps(typed.encode(artifact), indent=1) + "\n")


def read_json(path: str | Path) -> dict:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UnusableArtifact(f"{path}: no such file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise UnusableArtifact(f"{path}: cannot be read ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnusableArtifact(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UnusableArtifact(f"{path}: a JSON {type(data).__name__}, not an artifact object")
    return data
