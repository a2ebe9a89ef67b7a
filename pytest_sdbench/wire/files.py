"""Files and folders the package writes. Atomic writes: a temporary file of this process's
own in the same folder, flushed and fsynced, then renamed over the target. A reader never
sees half a file, concurrent writers (pytest-xdist workers) never share a temporary name,
and a link planted at the target's name is replaced, never followed. Private folders: a
folder in a shared place (the temp folder, a cache) is used only when it is this user's own,
and is made 0700. Output folders: whether one can be written at all, asked before any work
starts (every command's --out)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


class ForeignFolder(ValueError):
    """A folder the package would keep private files in belongs to someone else (or is no
    folder); one line naming it and the variable that chooses another."""


def private_dir(path: Path, setting: str) -> Path:
    """`path`, a folder only this user can enter: created 0700, or, when it exists, this
    user's own (the entry itself, so that a link someone else planted is refused, and the
    folder it names) and made 0700 if it was open to others. Otherwise ForeignFolder, naming
    `setting` (the environment variable that chooses another folder): another user who made
    the folder first could plant files in it (links the next write follows, entries this
    package acts on)."""
    uid = os.getuid()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        pass   # something that is no folder (a file, a dangling link): refused below
    entry = path.lstat()
    if entry.st_uid != uid:
        raise ForeignFolder(f"{path}: belongs to another user (uid {entry.st_uid}); set "
                            f"{setting} to a folder of your own")
    try:
        info = path.stat()
    except OSError:
        info = entry
    if not stat.S_ISDIR(info.st_mode):
        raise ForeignFolder(f"{path}: is not a folder; set {setting} to a folder of your own")
    if info.st_uid != uid:
        raise ForeignFolder(f"{path}: links to a folder of another user (uid {info.st_uid}); "
                            f"set {setting} to a folder of your own")
    if stat.S_IMODE(info.st_mode) & 0o077:
        path.chmod(0o700)
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            umask = os.umask(0)
            os.umask(umask)
            # mkstemp makes 0600; these files are for sharing. On the open file: the name
            # could be another file by now in a folder others can write.
            os.fchmod(handle.fileno(), 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())
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
