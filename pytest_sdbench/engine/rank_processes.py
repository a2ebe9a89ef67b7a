"""The rank processes of a tensor-parallel engine, as its proxy (tp.py) drives them: one
command sent to every rank and the wait for every rank's answer, the tails of their logs,
ending them with everything they started, and the CPU shared-memory segments a killed run
leaves behind."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

STOP_TIMEOUT_S = 60.0
_LOG_TAIL = 3000


class RankFailed(RuntimeError):
    """A rank process died, or a command failed on a rank."""



def stale_cpu_shm(uid: int | None = None) -> list[Path]:
    """vLLM CPU's shared-memory all-reduce segments (/dev/shm/*cpushm*) of this user that no
    live process maps: left by a killed TP run, they make the next one fail (errno 17)."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        return []
    uid = os.getuid() if uid is None else uid
    ours = [p for p in shm.iterdir() if "cpushm" in p.name and _own_plain_file(p, uid)]
    if not ours:
        return []
    mapped: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            mapped.update(line.split(None, 5)[-1].strip() for line in maps.read_text()
                          .splitlines() if "/dev/shm/" in line)
        except OSError:
            continue
    return [p for p in ours if str(p) not in mapped]


def _own_plain_file(path: Path, uid: int) -> bool:
    """A plain file of `uid`'s, by the entry itself (lstat): /dev/shm is shared, and a link
    someone else planted there names a file of ours only through the link."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == uid


def remove_stale_cpu_shm() -> None:
    for path in stale_cpu_shm():
        try:
            path.unlink()
        except OSError:   # gone meanwhile: nothing left to remove
            pass



class RankCommand:
    """One command sent to every rank, and the wait for every rank's answer; after a rank's
    error the others get `stall_seconds` (the spec's stall bound) to answer."""

    def __init__(self, procs, conns, logs, stall_seconds: float):
        self.procs, self.conns, self.logs = procs, conns, logs
        self.stall_seconds = stall_seconds

    answered = False        # every rank answered the command
    engine_failed = False   # a rank answered that the command failed its engine

    def call(self, command: str, progress=None, timeout: float | None = None, notify=None,
             **kwargs):
        """Every rank's answer, by rank. Without `timeout` (a generate, probe or collection
        may run for hours) the wait has no deadline of its own: each rank runs every model
        step under its own StepWatchdog (SdbenchEngine.generate, also inside a collection),
        which fails the rank's engine with EngineStalled when its step loop makes no
        progress. A rank that fails can leave its peers waiting where no watchdog runs (in a
        collective of a step, or in ranks.gather_from_ranks); so once any rank has answered
        an error, the others get the watchdog's bound to answer, then are ended and the
        failed rank's exception is raised. A step that never returns on every rank is not
        bounded here (nor on a single-rank engine: pytest-timeout bounds tests)."""
        for conn in self.conns:
            conn.send((command, kwargs))
        results: dict[int, Any] = {}
        errors: dict[int, tuple] = {}
        waiting: dict[Any, int] = {conn: r for r, conn in enumerate(self.conns)}
        deadline = None if timeout is None else time.monotonic() + timeout
        peers_deadline: float | None = None   # set by the first error
        unanswered: list[int] = []
        while waiting:
            for conn in wait(list(waiting), timeout=1.0):
                rank = waiting[conn]
                try:
                    message: tuple[str, Any] = conn.recv()  # type: ignore[union-attr,call-arg,assignment]
                except (EOFError, OSError):
                    continue  # the rank is gone; its exit is reported below
                kind, value = message
                if kind == "progress":
                    if progress is not None:
                        progress(*value)
                    continue
                if kind == "notify":
                    if notify is not None:
                        notify(value)
                    continue
                del waiting[conn]
                (results if kind == "ok" else errors)[rank] = value
                if errors and peers_deadline is None:
                    peers_deadline = time.monotonic() + self.stall_seconds
            dead = [r for r in waiting.values() if self.procs[r].poll() is not None]
            late = deadline is not None and time.monotonic() > deadline
            if dead or late:
                what = (f"rank(s) {dead} exited (codes "
                        f"{[self.procs[r].returncode for r in dead]})" if dead
                        else f"rank(s) {sorted(waiting.values())} gave no answer in {timeout} s")
                end_ranks(self.procs, self.logs, self.conns)
                raise RankFailed(f"{command}: {what}: " + log_tails(self.logs, dead or
                                                                   waiting.values()))
            if waiting and peers_deadline is not None and time.monotonic() > peers_deadline:
                unanswered = sorted(waiting.values())
                end_ranks(self.procs, self.logs, self.conns)
                break
        self.answered = not unanswered
        if errors:
            self.engine_failed = any(failed for _, _, failed in errors.values())
            rank = min(errors)
            exc, trace, _ = errors[rank]
            ended = (f"; rank(s) {unanswered} gave no answer within the stall bound after it and "
                     "were ended" if unanswered else "")
            if isinstance(exc, BaseException):
                if hasattr(exc, "add_note"):  # Python 3.11+
                    exc.add_note(f"raised on rank(s) {sorted(errors)}{ended}; "
                                 f"rank {rank}:\n{trace}")
                raise exc
            raise RankFailed(f"{command} failed on rank {rank}{ended}: {exc}\n{trace}")
        return [results[r] for r in range(len(self.conns))]


def log_tails(logs, ranks) -> str:
    parts = []
    for r in ranks:
        try:
            text = logs[r].read_text(errors="replace")[-_LOG_TAIL:]
        except OSError:
            text = "(no log)"
        parts.append(f"\n--- rank {r} log ({logs[r]}), last lines ---\n{text}")
    return "".join(parts)


def end_ranks(procs, logs, conns) -> None:
    """End every rank process and its descendants; give them STOP_TIMEOUT_S to exit."""
    import psutil
    family = []
    for p in procs:
        try:
            family += psutil.Process(p.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
    for conn in conns:
        if conn is not None:
            conn.close()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for p in procs:
        try:
            p.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for child in family:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(family, timeout=5)
    remove_stale_cpu_shm()
