"""`sdbench crosscheck PROFILE`: does this profile describe my engine? On the device the
profile was collected on, start vLLM alone with the profile's engine settings (no observer,
no hook, no timer of this project: vLLM's own engine, by default its multiprocess engine
core as `vllm serve` runs it) and measure its steady decode step at the profile's decode
points by a method that uses none of this project's timing:

    the wall-time slope between two runs of the same B prompts of the point's context, one
    generating SHORT output tokens and one LONG, both admitted from the prefix cache (the
    prompts are computed once first), divided by the engine steps between them, counted by
    vLLM's own spec-decode counter (`vllm:spec_decode_num_drafts` / B: each running request
    drafts once a step).

Prefill and admission cost cancel in the slope; what is left is the step the engine runs
while it serves. The report gives profile/vLLM per point, then the median and p90 of
|profile/vLLM - 1|, as a table, JSON and (with matplotlib) a plot; beside each point the
GPU clock during vLLM's run and the capped samples of the profile's point.

A point vLLM alone cannot run this way is listed unmeasured, with why (`unmeasurable`): an
AL other than the engine's synthetic one, or a context whose long run would reach
max_model_len (vLLM ends the run at the limit, so the steps the slope divides by did not all
run). Prefill points are not cross-checked: a prefill-only run's wall time holds the admission
and the frontend, which a forward-pass row does not, so no slope isolates its step.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..wire.contract import DEVICE_CUDA, GENERATION_SAMPLING, PHASE_DECODE
from ..wire.files import atomic_write_text
from ..wire.model import Artifact, DecodeObservation
from ..wire.points import DecodePoint, decode_run_tokens

ENGINE_CORES = ("multiprocess", "inprocess")
SHORT_TOKENS, LONG_TOKENS = 16, 80     # output tokens of the two runs of a slope
DEFAULT_REPEATS = 5                    # slopes a point; its figure is their median
REPORT_KIND, REPORT_VERSION = "pytest-sdbench/crosscheck", 1
DRAFTS_METRIC = "vllm:spec_decode_num_drafts"


class CrosscheckUnusable(ValueError):
    """The profile or the options cannot be cross-checked (said before an engine starts)."""


@dataclass(frozen=True)
class PointCheck:
    point_index: int
    batch_size: int
    context_tokens: int
    profile_seconds: float          # the profile's summary median
    profile_capped: int             # the point's samples taken while the GPU was capped
    profile_samples: int
    vllm_seconds: float | None      # median of the slopes (None: not measured, see note)
    vllm_slopes: tuple[float, ...]
    vllm_sm_mhz: tuple[int, ...]    # the GPU's SM clock read before and after each run pair
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return self.profile_seconds / self.vllm_seconds if self.vllm_seconds else None


# ---- what is checked ----------------------------------------------------------------------

def decode_points(artifact: Artifact) -> list[tuple[int, DecodePoint, list[DecodeObservation]]]:
    """The profile's decode points with their observations, grid order."""
    by_point: dict[int, list[DecodeObservation]] = {}
    for obs in artifact.decode:
        by_point.setdefault(obs.point_index, []).append(obs)
    return [(i, artifact.grid.decode[i], by_point[i]) for i in sorted(by_point)]


def check_profile(artifact: Artifact, cuda: bool) -> None:
    if not artifact.decode:
        raise CrosscheckUnusable("the profile has no decode observations to cross-check")
    if (artifact.device == DEVICE_CUDA) != cuda:
        here = "a CUDA device" if cuda else "no CUDA device"
        raise CrosscheckUnusable(f"device: the profile was collected on {artifact.device!r}; "
                                 f"this machine has {here}; cross-check it where it was "
                                 "collected")


def unmeasurable(artifact: Artifact, point: DecodePoint) -> str:
    """Why vLLM alone cannot run this point's slope ("" when it can): a point of another AL
    than the engine's synthetic one, or a context whose LONG run would stop at
    max_model_len (fewer steps than its drafts count, so the slope would not be a step)."""
    synthetic = artifact.speculative.synthetic_acceptance_length
    if point.acceptance_length != synthetic:
        return f"AL {point.acceptance_length} is not the engine's synthetic AL {synthetic}"
    max_len = artifact.identity.settings.max_model_len.value
    if type(max_len) is int and decode_run_tokens(point, LONG_TOKENS) > max_len:
        return (f"context_tokens {point.context_tokens} + {LONG_TOKENS} output tokens + K "
                f"exceeds max_model_len {max_len}: the long run would stop at the limit")
    return ""


# ---- vLLM alone ---------------------------------------------------------------------------

def _env(engine_core: str) -> dict[str, str | None]:
    """vLLM's own environment for the run: its multiprocess engine core (as `vllm serve`)
    or in-process; offline. Returns what it replaced."""
    wanted = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1" if engine_core == "multiprocess" else "0",
              # the check for a CUDA device before the start initialised CUDA here: its
              # engine core cannot be forked from this process
              "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
              "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
              "VLLM_USE_FLASHINFER_SAMPLER": os.environ.get("VLLM_USE_FLASHINFER_SAMPLER",
                                                            "0")}
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    return saved


def _drafts(llm) -> float:
    total = 0.0
    for metric in llm.get_metrics():
        if metric.name == DRAFTS_METRIC:
            total += float(getattr(metric, "value", 0.0))
    return total


class VllmAlone:
    """vLLM's LLM with the profile's settings and nothing of this project inside it."""

    def __init__(self, artifact: Artifact, engine_core: str):
        self._saved = _env(engine_core)
        from vllm import LLM, SamplingParams
        self._params = SamplingParams
        started = time.perf_counter()
        from ..run.profile import vllm_kwargs
        self.llm = LLM(**vllm_kwargs(artifact))
        self.start_seconds = time.perf_counter() - started
        self.vocab = int(self.llm.llm_engine.model_config.get_vocab_size())
        self._next = 3   # token ids from a stream of its own: no prompt is replayed
        self.clock = None
        if artifact.device == DEVICE_CUDA:
            from ..engine.clock import ClockReader
            self.clock = ClockReader(0)

    def _prompts(self, batch: int, context: int) -> list[dict]:
        prompts = []
        for _ in range(batch):
            ids = [(self._next + j) % (self.vocab - 3) + 3 for j in range(context)]
            self._next += context
            prompts.append({"prompt_token_ids": ids})
        return prompts

    def _timed(self, prompts, max_tokens: int) -> tuple[float, float]:
        params = self._params(max_tokens=max_tokens, **GENERATION_SAMPLING)
        drafts = _drafts(self.llm)
        started = time.perf_counter()
        self.llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - started
        return seconds, _drafts(self.llm) - drafts

    def slope(self, batch: int, context: int, repeats: int) -> tuple[list[float], list[int]]:
        """Seconds a step between a SHORT and a LONG run of the same cached prompts."""
        prompts = self._prompts(batch, context)
        self._timed(prompts, 1)                      # computed once: the runs hit the cache
        self._timed(prompts, SHORT_TOKENS)           # and one unbooked pass of the shape
        slopes, clocks = [], []
        for _ in range(repeats):
            clocks.append(self.clock.read()[0] if self.clock else 0)
            short, short_drafts = self._timed(prompts, SHORT_TOKENS)
            long, long_drafts = self._timed(prompts, LONG_TOKENS)
            clocks.append(self.clock.read()[0] if self.clock else 0)
            steps = (long_drafts - short_drafts) / batch
            if steps <= 0:
                raise RuntimeError(f"{DRAFTS_METRIC} did not count the steps of B={batch} "
                                   f"ctx={context} (stats off?)")
            slopes.append((long - short) / steps)
        return slopes, [c for c in clocks if c]

    def shutdown(self) -> None:
        import gc
        del self.llm
        gc.collect()
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def crosscheck(artifact: Artifact, engine_core: str = "multiprocess",
               repeats: int = DEFAULT_REPEATS, say=lambda line: None) -> dict:
    """Start vLLM alone, measure every decode point of the profile, and return the report."""
    engine = VllmAlone(artifact, engine_core)
    say(f"vLLM alone ({engine_core} engine core) started in {engine.start_seconds:.1f} s")
    checks = []
    try:
        for index, point, observations in decode_points(artifact):
            summary = next(s for s in artifact.summaries
                           if s.phase == PHASE_DECODE and s.point_index == index)
            capped = sum(1 for o in observations if o.gpu_clock and o.gpu_clock.capped)
            base: dict[str, Any] = dict(point_index=index, batch_size=point.batch_size,
                        context_tokens=point.context_tokens,
                        profile_seconds=summary.median_seconds, profile_capped=capped,
                        profile_samples=len(observations))
            why = unmeasurable(artifact, point)
            if why:
                checks.append(PointCheck(**base, vllm_seconds=None, vllm_slopes=(),
                                         vllm_sm_mhz=(), note=why))
                continue
            slopes, clocks = engine.slope(point.batch_size, point.context_tokens, repeats)
            step = statistics.median(slopes)
            check = PointCheck(**base, vllm_seconds=step, vllm_slopes=tuple(slopes),
                               vllm_sm_mhz=tuple(clocks))
            say(f"decode[{index}] B={point.batch_size} ctx={point.context_tokens}: profile "
                f"{summary.median_seconds * 1e3:.3f} ms, vLLM {step * 1e3:.3f} ms "
                f"({summary.median_seconds / step - 1:+.1%})")
            checks.append(check)
    finally:
        start_seconds = engine.start_seconds
        engine.shutdown()
    return build_report(artifact, checks, engine_core, repeats, start_seconds)


# ---- the report ---------------------------------------------------------------------------

def _quantile(values: list[float], q: float) -> float:
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, round(q * (len(ranked) - 1))))]


def build_report(artifact: Artifact, checks: list[PointCheck], engine_core: str,
                 repeats: int, start_seconds: float) -> dict:
    errors = [abs(c.ratio - 1) for c in checks if c.ratio is not None]
    return {
        "kind": REPORT_KIND, "version": REPORT_VERSION, "profile_run_id": artifact.run_id,
        "device": artifact.device,
        "device_name": str(artifact.identity.device_name.value),
        "engine_core": engine_core, "method": (
            f"wall-time slope between {SHORT_TOKENS} and {LONG_TOKENS} output tokens of the "
            f"same prefix-cached prompts over the steps vLLM's {DRAFTS_METRIC} counts; median "
            f"of {repeats} slopes a point"),
        "vllm_start_seconds": start_seconds,
        "points": [{**asdict(c), "ratio": c.ratio} for c in checks],
        "measured": len(errors),
        "median_abs_error": statistics.median(errors) if errors else None,
        "p90_abs_error": _quantile(errors, 0.9) if errors else None,
        "max_abs_error": max(errors) if errors else None,
    }


def table(report: dict) -> str:
    lines = [f"crosscheck of profile {report['profile_run_id']} on {report['device_name']} "
             f"({report['engine_core']} engine core; {report['method']})",
             f"{'point':<11} {'B':>3} {'ctx':>6} {'profile ms':>10} {'vLLM ms':>9} "
             f"{'profile/vLLM':>12} {'capped':>7} {'vLLM MHz':>9}"]
    for p in report["points"]:
        vllm = f"{p['vllm_seconds'] * 1e3:9.3f}" if p["vllm_seconds"] else f"{'-':>9}"
        ratio = f"{p['ratio']:12.3f}" if p["ratio"] else f"{'-':>12}"
        mhz = f"{statistics.median(p['vllm_sm_mhz']):9.0f}" if p["vllm_sm_mhz"] else f"{'-':>9}"
        lines.append(f"decode[{p['point_index']}]".ljust(11) +
                     f" {p['batch_size']:>3} {p['context_tokens']:>6} "
                     f"{p['profile_seconds'] * 1e3:10.3f} {vllm} {ratio} "
                     f"{p['profile_capped']:>3}/{p['profile_samples']:<3} {mhz}"
                     + (f"  ({p['note']})" if p["note"] else ""))
    if report["measured"]:
        lines.append(f"|profile/vLLM - 1| over {report['measured']} points: median "
                     f"{report['median_abs_error']:.1%}, p90 {report['p90_abs_error']:.1%}, max "
                     f"{report['max_abs_error']:.1%}")
    return "\n".join(lines)


def plot(report: dict, path: Path) -> Path:
    from ..readers.figures import require_matplotlib
    require_matplotlib()
    from matplotlib.figure import Figure
    points = [p for p in report["points"] if p["ratio"]]
    fig = Figure(figsize=(9.0, 4.5))
    ax = fig.subplots()
    for context in sorted({p["context_tokens"] for p in points}):
        line = sorted((p for p in points if p["context_tokens"] == context),
                      key=lambda p: p["batch_size"])
        ax.plot([p["batch_size"] for p in line], [p["ratio"] for p in line], "o-",
                label=f"ctx {context}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("profile / vLLM alone")
    ax.set_title(f"crosscheck ({report['engine_core']}): median |error| "
                 f"{report['median_abs_error']:.1%}")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def write(report: dict, out: Path, plots: bool) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    stem = f"crosscheck-{report['engine_core']}"
    written = [out / f"{stem}.json", out / f"{stem}.txt"]
    atomic_write_text(written[0], json.dumps(report, indent=1) + "\n")
    atomic_write_text(written[1], table(report) + "\n")
    if plots and report["measured"]:
        try:
            written.append(plot(report, out / f"{stem}.png"))
        except (ImportError, RuntimeError) as exc:   # PlotUnavailable is a RuntimeError
            print(f"sdbench crosscheck: no plot ({exc})", file=sys.stderr)
    return written
