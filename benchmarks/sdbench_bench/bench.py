"""One benchmark run: the engine spec from the command line, the engine (started on first
use, shut down at the end), the sizes each measurement uses, and the table."""

from __future__ import annotations

import gc
import threading
from dataclasses import dataclass, field

from pytest_sdbench.engine.spec import GRAPH_BATCHES
from pytest_sdbench.grid.choice import GridChoice
from pytest_sdbench.wire.rounds import ONE_ROUND, RepeatPlan

from .goals import Table


@dataclass(frozen=True)
class Sizes:
    batch: int
    context: int
    tokens: int                            # decode tokens of a throughput run
    overhead_batches: tuple[int, ...]
    fidelity_points: tuple[tuple[int, int], ...]
    sync_tokens: int = 32
    fidelity_tokens: int = 32


TINY = Sizes(batch=4, context=128, tokens=48, overhead_batches=(4,),
             fidelity_points=((1, 128), (4, 128)))
# a real-width model: the largest batch the graph engine captures, and one beyond it
LARGE = Sizes(batch=8, context=256, tokens=128, overhead_batches=(max(GRAPH_BATCHES), 8),
              fidelity_points=((1, 256), (4, 256), (8, 256)))


@dataclass
class Bench:
    spec: object                      # pytest_sdbench.engine.spec.EngineSpec
    rounds: int = 5                   # alternated runs (or profiled runs) a measurement takes
    mode: str = "agg"                 # what the collection pair collects
    grid: GridChoice | None = None    # --grid, read (None: the engine's default grid)
    repeats: RepeatPlan = ONE_ROUND   # how the collection pair repeats a point
    starts: int = 1                   # 1: the pair on one engine; 2: an engine start each
    out: str | None = None            # where the pair's artifacts go (None: a temp folder)
    table: Table = field(default_factory=Table)
    _engine: object = None
    cache: dict = field(default_factory=dict)   # results two measurements share

    @property
    def sizes(self) -> Sizes:
        return TINY if self.spec.preset == "tiny" else LARGE

    @property
    def engine(self):
        """The shared engine, started on first use."""
        return self.start()

    def start(self):
        if self._engine is None:
            self._engine = start(self.spec)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None


def start(spec):
    """Start an engine and say what it is."""
    from pytest_sdbench.engine.launch import start_engine
    engine = start_engine(spec)
    al = spec.synthetic_acceptance_length
    print(f"engine: preset {spec.preset} on {engine.device} "
          f"({engine.identity.device_name.value}), vLLM {engine.identity.engine_version.value}, "
          f"K={spec.draft_depth}, graph mode {engine.identity.cudagraph_mode.value}, acceptance "
          f"{engine.acceptance_control}"
          f"{'' if al is None else f' (AL {al:g})'}, started in {engine.start_seconds:.1f} s",
          flush=True)
    print(f"process: threads {[t.name for t in threading.enumerate()]}; gc thresholds "
          f"{gc.get_threshold()}, frozen objects {gc.get_freeze_count()}, tracked "
          f"{len(gc.get_objects())}", flush=True)
    return engine
