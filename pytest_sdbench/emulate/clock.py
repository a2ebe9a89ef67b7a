"""The emulated device's timeline and its deadline sleeper (the step log: steplog.py).

A GPU runs the steps launched on its stream one after another: step N starts when it has
been launched *and* step N-1 has finished, and its output is ready `price` seconds later.
VirtualDevice keeps exactly that timeline in virtual (deadline) time:

    start_N    = max(launch_N, deadline_{N-1})
    deadline_N = start_N + price_N

so a late wake-up of one step never shifts the next one (overhead is absorbed), and a
host that launches late leaves the device idle, as it would a GPU.

Nothing runs in the background. Whoever needs a step's output (the engine core thread in
Future.result(), vLLM's output thread under the multiprocess executor) sleeps until that
step's deadline: time.sleep with the thread's timer slack lowered (PR_SET_TIMERSLACK, Linux)
and, by default, an adaptive lead (the median wake-up latency of the last sleeps) that
cancels the typical wake-up latency. No spinning.
"""

from __future__ import annotations

import bisect
import ctypes
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

now = time.perf_counter   # the one clock of the emulator (monotonic, ns resolution)

_PR_SET_TIMERSLACK = 29
_TIMER_SLACK_NS = 1_000   # Linux default is 50 us, which alone costs 2.5% of a 2 ms step
_LEAD_CAP_S = 0.0002      # never wake earlier than this before a deadline
_LEAD_WINDOW = 64         # the lead is the median wake-up latency of this many sleeps
_IDLE_WORK_MIN_S = 0.0005  # only do idle work (log writes) in a wait at least this long


def lower_timer_slack() -> bool:
    """Lower the calling thread's timer slack (per thread on Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_TIMERSLACK, _TIMER_SLACK_NS, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class VirtualDevice:
    """The emulated device's serial timeline and the sleeper that waits on it."""

    def __init__(self, wake_lead: str | float = "adaptive") -> None:
        self.t0 = now()
        self._busy_until = self.t0
        self._adaptive = wake_lead == "adaptive"
        self._lead = 0.0 if self._adaptive else float(wake_lead)
        # Recent wake-up latencies, oldest first, and the same values sorted. A median,
        # not a mean: a host under load has rare multi-millisecond wake-ups that a mean
        # would turn into early wakes for every step after them.
        self._latencies: deque[float] = deque()
        self._sorted: list[float] = []
        self._slack_lowered: set[int] = set()
        self._lock = threading.Lock()

    def launch(self, price_s: float) -> tuple[float, float, float]:
        """Queue a step of `price_s` seconds; return (launch, start, deadline) absolute."""
        if price_s < 0:
            raise ValueError(f"price must be >= 0, got {price_s}")
        with self._lock:
            launched = now()
            start = max(launched, self._busy_until)
            deadline = start + price_s
            self._busy_until = deadline
        return launched, start, deadline

    def wait_until(self, deadline: float, idle_work: Callable[[], None] | None = None
                   ) -> tuple[float, bool, float, float]:
        """Sleep until `deadline`; return (request time, waited, woke time, seconds slept).
        `idle_work` (e.g. flushing the step log) runs first when the wait is long enough
        (over _IDLE_WORK_MIN_S) that it cannot make the wake-up late."""
        ident = threading.get_ident()
        if ident not in self._slack_lowered:
            lower_timer_slack()
            self._slack_lowered.add(ident)
        requested = now()
        target = deadline - self._lead
        if requested >= target:
            return requested, requested < deadline, requested, 0.0
        if idle_work is not None and target - requested > _IDLE_WORK_MIN_S:
            idle_work()
        asleep = now()
        if asleep < target:
            time.sleep(target - asleep)
        woke = now()
        if self._adaptive and asleep < target:
            self._observe(min(max(woke - target, 0.0), _LEAD_CAP_S))
        return requested, True, woke, woke - asleep

    def _observe(self, latency: float) -> None:
        self._latencies.append(latency)
        bisect.insort(self._sorted, latency)
        if len(self._latencies) > _LEAD_WINDOW:
            old = self._latencies.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]
        self._lead = self._sorted[len(self._sorted) // 2]

    @property
    def lead_s(self) -> float:
        return self._lead
