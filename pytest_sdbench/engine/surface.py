"""What every started engine answers the same way, in this process (launch.SdbenchEngine)
or behind a tensor-parallel proxy (tp.TensorParallelEngine): the errors that mark it
unusable, the stall bound of its step loop, the serving probe, and the surface (limits,
failure state) both share. Imports nothing that starts an engine."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..wire.identity import ExecutionIdentity, KVCapacity
from ..wire.points import EngineLimits, engine_limits
from .spec import EngineSpec

STALL_ENV, DEFAULT_STALL_SECONDS = "SDBENCH_STALL_SECONDS", 120.0


class EngineUnusable(RuntimeError):
    """The engine failed earlier (or was shut down) and is not used again."""


class EngineStalled(RuntimeError):
    """The engine's step loop made no progress within the stall bound."""


def stall_seconds() -> float:
    text = os.environ.get(STALL_ENV)
    if text is None:
        return DEFAULT_STALL_SECONDS
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{STALL_ENV}: expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"{STALL_ENV}: must be > 0, got {text!r}")
    return value


def describe_failure(exc: BaseException) -> str:
    """One line naming an exception: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return type(exc).__name__ + (f": {text[0]}" if text else "")


@dataclass(frozen=True)
class ServingProbe:
    """An ordinary request's greedy output, which attributes the engine instances hold, and
    the synthetic acceptance rates: taken right after start-up and again after a benchmark,
    they must be equal (the tokens only under natural acceptance: synthetic acceptance
    accepts drafts at random)."""
    tokens: tuple[int, ...]
    scheduler_attrs: frozenset
    worker_attrs: frozenset
    dispatcher_attrs: frozenset     # the V2 runner's cudagraph_manager (empty without one)
    synthetic_rates: tuple[float, ...] | None


class EngineSurface:
    """What every started engine answers the same way, in this process (SdbenchEngine) or
    behind a tensor-parallel proxy (tp.TensorParallelEngine): its limits, read from the
    identity it resolved at start-up, and its failure state. Subclasses hold `spec`,
    `identity`, `kv_capacity`, `failure`, `closed` and a `shutdown()`."""

    spec: EngineSpec
    identity: ExecutionIdentity
    kv_capacity: KVCapacity
    failure: str | None
    closed: bool

    # Whether session.collect_to_artifact runs here (False) or is handed, whole, to the
    # engine's own collect_to_artifact (True: a tensor-parallel proxy runs it on every rank).
    collects_on_ranks = False

    def shutdown(self) -> None:
        raise NotImplementedError

    def collect_to_artifact(self, mode, grid, out_dir, worker=None, progress=None,
                            decode_tokens=None, repeats=1, notify=None):
        """The whole run on the engine's ranks (only where collects_on_ranks)."""
        raise NotImplementedError(f"{type(self).__name__} collects in this process")

    @property
    def usable(self) -> bool:
        return self.failure is None and not self.closed

    def check_usable(self) -> None:
        if self.failure is not None:
            raise EngineUnusable(f"the engine failed earlier ({self.failure}) and was shut "
                                 "down; it is not reused")
        if self.closed:
            raise EngineUnusable("the engine is shut down")

    def fail(self, exc: BaseException) -> None:
        """Mark the engine unusable with its first cause, and shut it down (every rank of
        a tensor-parallel engine) now."""
        if self.failure is None:
            self.failure = describe_failure(exc)
        self.shutdown()

    @property
    def block_size(self) -> int:
        return self.kv_capacity.block_size

    def _setting(self, name: str) -> int:
        field = getattr(self.identity.settings, name)
        if not field.resolved:
            raise RuntimeError(f"engine setting {name} is unresolved: {field.reason}")
        return int(field.value)

    @property
    def max_num_seqs(self) -> int:
        return self._setting("max_num_seqs")

    @property
    def max_num_batched_tokens(self) -> int:
        return self._setting("max_num_batched_tokens")

    @property
    def max_model_len(self) -> int:
        return self._setting("max_model_len")

    @property
    def acceptance_control(self) -> str:
        return self.spec.acceptance_control

    @property
    def limits(self) -> EngineLimits:
        """The engine's own limits, as the grid derivation and the fit rules read them."""
        limits = engine_limits(self.identity, self.kv_capacity, self.spec.draft_depth,
                               self.spec.synthetic_acceptance_length is not None)
        if limits is None:
            raise RuntimeError("engine limits unresolved: identity.settings holds "
                               f"{self.identity.settings}")
        return limits


