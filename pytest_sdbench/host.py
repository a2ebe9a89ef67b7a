"""What runs beside the engine while it is measured: other processes' CPU time, other
sdbench engines on this host, other processes on the engine's GPUs. Measured, then
recorded in the artifact (RunEnvironment); the validator and `compare` flag contention.

Other engines are found through a registry of lock files, one per live engine, each held
locked (fcntl) by its process for the engine's lifetime: a file that can be locked belongs
to a process that is gone."""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from typing import IO

from .wire.contract import CONTENTION_OTHER_CORES
from .wire.model import RunEnvironment


def registry_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = Path(base) / f"sdbench-engines-{os.getuid()}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


class EngineRegistration:
    """This process's entry in the registry while an engine lives."""

    def __init__(self):
        self.path = registry_dir() / f"{os.getpid()}.lock"
        self._handle: IO[str] | None = open(self.path, "w")  # noqa: SIM115 (held for the engine's lifetime)
        fcntl.flock(self._handle, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
            self.path.unlink(missing_ok=True)


def other_engines() -> int:
    """Live sdbench engines of other processes on this host."""
    count = 0
    for path in registry_dir().glob("*.lock"):
        if path.stem == str(os.getpid()):
            continue
        try:
            with open(path) as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    count += 1      # held: its engine is alive
                    continue
            path.unlink(missing_ok=True)  # a stale entry of a process that is gone
        except FileNotFoundError:
            continue
    return count


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


def _gpu_processes(gpu_indices: tuple[int, ...], own_pids: tuple[int, ...] = ()) -> int | None:
    if not gpu_indices:
        return None
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 (no NVML: unknown, not zero)
        return None
    pids = set()
    for index in gpu_indices:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pids |= {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    return len(pids - {os.getpid(), *own_pids})


class HostMonitor:
    """Brackets a collection: other processes' mean CPU use over it, other engines and
    GPU processes at its end."""

    def __init__(self, gpu_indices: tuple[int, ...] = (), own_pids: tuple[int, ...] = ()):
        self.gpu_indices = gpu_indices
        self.own_pids = own_pids  # a tensor-parallel engine's rank processes

    def __enter__(self) -> HostMonitor:
        import time
        self._t0, self._busy0 = time.monotonic(), _busy_seconds()
        self._own0 = _own_seconds(self.own_pids)
        return self

    def __exit__(self, *exc) -> None:
        return None

    def environment(self) -> RunEnvironment:
        import time
        wall = max(time.monotonic() - self._t0, 1e-9)
        own = _own_seconds(self.own_pids) - self._own0
        other = max((_busy_seconds() - self._busy0) - own, 0.0) / wall
        engines, gpus = other_engines(), _gpu_processes(self.gpu_indices, self.own_pids)
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
