"""The records of a serving run: every request's token deliveries (host clock) and every
real step's shape, graph mode and native time. Plain data, read back from JSON; no engine."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field

from ..wire.contract import PHASE_DECODE, PHASE_MIXED, PHASE_PREFILL

STEP_KINDS = (PHASE_PREFILL, PHASE_DECODE, PHASE_MIXED)
UNKNOWN_GRAPH_MODE = "unknown"


@dataclass
class RequestRecord:
    """One served request, its times in seconds from the start of the run (host clock)."""
    index: int
    request_id: str
    input_tokens: int
    output_tokens: int                 # asked (the run ignores EOS, so also delivered)
    arrival: float                     # when it arrived (closed loop: when it was sent)
    added: float                       # when add_request was called (a step boundary)
    deliveries: list[tuple[float, int]] = field(default_factory=list)  # (time, tokens)
    finished: float | None = None

    @property
    def delivered_tokens(self) -> int:
        return sum(n for _, n in self.deliveries)

    @property
    def ttft(self) -> float:
        return self.deliveries[0][0] - self.arrival

    @property
    def e2e(self) -> float:
        assert self.finished is not None
        return self.finished - self.arrival

    @property
    def itl(self) -> float | None:
        """Mean inter-token latency: first to last token over the tokens after the first
        (the consumer's per-request itl_ms, its TPOT); None for a one-token output."""
        tokens = self.delivered_tokens
        if tokens < 2:
            return None
        return (self.deliveries[-1][0] - self.deliveries[0][0]) / (tokens - 1)

    def gaps(self) -> list[float]:
        """The time between consecutive deliveries (a step can deliver several tokens of a
        request: its accepted drafts and the bonus token)."""
        times = [t for t, _ in self.deliveries]
        return [b - a for a, b in itertools.pairwise(times)]


# Batch buckets of the fidelity tables (a step's requests; a served gap's batch), in one
# place for the in-process and the served comparison.
BATCH_BUCKETS = ((1, 1), (2, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 1 << 20))


def batch_bucket(batch: int) -> tuple[int, int]:
    """The bucket a batch falls in (tuples sort in batch order)."""
    return next(b for b in BATCH_BUCKETS if b[0] <= batch <= b[1])


def bucket_label(bucket: tuple[int, int]) -> str:
    """"1", "2-4", ..."""
    lo, hi = bucket
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


@dataclass(frozen=True)
class StepRecord:
    """One real engine step: its shape as the scheduler emitted it (corrected for rejected
    drafts of steps still in flight), how it ran, and its native time."""
    native_iteration_id: int
    kind: str                     # prefill, decode or mixed
    graph_mode: str
    seconds: float
    prefill_requests: int
    prefill_tokens: int           # new prompt tokens of the requests in prefill
    prefill_kv_tokens: int        # KV tokens they read (cached prefix, earlier chunks)
    decode_requests: int
    decode_kv_tokens: int         # KV tokens the decoding requests read
    draft_tokens: int             # drafts the decoding requests verify
    full_depth_requests: int      # decoding requests that verify K drafts
    accepted_drafts: int | None   # drafts those accepted (from the step's output)
    total_scheduled_tokens: int
    waiting: int
    running: int

    @property
    def requests(self) -> int:
        return self.prefill_requests + self.decode_requests


@dataclass
class ServingRun:
    """One workload served: its requests and every real step."""
    label: str
    workload: dict
    started_at: str
    wall_seconds: float
    requests: list[RequestRecord]
    steps: list[StepRecord]
    idle_steps: int
    timing_source: str
    environment: dict
    acceptance_length: float | None    # the synthetic AL set for the run (None: natural)

    def to_json(self) -> dict:
        data = asdict(self)
        for r in data["requests"]:
            r["deliveries"] = [list(d) for d in r["deliveries"]]
        return data

    @classmethod
    def from_json(cls, data: dict) -> ServingRun:
        data = dict(data)
        data["requests"] = [RequestRecord(**{**r, "deliveries": [tuple(d) for d in
                                                                 r["deliveries"]]})
                            for r in data["requests"]]
        data["steps"] = [StepRecord(**s) for s in data["steps"]]
        return cls(**data)

    def observed_acceptance_length(self) -> float | None:
        """1 + drafts accepted per full-depth decoding request, over the run's steps."""
        rows = [(s.accepted_drafts, s.full_depth_requests) for s in self.steps
                if s.accepted_drafts is not None and s.full_depth_requests]
        counted = sum(n for _, n in rows)
        return 1.0 + sum(a for a, _ in rows) / counted if counted else None
