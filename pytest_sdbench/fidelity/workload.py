"""The held-out serving workload: requests with a seeded arrival process (Poisson at a rate,
or a fixed concurrency, closed loop) and input and output lengths drawn from a stated
distribution, all generated here from the seed (nothing is downloaded; the prompts are token
ids from the engine's own stream, as the collector's are, so no prompt shares a cached
prefix with another).

Pure: no engine, no vLLM. The same workload is what the consumer is asked to predict."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Final, Literal

ARRIVAL_POISSON: Final = "poisson"
ARRIVAL_CONCURRENCY: Final = "concurrency"
Arrival = Literal["poisson", "concurrency"]


class WorkloadError(ValueError):
    """A workload no run could serve; the message names the option and the value."""


@dataclass(frozen=True)
class Lengths:
    """Token counts drawn uniformly from the integers low..high (low == high: fixed)."""
    low: int
    high: int

    def __post_init__(self):
        if not 1 <= self.low <= self.high:
            raise WorkloadError(f"lengths: need 1 <= LOW <= HIGH, got {self.low}-{self.high}")

    def draw(self, rng: random.Random) -> int:
        return self.low if self.low == self.high else rng.randint(self.low, self.high)

    def describe(self) -> str:
        return (f"{self.low} tokens" if self.low == self.high else
                f"uniform integers in [{self.low}, {self.high}] tokens")

    @property
    def text(self) -> str:
        return f"{self.low}" if self.low == self.high else f"{self.low}-{self.high}"


def parse_lengths(text: str, option: str) -> Lengths:
    """'N' (fixed) or 'LOW-HIGH' (uniform integers)."""
    low, sep, high = text.partition("-")
    try:
        bounds = int(low), int(high) if sep else int(low)
    except ValueError:
        raise WorkloadError(f"{option}: expected N or LOW-HIGH token counts, got {text!r}") \
            from None
    try:
        return Lengths(*bounds)
    except WorkloadError as exc:
        raise WorkloadError(f"{option}: {exc}") from None


@dataclass(frozen=True)
class Workload:
    """One serving workload. Poisson: arrivals at `rate` requests a second for
    `duration_seconds` (at most `requests`, if given); concurrency: `requests` requests, a
    new one sent whenever one finishes, `concurrency` in flight."""
    arrival: Arrival
    input_tokens: Lengths
    output_tokens: Lengths
    seed: int = 0
    rate: float | None = None
    duration_seconds: float | None = None
    concurrency: int | None = None
    requests: int | None = None

    def __post_init__(self):
        if self.arrival == ARRIVAL_POISSON:
            if self.rate is None or not (self.rate > 0 and math.isfinite(self.rate)):
                raise WorkloadError(f"--rate: requests a second must be > 0, got {self.rate}")
            if self.duration_seconds is None and self.requests is None:
                raise WorkloadError("--duration or --requests: a Poisson workload needs one")
            if self.duration_seconds is not None and not self.duration_seconds > 0:
                raise WorkloadError(f"--duration: must be > 0 seconds, got "
                                    f"{self.duration_seconds}")
            if self.concurrency is not None:
                raise WorkloadError("--concurrency: a Poisson workload has no fixed concurrency")
        elif self.arrival == ARRIVAL_CONCURRENCY:
            if self.concurrency is None or self.concurrency < 1:
                raise WorkloadError(f"--concurrency: must be >= 1, got {self.concurrency}")
            if self.requests is None:
                raise WorkloadError("--requests: a fixed-concurrency workload needs a count")
            if self.rate is not None:
                raise WorkloadError("--rate: a fixed-concurrency workload has no arrival rate")
        else:
            raise WorkloadError(f"arrival: {self.arrival!r} is neither {ARRIVAL_POISSON} nor "
                                f"{ARRIVAL_CONCURRENCY}")
        if self.requests is not None and self.requests < 1:
            raise WorkloadError(f"--requests: must be >= 1, got {self.requests}")

    @property
    def label(self) -> str:
        """A short name of the load: 'rate 8 rps' or 'concurrency 4'."""
        return (f"rate {self.rate:g} rps" if self.arrival == ARRIVAL_POISSON
                else f"concurrency {self.concurrency}")

    def describe(self) -> str:
        if self.arrival == ARRIVAL_POISSON:
            load = f"Poisson arrivals at {self.rate:g} requests/s"
            if self.duration_seconds is not None:
                load += f" for {self.duration_seconds:g} s"
            if self.requests is not None:
                load += f", {'at most ' if self.duration_seconds else ''}{self.requests} " \
                        "requests"
        else:
            load = (f"{self.requests} requests at a fixed concurrency of {self.concurrency} "
                    "(closed loop: a request is sent when one finishes)")
        return (f"{load}; input {self.input_tokens.describe()}, output "
                f"{self.output_tokens.describe()}; seed {self.seed}")


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    arrival_seconds: float | None    # from the start of the run; None: closed loop
    input_tokens: int
    output_tokens: int


def plan(workload: Workload) -> list[PlannedRequest]:
    """The workload's requests, the same for the same workload and seed. One stream: for
    each request in turn, its gap to the one before (Poisson), its input, its output."""
    rng = random.Random(workload.seed)
    planned: list[PlannedRequest] = []
    t = 0.0
    while True:
        if workload.requests is not None and len(planned) >= workload.requests:
            break
        if workload.arrival == ARRIVAL_POISSON:
            assert workload.rate is not None
            t += rng.expovariate(workload.rate)
            if workload.duration_seconds is not None and t >= workload.duration_seconds:
                break
            arrival: float | None = t
        else:
            arrival = None
        planned.append(PlannedRequest(len(planned), arrival, workload.input_tokens.draw(rng),
                                      workload.output_tokens.draw(rng)))
    if not planned:
        raise WorkloadError(f"--duration {workload.duration_seconds:g} at --rate "
                            f"{workload.rate:g}: the seeded arrivals hold no request; "
                            "lengthen the run")
    return planned


def check_fits(workload: Workload, max_model_len: int, where: str) -> None:
    """A request must fit the engine's context: input + output <= max_model_len."""
    longest = workload.input_tokens.high + workload.output_tokens.high
    if longest > max_model_len:
        raise WorkloadError(f"--input-len {workload.input_tokens.text} and --output-len "
                            f"{workload.output_tokens.text}: the longest request "
                            f"({longest} tokens) exceeds {where} max_model_len {max_model_len}")


def workload_from_json(data: dict) -> Workload:
    """A workload as a run record keeps it (serve.workload_json)."""
    return Workload(arrival=data["arrival"],
                    input_tokens=parse_lengths(str(data["input_tokens"]), "input_tokens"),
                    output_tokens=parse_lengths(str(data["output_tokens"]), "output_tokens"),
                    seed=data["seed"], rate=data["rate"],
                    duration_seconds=data["duration_seconds"],
                    concurrency=data["concurrency"], requests=data["requests"])
