"""Writing and reading artifact files. Writes are atomic: a temporary file in the same
folder, flushed and fsynced, then renamed; a reader never sees half an artifact."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .. import typed


class UnusableArtifact(ValueError):
    """The input is not an artifact at all: missing file, not JSON, not an object."""


def write_artifact(artifact, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(typed.encode(artifact), indent=1, allow_nan=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; an artifact is for sharing
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


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
