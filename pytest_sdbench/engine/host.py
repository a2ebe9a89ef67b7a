"""What runs beside the engine while it is measured: other processes' CPU time, other
sdbench engines on this host, other processes on the engine's GPUs. Measured, then
recorded in the artifact (RunEnvironment); the validator and `compare` flag contention.

Other engines are found through a registry of lock files, one per live engine, each held
locked (fcntl) by its process for the engine's lifetime: a file that can be locked belongs
to a process that is gone. Such a stale entry is removed, with the vllm_dist_* FileStore
file its engine recorded (vLLM removes it at a clean shutdown; a killed process cannot).
The registry folder is this user's own (0700; another user's is refused): an entry is read
as untrusted input all the same, and nothing in the folder is followed through a link.

The monitor samples other engines at the start, after every point (the collector's
checkpoint) and at the end, and keeps the most it saw: two engines whose collections
overlap see each other even when one ends first. CPU use is measured over the whole
collection from /proc/stat, less this process's own CPU time (the engine runs in it).

Under pytest-xdist on CUDA each worker gets a GPU of its own (gpu_for_worker); on CPU
concurrent engines are recorded here, flagged by the validator, and fail `sdbench compare`.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import stat
import tempfile
import time
from pathlib import Path
from typing import IO

from ..wire.contract import CONTENTION_OTHER_CORES
from ..wire.files import private_dir
from ..wire.model import RunEnvironment

CUDA_VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
REGISTRY_ENV = "SDBENCH_REGISTRY_DIR"   # the registry folder (default: see registry_dir)
_LOCK_SUFFIX = ".lock"
_ENTRY_NAME = re.compile(r"([1-9][0-9]{0,9})\.lock")   # <pid>.lock
_MAX_ENTRY_BYTES = 4096


def registry_dir() -> Path:
    """The registry folder: $SDBENCH_REGISTRY_DIR, else sdbench-engines-<uid> in
    $XDG_RUNTIME_DIR or the temp folder. This user's own, 0700, or ForeignFolder (one line,
    naming it): in a folder someone else can write, planted entries could make a file be
    truncated or removed, or every run look contended."""
    chosen = os.environ.get(REGISTRY_ENV)
    if chosen:
        path = Path(chosen)
    else:
        base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
        path = Path(base) / f"sdbench-engines-{os.getuid()}"
    return private_dir(path, REGISTRY_ENV)


class EngineRegistration:
    """This process's entry in the registry while an engine lives: <pid>.lock, held open
    and locked."""

    def __init__(self):
        folder = registry_dir()
        self.path = folder / f"{os.getpid()}{_LOCK_SUFFIX}"
        # Written under a name no reader looks at (created exclusively, never through a
        # link), locked, then renamed into place (a link planted at the entry's name is
        # replaced, not followed): a reader never finds the entry unlocked, which it would
        # take for a dead engine's and remove.
        pending = folder / f".{os.getpid()}.{secrets.token_hex(8)}.new"
        fd = os.open(pending, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        handle = os.fdopen(fd, "w")
        self._handle: IO[str] | None = handle
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.record()
            os.rename(pending, self.path)
        except BaseException:
            self._handle = None
            handle.close()
            pending.unlink(missing_ok=True)
            raise

    def record(self, dist_file: str | None = None) -> None:
        """What a later process needs to clean up after this one if it dies."""
        handle = self._handle
        if handle is None:
            return   # closed: the engine is gone
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "dist_file": dist_file}))
        handle.flush()

    def close(self) -> None:
        """Remove the entry (only if it is still this one's: a later registration of this
        process may have replaced it), then release the lock."""
        handle = self._handle
        if handle is None:
            return
        self._handle = None
        try:
            if _same_file(self.path, os.fstat(handle.fileno())):
                self.path.unlink(missing_ok=True)
        finally:
            handle.close()


def _same_file(path: Path, info: os.stat_result) -> bool:
    try:
        there = path.lstat()
    except FileNotFoundError:
        return False
    return (there.st_dev, there.st_ino) == (info.st_dev, info.st_ino)


def other_engines() -> int:
    """Live sdbench engines of other processes on this host: entries of the registry held
    locked. An entry that can be locked is a dead process's, and is removed with the
    FileStore file it recorded. Anything else there is untrusted and counts for nothing."""
    folder = registry_dir()
    count = 0
    for name in os.listdir(folder):
        match = _ENTRY_NAME.fullmatch(name)
        if match and int(match.group(1)) != os.getpid():
            count += _entry_alive(folder / name, int(match.group(1)))
    return count


def _entry_alive(path: Path, pid: int) -> bool:
    """True while the entry's lock is held. A stale entry is removed (with its FileStore
    file), as is what is no entry of this user's (a link, a folder, a file of another
    owner): it is never followed, read or counted."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:          # a link (ELOOP), or nothing this user may open
        _discard(path)
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            if _same_file(path, info):
                _discard(path)
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True           # held: its engine is alive
        entry = os.read(fd, _MAX_ENTRY_BYTES)
        if not _same_file(path, info):
            return False          # replaced meanwhile (a new process of that pid)
        _discard(path)            # before the lock is let go
    finally:
        os.close(fd)
    _remove_dist_file(entry, pid)
    return False


def _discard(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:   # gone already, or a folder: counts for nothing either way
        pass


def _remove_dist_file(entry: bytes, pid: int) -> None:
    """The vllm_dist_* file a dead engine recorded. The entry is untrusted input: only a
    file of that name directly in the temp folder, a plain file of this user's (lstat: a
    link is never followed), from an entry that names the pid of its own file name."""
    try:
        data = json.loads(entry)
    except (ValueError, RecursionError):   # not JSON, not UTF-8, or nested past the parser
        return
    dist_file = data.get("dist_file") if isinstance(data, dict) and \
        data.get("pid") == pid else None
    if not isinstance(dist_file, str) or not dist_file.startswith("/") or \
            os.path.dirname(dist_file) != tempfile.gettempdir() or \
            not os.path.basename(dist_file).startswith("vllm_dist_"):
        return
    try:
        info = os.lstat(dist_file)
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid():
            os.unlink(dist_file)
    except (OSError, ValueError):   # gone, or a name no file can have (NUL)
        pass


def _busy_seconds() -> float:
    """CPU seconds spent busy by every process on the host since boot (/proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_seconds(pids: tuple[int, ...] = ()) -> float:
    """CPU seconds of this process and its waited-for children, plus those of `pids` (the
    other ranks of a tensor-parallel engine), from /proc/<pid>/stat."""
    times = os.times()
    total = times.user + times.system
    for pid in set(pids) - {os.getpid()}:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as CUDA_VISIBLE_DEVICES entries (indices or
    UUIDs), found without initialising CUDA: that variable when set, else every device
    NVML counts; none without NVML (no NVIDIA driver)."""
    chosen = os.environ.get(CUDA_VISIBLE_ENV)
    if chosen is not None:
        return [d.strip() for d in chosen.split(",") if d.strip() and d.strip() != "-1"]
    try:
        import pynvml
        pynvml.nvmlInit()
        return [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001 (no NVML, no driver: no CUDA device to assign)
        return []


def gpu_for_worker(worker_index: int, workers: int, visible: list[str]) -> str:
    """The device of pytest-xdist worker `worker_index` of `workers`: one GPU per worker,
    by index over the visible devices; more workers than GPUs is refused (engines sharing a
    GPU time each other's kernels)."""
    if workers > len(visible):
        raise ValueError(f"pytest-xdist runs {workers} workers, one sdbench engine each, but "
                         f"{len(visible)} CUDA device(s) are visible ({','.join(visible)}); "
                         f"run with -n {len(visible)} or fewer (each worker gets a GPU of its "
                         "own)")
    return visible[worker_index]


def nvml_handle(pynvml, torch_index: int):
    """The NVML handle of torch's device `torch_index`: NVML numbers devices physically and
    ignores CUDA_VISIBLE_DEVICES; torch counts only the visible ones, in that variable's
    order (an xdist worker sees only its own GPU, as torch index 0)."""
    visible = os.environ.get(CUDA_VISIBLE_ENV)
    if visible is None:
        return pynvml.nvmlDeviceGetHandleByIndex(torch_index)
    entry = [d.strip() for d in visible.split(",")][torch_index]
    if entry.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
    return pynvml.nvmlDeviceGetHandleByUUID(entry)


def _gpu_processes(gpu_indices: tuple[int, ...], own_pids: tuple[int, ...] = ()) -> int | None:
    if not gpu_indices:
        return None
    try:
        import pynvml
        pynvml.nvmlInit()
        pids = set()
        for index in gpu_indices:
            handle = nvml_handle(pynvml, index)
            pids |= {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    except Exception:  # noqa: BLE001 (no NVML, or it cannot tell: unknown, not zero)
        return None
    return len(pids - {os.getpid(), *own_pids})


class HostMonitor:
    """Brackets a collection: other processes' mean CPU use over it; the most other engines
    and GPU processes seen at its start, at each sample() (after every point) and at the
    end."""

    def __init__(self, gpu_indices: tuple[int, ...] = (), own_pids: tuple[int, ...] = ()):
        self.gpu_indices = gpu_indices
        self.own_pids = own_pids  # a tensor-parallel engine's rank processes
        self._engines = 0
        self._gpus: int | None = None

    def __enter__(self) -> HostMonitor:
        self._t0, self._busy0 = time.monotonic(), _busy_seconds()
        self._own0 = _own_seconds(self.own_pids)
        self.sample()
        return self

    def __exit__(self, *exc) -> None:
        return None

    def sample(self) -> None:
        self._engines = max(self._engines, other_engines())
        gpus = _gpu_processes(self.gpu_indices, self.own_pids)
        if gpus is not None:
            self._gpus = max(self._gpus or 0, gpus)

    def environment(self) -> RunEnvironment:
        """The environment so far (a checkpoint asks mid-collection; the end asks last)."""
        self.sample()
        wall = max(time.monotonic() - self._t0, 1e-9)
        own = _own_seconds(self.own_pids) - self._own0
        other = max((_busy_seconds() - self._busy0) - own, 0.0) / wall
        engines, gpus = self._engines, self._gpus
        reasons = []
        if engines:
            reasons.append(f"{engines} other sdbench engine(s) alive on this host")
        if other > CONTENTION_OTHER_CORES:
            reasons.append(f"other processes used {other:.2f} CPU cores on average "
                           f"(threshold {CONTENTION_OTHER_CORES})")
        if gpus:
            reasons.append(f"{gpus} other process(es) on the engine's GPU(s)")
        return RunEnvironment(cpu_count=os.cpu_count() or 1, other_cpu_cores=round(other, 4),
                              other_sdbench_engines=engines, other_gpu_processes=gpus,
                              contended=bool(reasons), reason="; ".join(reasons) or None)
