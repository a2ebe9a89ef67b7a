"""Constructed serving runs for the fidelity report's tests: steps placed at a profile's own
measured points (each at the median of its repeats, so that a prediction from the profile is
exact there) and beside them, with requests at seeded Poisson arrivals whose latencies are
made up. Pure data: no engine (the engine tests serve real runs)."""

from __future__ import annotations

from pathlib import Path

from pytest_sdbench.fidelity.predict_phases import profile_points
from pytest_sdbench.fidelity.run import save
from pytest_sdbench.fidelity.serve import workload_json
from pytest_sdbench.fidelity.serving_records import RequestRecord, ServingRun, StepRecord
from pytest_sdbench.fidelity.workload import Lengths, Workload, plan
from pytest_sdbench.run.profile import read_profile


def step(iid: int, kind: str, mode: str, seconds: float, *, prefill=(0, 0, 0), decode=(0, 0),
         draft_depth: int = 3) -> StepRecord:
    """A step of prefill (requests, tokens, KV) and decode (requests, KV) parts."""
    (pb, pt, pk), (db, dk) = prefill, decode
    return StepRecord(native_iteration_id=iid, kind=kind, graph_mode=mode, seconds=seconds,
                      prefill_requests=pb, prefill_tokens=pt, prefill_kv_tokens=pk,
                      decode_requests=db, decode_kv_tokens=dk, draft_tokens=db * draft_depth,
                      full_depth_requests=db, accepted_drafts=db if db else None,
                      total_scheduled_tokens=pt + db * (1 + draft_depth), waiting=0,
                      running=pb + db)


def grid_steps(profile: Path) -> list[StepRecord]:
    """One step at each measured point of the profile's run AL, measured as the point's
    median (prefill, decode), then a decode step between two batches, one past the longest
    context, and a mixed step."""
    artifact = read_profile(profile)
    k, al = artifact.speculative.draft_depth, artifact.speculative.synthetic_acceptance_length
    steps = []
    for p in profile_points(artifact):
        iid = len(steps) + 1
        if p.phase == "prefill":
            steps.append(step(iid, "prefill", p.graph_mode, p.seconds,
                              prefill=(p.batch, p.tokens, p.kv), draft_depth=k))
        elif p.acceptance_length == al:
            steps.append(step(iid, "decode", p.graph_mode, p.seconds, decode=(p.batch, p.kv),
                              draft_depth=k))
    decode = [s for s in steps if s.kind == "decode"]
    mode = decode[0].graph_mode
    longest = max(s.decode_kv_tokens / s.decode_requests for s in decode)
    n = len(steps)
    steps += [step(n + 1, "decode", mode, decode[0].seconds, decode=(7, 7 * 1000), draft_depth=k),
              step(n + 2, "decode", mode, decode[0].seconds, decode=(1, int(2 * longest)),
                   draft_depth=k),
              step(n + 3, "mixed", mode, decode[0].seconds, prefill=(1, 200, 0),
                   decode=(2, 2 * 500), draft_depth=k)]
    return steps


def constructed_run(profile: Path, folder: Path, rate: float = 4.0, seed: int = 3) -> Path:
    """A run folder (fidelity-run.json, profile.json) of the profile's grid steps and a
    Poisson workload of 16-token outputs, 3 tokens every 4 ms from 20 ms after arrival."""
    artifact = read_profile(profile)
    workload = Workload("poisson", Lengths(1100, 3000), Lengths(16, 16), seed=seed, rate=rate,
                        duration_seconds=4.0)
    requests = []
    for r in plan(workload):
        assert r.arrival_seconds is not None
        record = RequestRecord(r.index, f"r{r.index}", r.input_tokens, r.output_tokens,
                               r.arrival_seconds, r.arrival_seconds)
        t, sent = r.arrival_seconds + 0.02, 0
        while sent < r.output_tokens:
            tokens = min(3, r.output_tokens - sent)
            record.deliveries.append((t, tokens))
            sent, t = sent + tokens, t + 0.004
        record.finished = record.deliveries[-1][0]
        requests.append(record)
    run = ServingRun(workload.label, workload_json(workload), "2026-12-01T00:00:00+00:00", 4.5,
                     requests, grid_steps(profile), 0,
                     "cuda_event" if artifact.device == "cuda" else "host_perf_counter",
                     {"contended": False}, artifact.speculative.synthetic_acceptance_length)
    save(folder, profile, [run], ["a constructed run: no engine served it"])
    return folder
