"""The environment rules: the contention figures against the contended flag."""

from __future__ import annotations

import math

from ...wire.contract import CONTENTION_OTHER_CORES, DEVICE_CPU
from ...wire.model import Artifact
from .helpers import Err, older_than

# ---- environment -------------------------------------------------------------------------

def check_environment(a: Artifact, err: Err, flags: list[str], legacy) -> None:
    env = a.environment
    if env is None:
        if not older_than(legacy, 4):
            err("environment: null; required since schema_version 4 (null only in artifacts "
                "upgraded from schema_version 3 or older)")
        return
    if env.cpu_count < 1:
        err(f"environment.cpu_count: must be >= 1, got {env.cpu_count}")
    if not math.isfinite(env.other_cpu_cores) or env.other_cpu_cores < 0:
        err(f"environment.other_cpu_cores: must be a finite number >= 0, got "
            f"{env.other_cpu_cores}")
    if env.other_sdbench_engines < 0:
        err(f"environment.other_sdbench_engines: must be >= 0, got "
            f"{env.other_sdbench_engines}")
    gpus = env.other_gpu_processes
    if (gpus is None) != (a.device == DEVICE_CPU) or (gpus is not None and gpus < 0):
        err(f"environment.other_gpu_processes: {gpus} on a {a.device!r} run (null on cpu, a "
            "count >= 0 on cuda)")
    cause = (env.other_cpu_cores > CONTENTION_OTHER_CORES or env.other_sdbench_engines > 0
             or (gpus or 0) > 0)
    if cause and not env.contended:
        err(f"environment.contended: false, yet other_cpu_cores {env.other_cpu_cores} "
            f"(threshold {CONTENTION_OTHER_CORES}), other_sdbench_engines "
            f"{env.other_sdbench_engines}, other_gpu_processes {gpus} say contended")
    if env.contended != bool(env.reason and env.reason.strip()):
        err(f"environment.reason: {env.reason!r} with contended {env.contended}; a contended "
            "run says why, an uncontended one gives no reason")
    if env.contended:
        flags.append(f"environment.contended: {env.reason!r}; its times were measured beside "
                     "other work (kept, flagged)")

