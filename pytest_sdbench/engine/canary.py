"""The host-speed canary: a fixed amount of host work, timed, read before and after every
round of a collection, so that the artifact shows how the host's speed moved under the
numbers (a 0.6B model's steps under CUDA graphs are the host's time: seen on the H200, a
pure-Python loop's 10-second medians ranged -27% to +14% within one idle minute).

- python: a fixed pure-Python loop (the Python side of a step: scheduling, bookkeeping);
- launch (CUDA only): the host time to enqueue CANARY_KERNELS tiny kernels on the engine's
  device (a step's launches), the queue drained before and after, outside any step.
Each value is the median of CANARY_REPS runs. It runs between rounds, never inside a
measured step.
"""

from __future__ import annotations

import statistics
import time

from ..wire.contract import CANARY_KERNELS, CANARY_LOOP_ITERATIONS, CANARY_REPS, DEVICE_CUDA
from ..wire.rounds import CanarySample


def _python_loop() -> float:
    started = time.perf_counter()
    total = 0
    for i in range(CANARY_LOOP_ITERATIONS):
        total += i * i % 7
    elapsed = time.perf_counter() - started
    if total < 0:   # never: keeps the loop's result alive
        raise AssertionError(total)
    return elapsed


def _kernel_launches() -> float:
    import torch
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(CANARY_KERNELS):
        x.add_(1.0)
    elapsed = time.perf_counter() - started
    torch.cuda.synchronize()
    return elapsed


def measure_canary(device: str) -> CanarySample:
    python = statistics.median(_python_loop() for _ in range(CANARY_REPS))
    launch = (statistics.median(_kernel_launches() for _ in range(CANARY_REPS))
              if device == DEVICE_CUDA else None)
    return CanarySample(python_seconds=python, launch_seconds=launch)
