"""The run: what `sdbench collect` and the pytest session both drive, one home for it. From
the user's Inputs (read and checked once, before any engine starts): the engine spec of each
K, the engine started (or refused in one line), its grid, each collection turned into a
validated artifact (run.collect), the plots beside it when asked for, and the K-sweep index
of the artifacts a sweep wrote."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..engine.spec import EngineSpec
from ..engine.surface import Engine, describe_failure, known_fix
from ..wire.model import Artifact
from ..wire.points import Grid
from ..wire.rounds import RepeatPlan
from .collect import CollectionRun, collect_to_artifact, grid_for
from .inputs import Inputs, check_vllm_installed

Say = Callable[[str], None]
Progress = Callable[[int, int, str], None]


class EngineNotStarted(RuntimeError):
    """The engine did not start; `.known` when the cause is a known one (its fix is in the
    message), `.unusable` when vLLM cannot even be imported here."""

    def __init__(self, message: str, known: bool = False, unusable: bool = False):
        super().__init__(message)
        self.known, self.unusable = known, unusable


class CollectionService:
    """One run of collections: its Inputs, the artifact folder, and who is told what."""

    def __init__(self, inputs: Inputs, out_dir: Path | None = None, worker: str | None = None,
                 say: Say | None = None):
        self.inputs, self.worker, self.say = inputs, worker, say
        self.out_dir = out_dir or inputs.out_dir   # None: each call names its folder
        self._checked: set[int] = set()   # the specs whose engine config vLLM accepted

    def _folder(self, out_dir: Path | None) -> Path:
        folder = out_dir or self.out_dir
        if folder is None:
            raise ValueError("no artifact folder: give out_dir")
        return Path(folder)

    def spec(self, draft_depth: int) -> EngineSpec:
        """The engine spec of one K (ValueError names what the spec refuses)."""
        return self.inputs.engine.spec(draft_depth)

    def check_engine_config(self, spec: EngineSpec) -> None:
        """vLLM's own config classes on the arguments the engine would start with
        (engine.config_check): EngineNotStarted (unusable) naming the argument, its value
        and vLLM's reason, before any engine starts."""
        from ..engine.config_check import engine_config_refusal
        from ..engine.model_pair import vllm_version
        from .options import spelled
        if id(spec) in self._checked:
            return
        refused = engine_config_refusal(spec)
        if refused is None:
            self._checked.add(id(spec))
            return
        given = spec.user_engine_args
        what = (f"{spelled('engine-arg', self.inputs.cli)}: {refused.name}={refused.value!r}"
                if refused.name in given else
                f"the engine argument {refused.name}={refused.value!r}" if refused.name else
                "the engine's arguments")
        raise EngineNotStarted(f"{what} is refused by vLLM {vllm_version()}'s "
                               f"{refused.config}: {refused.reason}", unusable=True)

    def start(self, spec: EngineSpec) -> Engine:
        """The started engine of `spec`; EngineNotStarted in one line otherwise (vLLM
        missing, another user's engine registry, or the engine's own refusal)."""
        from ..engine.host import registry_dir
        from ..engine.launch import start_engine
        from ..wire.files import ForeignFolder
        from .options import InputError
        try:
            check_vllm_installed()
            registry_dir()   # another user's registry folder: refused before the engine starts
        except InputError as exc:
            raise EngineNotStarted(str(exc), unusable=True) from None
        except ForeignFolder as exc:
            raise EngineNotStarted(f"sdbench: {exc}", unusable=True) from None
        try:
            self.check_engine_config(spec)
            return start_engine(spec)
        except EngineNotStarted:
            raise
        except ImportError as exc:
            raise EngineNotStarted(f"vLLM cannot be imported here ({describe_failure(exc)})",
                                   unusable=True) from exc
        except Exception as exc:
            raise EngineNotStarted(f"the engine did not start: {describe_failure(exc)}",
                                   known=known_fix(exc) is not None) from exc

    def grid(self, engine: Engine) -> Grid:
        """The grid --grid chose for this engine, or the engine's default grid."""
        return grid_for(engine, self.inputs.grid, self.inputs.mixed)

    def collect(self, engine: Engine, mode: str | None = None, grid: Grid | None = None,
                decode_tokens: int | None = None, repeats: RepeatPlan | None = None,
                out_dir: Path | None = None, progress: Progress | None = None,
                quiet: bool = False) -> CollectionRun:
        """One collection on `engine` written as a validated artifact (run.collect): the
        run's mode, grid and repeat plan unless given. quiet: a collection as machinery, said to
        no one."""
        run = collect_to_artifact(
            engine, mode or self.inputs.mode, grid if grid is not None else self.grid(engine),
            self._folder(out_dir), worker=None if quiet else self.worker, progress=progress,
            decode_tokens=decode_tokens, repeats=repeats or self.inputs.repeats,
            notify=None if quiet else self.say)
        return run

    def plot(self, path: Path, artifact: Artifact) -> Path | None:
        """The plots beside an artifact the run wrote, where the run asks for them
        (--plots): their page; None otherwise."""
        if not self.inputs.plots:
            return None
        from ..readers.plot import plot_beside
        return plot_beside(path, artifact)[-1]

    def write_sweep_index(self, written: Sequence[tuple[Artifact, Path]],
                          out_dir: Path | None = None) -> str:
        """The K-sweep index of artifacts of one call, one per K, in the artifact folder;
        the line that describes it."""
        from ..artifact.sweep import describe_sweep_index, write_sweep_index
        index = write_sweep_index(written, self._folder(out_dir))
        return describe_sweep_index(index, written)
