"""Files: atomic writes (a temporary file of this process's own in the same folder, flushed
and fsynced, then renamed over the target: a reader never sees half a file, and concurrent
writers, pytest-xdist workers, never share a temporary name), and whether an output folder
can be written at all, asked before any work starts (every command's --out)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; these files are for sharing
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def out_dir_problem(path: str | Path) -> str | None:
    """Why files could not be written under path (None: they can), found without
    creating anything: the folder, or the nearest folder above it that exists, must be a
    folder this process can write into."""
    path = Path(path).absolute()
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return (f"{path} is not a directory" if probe == path else
                f"{path} cannot be created: {probe} is not a directory")
    if not _can_create_in(probe):
        return f"{probe} is not writable" + (f" (to create {path})" if probe != path else "")
    return None


def _can_create_in(folder: Path) -> bool:
    """A file can be made there (access() would say yes to root in /proc or /sys, where
    nothing can be created). The probe file is removed at once."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False
