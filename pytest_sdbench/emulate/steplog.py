"""The emulator's step log: JSON Lines, a header (the emulation's settings, K, rates, the
price, async scheduling) and one EmulatedStep per executed step, in the order the outputs
were taken; read back and summarised by `sdbench emulate` and the tests.

Times are seconds on the engine core's perf_counter, relative to the header's t0."""

from __future__ import annotations

import json
import statistics
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

WITHIN = 0.05   # a step "took its price" when |measured - price| <= 5% of the price


@dataclass
class EmulatedStep:
    """One executed step.

    Its shape as the collector's snapshot reads it (pricing.StepShape), how the profile
    priced it (kind, graph_mode, basis; outside/outside_detail/priced_at/clamped where it
    fell outside the measured ranges), what it sampled, and its times:

    price_s        the profile's price of the step
    launch_t       when the executor received the SchedulerOutput (kernels 'launched')
    start_t        when the emulated device began it: max(launch_t, previous deadline)
    deadline_t     start_t + price_s: when its output became ready in virtual time
    overlapped     launched while an earlier step's output was still untaken (async
                   scheduling at work: the next step is scheduled before the last one ends)
    request_t      when the output was first asked for (Future.result / get_output)
    waited         whether the asker arrived before the deadline and slept
    woke_t         when the asker got the output back (after the sleep, if any)
    sleep_s        wall time spent asleep (0 when not waited)
    measured_s     observed device time: (woke_t if waited else deadline_t) - start_t
    error_s        measured_s - price_s (the sleep's overshoot or early wake; 0 if not waited)
    consumer_delay_s  max(0, request_t - deadline_t): the host was busy past the deadline
    """

    step: int
    kind: str
    graph_mode: str
    num_reqs: int
    prefill_requests: int
    prefill_tokens: int
    prefill_kv_tokens: int
    decode_requests: int
    decode_kv_tokens: int
    draft_tokens: int
    total_scheduled_tokens: int
    kv_correction: int                 # KV the scheduler counted that a step in flight rejected
    num_sampled_tokens: int
    num_accepted_tokens: int
    num_verified_drafts: int
    num_placeholder_drafts: int        # -1 drafts (async scheduling) replaced by the worker's
    price_s: float
    basis: str
    how: str | None
    outside: str | None
    outside_detail: str | None
    priced_at: dict | None
    clamped: list[str]
    launch_t: float
    start_t: float
    deadline_t: float
    overlapped: bool
    request_t: float | None = None
    waited: bool | None = None
    woke_t: float | None = None
    sleep_s: float | None = None
    measured_s: float | None = None
    error_s: float | None = None
    consumer_delay_s: float | None = None


class StepLog:
    """Buffered JSON Lines; flushed every `flush_every` records, while the worker waits for
    a deadline anyway (flush), and on close (engine shutdown)."""

    def __init__(self, path: str | None, header: Callable[[], dict[str, Any]],
                 flush_every: int = 1024) -> None:
        self._path = Path(path) if path else None
        self._header = header
        self._flush_every = flush_every
        self._buffer: list[str] = []
        self._lock = threading.Lock()
        self._file: IO[str] | None = None

    def add(self, record: EmulatedStep) -> None:
        if self._path is None:
            return
        with self._lock:
            self._buffer.append(json.dumps(asdict(record), separators=(",", ":")))
            if len(self._buffer) >= self._flush_every:
                self._flush_locked()

    def _flush_locked(self) -> None:
        if self._path is None:
            return
        if self._file is None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self._path.open("w", encoding="utf-8")
            self._file.write(json.dumps({"header": self._header()}) + "\n")
        if self._buffer:
            self._file.write("\n".join(self._buffer) + "\n")
            self._buffer.clear()
        self._file.flush()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def close(self) -> None:
        with self._lock:
            self._flush_locked()
            if self._file is not None:
                self._file.close()
                self._file = None


@dataclass
class StepLogData:
    header: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)


def read_step_log(path: str | Path) -> StepLogData:
    """The header and every step record (a last line cut by a kill is left out)."""
    data = StepLogData(header={})
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "header" in record:
            data.header = record["header"]
        else:
            data.steps.append(record)
    return data


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(data: StepLogData) -> dict[str, Any]:
    """The step log's figures: steps by kind, by how they were priced and outside by why;
    async scheduling at work (steps launched before the previous output was taken); and
    the time each step took against its price (the steps whose output was waited for: the
    others took their price exactly, on the virtual timeline)."""
    steps = data.steps
    kinds: dict[str, int] = {}
    bases: dict[str, int] = {}
    outside: dict[str, int] = {}
    for s in steps:
        kinds[s["kind"]] = kinds.get(s["kind"], 0) + 1
        bases[s["basis"]] = bases.get(s["basis"], 0) + 1
        if s["outside"]:
            outside[s["outside"]] = outside.get(s["outside"], 0) + 1
    waited = [s for s in steps if s.get("waited")]
    relative = [abs(s["error_s"]) / s["price_s"] for s in waited if s["price_s"] > 0]
    errors_us = [1e6 * s["error_s"] for s in waited]
    accepted = sum(s["num_accepted_tokens"] for s in steps)
    verified = sum(s["decode_requests"] for s in steps if s["num_verified_drafts"])
    return {
        "steps": len(steps), "by_kind": kinds, "by_basis": bases,
        "outside": sum(outside.values()), "outside_by_category": outside,
        "overlapped": sum(1 for s in steps if s["overlapped"]),
        "placeholder_drafts": sum(s["num_placeholder_drafts"] for s in steps),
        "async_scheduling": data.header.get("async_scheduling"),
        "acceptance_length": round(1 + accepted / verified, 4) if verified else None,
        "device_busy_s": round(sum(s["price_s"] for s in steps), 6),
        "waited": len(waited),
        "error_us": {"p1": _quantile(errors_us, 0.01), "p50": _quantile(errors_us, 0.5),
                     "p99": _quantile(errors_us, 0.99)},
        "abs_error_over_price": {"p50": _quantile(relative, 0.5),
                                 "p90": _quantile(relative, 0.9),
                                 "max": max(relative, default=None)},
        "within_5pct": (sum(1 for r in relative if r <= WITHIN) / len(relative)
                        if relative else None),
        "price_ms_median": (1e3 * statistics.median(s["price_s"] for s in steps)
                            if steps else None),
    }
