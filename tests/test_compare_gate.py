"""`sdbench compare` as a gate that can be trusted, on the real CPU engine (issue 17, item
6): two collections of the same code, in rounds, pass; the same code with a real slowdown
injected into the engine's step fails, naming the points.

The slowdown is a test-only wrapper, not an edited file: the worker's execute_model and
sample_tokens (the engine's own step, inside the timed scope) are wrapped so that, when the
step's last call returns, the step spins for EXTRA times as long as it took, so every step
of the slowed collection does its real work and then that much again, measured: the wrapper
records what it added to each native iteration, and the test reports it beside the change
the gate saw.

All the collections run on the session's one engine (no engine start of their own), one
after another: the baseline, the same code again, the slowed code. A collection that its
own host monitor marks contended (another process's work beside it; the gate refuses such
a side) is collected again, up to ATTEMPTS times; should the host stay contended, the test
asserts the gate's refusal and then skips, saying so: the verdicts were not judged, so it
never passes. Each collection draws its rounds' order from a seed of its own (recorded), so
that no two measure their points in the same order.

Host noise that no monitor flags (this 2-core host runs in two speeds; a point's median of
7 rounds can land in either): when the verdicts do not hold, the test reads the noise the
run itself measured (unsteady()): the gate's host canary, baseline against each candidate,
moved beyond its own noise or varied within a side beyond the gate's HOST_STEADY_CV (the
host changed speed during that collection), or a point's CV across rounds is beyond
MAX_STEADY_POINT_CV.
- none of it: the host was steady, and the gate's verdicts are wrong: the test fails at once;
- some of it: the three collections are made again (NOISY_ATTEMPTS in all); the test passes
  only when one attempt's verdicts all hold (the same code passes, the slowed code fails
  with every point named), and skips, naming the noise it measured, when the host stayed
  unsteady in every attempt. It never passes on verdicts that did not hold.
It runs `exclusive` (conftest.py): no other test of the run beside it.
"""

from __future__ import annotations

import statistics
import time
from collections import deque

import pytest

from pytest_sdbench.cli import main
from pytest_sdbench.engine import compat
from pytest_sdbench.measure.observer import STAMP_ATTR
from pytest_sdbench.readers.compare import HOST_SLOWER, IMPROVED, OK, REGRESSED, compare
from pytest_sdbench.wire.contract import MIN_ROUNDS_FOR_NOISE
from pytest_sdbench.wire.points import parse_grid
from pytest_sdbench.wire.rounds import RepeatPlan

pytestmark = [pytest.mark.sdbench_engine, pytest.mark.exclusive]

# Rounds of each collection, an odd number: the median of 7 holds while 3 of them are
# disturbed, and the bound is z * 1.2533 * sqrt(2/7) = 2.7 x the CV across rounds. On this
# 2-core host the tiny preset's steps vary by a CV of ~20% across rounds (the host runs in
# two speeds, its canary 1.2 or 2.1 ms, and a collection may sit mostly in one), so the
# bound is ~55%, and the canaries of two collections differ by up to ~40%.
ROUNDS = 7
# The injected work, as a multiple of the step's own time: 2 makes each step 3x as long
# (+200%), unmistakable beside that noise even when the slowed collection runs in the
# host's faster speed (a doubled step then shows as +40..+70%, within the bound).
EXTRA = 2.0
ATTEMPTS = 2
# Collections of all three, again, while the run's own measurements say the host was unsteady.
NOISY_ATTEMPTS = 2
# A point's CV across rounds beyond which the host, not the point, moved: the tiny preset's
# points run at a CV of 10-25% on this host when it is steady; 147% was seen once, the one
# disturbed round of a point that made its bound 281% and hid the slowed step.
MAX_STEADY_POINT_CV = 0.5
# The order seed of each collection: a different order for each.
SEEDS = {"baseline": 0, "same-code": 1, "slowed": 2}


@pytest.fixture(scope="module")
def gate_grid(sdbench_engine):
    """Five points of both phases, steps of ten to a hundred milliseconds on CPU."""
    block, k = sdbench_engine.block_size, sdbench_engine.spec.draft_depth
    al = sdbench_engine.spec.synthetic_acceptance_length
    return parse_grid({
        "prefill": [{"batch_size": 1, "new_tokens": 64, "cached_prefix_tokens": 0},
                    {"batch_size": 2, "new_tokens": 2 * block, "cached_prefix_tokens": block}],
        "decode": [{"batch_size": 1, "context_tokens": 128, "draft_depth": k,
                    "acceptance_length": al},
                   {"batch_size": 2, "context_tokens": 256, "draft_depth": k,
                    "acceptance_length": al},
                   {"batch_size": 4, "context_tokens": 128, "draft_depth": k,
                    "acceptance_length": al}]})


class SlowedStep:
    """The worker's step made (1 + extra) times as long. A step is execute_model, and when
    that returns None (sampling and drafting follow) the next sample_tokens: when the step's
    last call returns, spin for `extra` times the time since execute_model was entered.
    Installed on the worker's class, so that the instance the engine's restoration check
    reads is untouched; records the seconds added to each stamped native iteration."""

    def __init__(self, cls, extra: float):
        self.execute, self.sample, self.extra = cls.execute_model, cls.sample_tokens, extra
        self.pending: deque[tuple[int | None, float]] = deque()
        self.added: dict[int, float] = {}

    def _spin(self, iid: int | None, entered: float) -> None:
        took = time.perf_counter() - entered
        deadline = time.perf_counter() + self.extra * took
        while time.perf_counter() < deadline:
            pass
        if iid is not None:
            self.added[iid] = time.perf_counter() - entered - took

    def execute_model(self, worker, scheduler_output, *args, **kwargs):
        entered = time.perf_counter()
        output = self.execute(worker, scheduler_output, *args, **kwargs)
        iid = getattr(scheduler_output, STAMP_ATTR, None)
        if output is None:
            self.pending.append((iid, entered))
        else:
            self._spin(iid, entered)
        return output

    def sample_tokens(self, worker, *args, **kwargs):
        output = self.sample(worker, *args, **kwargs)
        if self.pending:
            self._spin(*self.pending.popleft())
        return output

    def install(self, monkeypatch, cls) -> None:
        monkeypatch.setattr(cls, "execute_model",
                            lambda worker, *a, **kw: self.execute_model(worker, *a, **kw))
        monkeypatch.setattr(cls, "sample_tokens",
                            lambda worker, *a, **kw: self.sample_tokens(worker, *a, **kw))


def _collect(sdbench_collect, grid, note, label: str):
    """A collection in ROUNDS rounds, collected again (up to ATTEMPTS) while its own host
    monitor marks it contended."""
    for attempt in range(1, ATTEMPTS + 1):
        run = sdbench_collect("agg", grid, repeats=RepeatPlan(repeats=ROUNDS,
                                                              seed=SEEDS[label]))
        env = run.artifact.environment
        if not env.contended:
            return run
        note(f"compare gate: the {label} collection ran contended ({env.reason}), attempt "
             f"{attempt}/{ATTEMPTS}")
    return run


def _contended(*runs) -> bool:
    return any(r.artifact.environment.contended for r in runs)


def _verdicts(result) -> dict[str, str]:
    return {f"{p.phase} {p.coordinates}": p.verdict for p in result.points}


def unsteady(base, cand, result) -> str | None:
    """What the run measured of the host's noise beyond what the gate's bound holds for,
    between a baseline and a candidate (None: the host was steady): the host canary moved
    (the gate's own comparison, beyond the canary's noise) or varied within a side (the
    gate's host line says so), or a point's CV across rounds is beyond MAX_STEADY_POINT_CV."""
    said = []
    if result.host.unsteady or any(w.slower or w.faster for w in result.host.workloads):
        said.append(result.host.line())
    for label, run in (("baseline", base), ("candidate", cand)):
        worst = max((s for s in run.artifact.summaries if s.samples > 1), key=lambda s: s.cv)
        if worst.cv > MAX_STEADY_POINT_CV:
            said.append(f"{label}: {worst.phase} point {worst.point_index} CV across rounds "
                        f"{100 * worst.cv:.0f}% (> {100 * MAX_STEADY_POINT_CV:.0f}%)")
    return "; ".join(said) or None


def _claim_failures(base, same, slowed, capsys) -> tuple[list[str], list[str]]:
    """What of the gate's claim did not hold on these collections (empty: all of it held),
    and the host noise measured beside each failed half."""
    failed, noise = [], []
    code = main(["compare", str(base.path), str(same.path)])
    same_text = capsys.readouterr().out
    same_result = compare(base.artifact, same.artifact)
    if (code != 0 or same_result.problems
            or not set(_verdicts(same_result).values()) <= {OK, IMPROVED, HOST_SLOWER}
            or not same_text.rstrip().splitlines()[-1].startswith("PASS")):
        failed.append(f"the same code: exit {code}, "
                      f"{same_text.rstrip().splitlines()[-1]}\n{same_text}")
        noise.append(unsteady(base, same, same_result))

    code = main(["compare", str(base.path), str(slowed.path)])
    slowed_text = capsys.readouterr().out
    slowed_result = compare(base.artifact, slowed.artifact)
    verdict = slowed_text.rstrip().splitlines()[-1]
    named = all(f"{p.phase} {p.coordinates} {p.change_pct:+.1f}%" in verdict
                for p in slowed_result.points)
    if (code != 1 or slowed_result.problems
            or set(_verdicts(slowed_result).values()) != {REGRESSED}
            or not verdict.startswith(f"FAIL: {len(slowed_result.points)} point(s) regressed ")
            or not named):
        failed.append(f"the slowed code: exit {code}, {verdict}\n{slowed_text}")
        noise.append(unsteady(base, slowed, slowed_result))
    return failed, noise


def test_the_gate_passes_the_same_code_and_fails_a_slowed_step_naming_the_points(
        sdbench_collect, sdbench_engine, gate_grid, monkeypatch, capsys, sdbench_note):
    for attempt in range(1, NOISY_ATTEMPTS + 1):
        base, same, slowed, slowed_step = _three_collections(
            sdbench_collect, sdbench_engine, gate_grid, monkeypatch, capsys, sdbench_note)
        failed, noise = _claim_failures(base, same, slowed, capsys)
        if not failed:
            break
        if not all(noise):
            pytest.fail("the host was steady (no noise measured beyond the bound's) and the "
                        "gate's verdicts did not hold:\n" + "\n".join(failed), pytrace=False)
        measured = "; ".join(n for n in noise if n)
        sdbench_note(f"compare gate: attempt {attempt}/{NOISY_ATTEMPTS}: the host was "
                     f"unsteady ({measured}); the verdicts did not hold")
        if attempt == NOISY_ATTEMPTS:
            pytest.skip(f"the host stayed unsteady over {NOISY_ATTEMPTS} attempts ({measured}): "
                        "the gate's verdicts did not hold and were not judged, never passed: "
                        + " | ".join(f.splitlines()[0] for f in failed))

    same_result = compare(base.artifact, same.artifact)
    slowed_result = compare(base.artifact, slowed.artifact)
    steps = (*slowed.artifact.prefill, *slowed.artifact.decode)
    share = statistics.median(slowed_step.added[o.native_iteration_id] / o.timing.seconds
                              for o in steps)
    added_ms = 1e3 * statistics.median(slowed_step.added[o.native_iteration_id]
                                       for o in steps)
    changes = [p.change_pct or 0.0 for p in slowed_result.points]
    same_changes = [p.change_pct or 0.0 for p in same_result.points]
    sdbench_note(f"compare gate, {ROUNDS} rounds (attempt {attempt}): same code: changes "
                 f"{min(same_changes):+.1f}..{max(same_changes):+.1f}%, "
                 f"{len(same_result.regressed)} regressed; slowed step (median "
                 f"{added_ms:.2f} ms added to a measured step, {100 * share:.0f}% of its "
                 f"time): changes {min(changes):+.1f}..{max(changes):+.1f}%, "
                 f"{len(slowed_result.regressed)} regressed")


def _three_collections(sdbench_collect, sdbench_engine, gate_grid, monkeypatch, capsys,
                       sdbench_note):
    """The baseline, the same code and the slowed code, each checked for what it is; a
    contended one refused by the gate and the test skipped (never passed)."""
    base = _collect(sdbench_collect, gate_grid, sdbench_note, "baseline")
    same = _collect(sdbench_collect, gate_grid, sdbench_note, "same-code")
    cls = type(compat.worker(sdbench_engine.llm))
    own = {name: vars(cls).get(name) for name in ("execute_model", "sample_tokens")}
    slowed_step = SlowedStep(cls, EXTRA)
    slowed_step.install(monkeypatch, cls)
    slowed = _collect(sdbench_collect, gate_grid, sdbench_note, "slowed")
    monkeypatch.undo()
    assert {name: vars(cls).get(name) for name in own} == own   # the class as it was

    for run in (base, same, slowed):
        assert len(run.artifact.rounds) == ROUNDS >= MIN_ROUNDS_FOR_NOISE
    assert [r.artifact.measurement_policy.order_seed for r in (base, same, slowed)] == \
        list(SEEDS.values())
    # What the wrapper added to each measured step: its share of the step's time.
    steps = (*slowed.artifact.prefill, *slowed.artifact.decode)
    assert all(slowed_step.added.get(o.native_iteration_id, 0) > 0 for o in steps)
    share = statistics.median(slowed_step.added[o.native_iteration_id] / o.timing.seconds
                              for o in steps)
    assert share == pytest.approx(EXTRA / (1 + EXTRA), abs=0.05)   # the step, (1+EXTRA)x

    if _contended(base, slowed) or _contended(base, same):
        # The gate must refuse a contended side; its verdicts are not judged: a skip, never
        # a pass.
        for cand in (same, slowed):
            if _contended(base, cand):
                assert main(["compare", str(base.path), str(cand.path)]) == 1
                assert "ran contended" in capsys.readouterr().out
        reasons = "; ".join(sorted({r.artifact.environment.reason or "" for r in
                                    (base, same, slowed) if r.artifact.environment.contended}))
        sdbench_note(f"compare gate: the host stayed contended ({reasons}); skipped")
        pytest.skip(f"the host stayed contended over {ATTEMPTS} attempts ({reasons}): the "
                    "gate refused the contended side, as it must; its verdicts were not "
                    "judged")
    return base, same, slowed, slowed_step
