"""The suite's own tiers (conftest.py): what keeps its claims true, and its time short, when
two xdist workers share this 2-core host."""

import os
import sys
from pathlib import Path

import pytest


def test_a_worker_of_a_run_in_workers_computes_on_one_thread():
    """Torch's OpenMP threads of a worker (its session engine's, its in-process engines')
    are one: two workers' engines at a thread a core each spin against each other at
    OpenMP's barriers (seen: the session engine's collections 5-15x as long). OpenMP reads
    OMP_NUM_THREADS once, when torch is first imported, which a worker's conftest may do
    before the root conftest's pytest_configure runs there: the controller sets it, and
    each worker starts with it."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2:
        pytest.skip("one process: its threads are the user's (OMP_NUM_THREADS)")
    import torch
    assert torch.get_num_threads() == 1, (
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')!r}, torch computes on "
        f"{torch.get_num_threads()} threads")


def test_pytester_runs_share_the_users_vllm_cache(pytester):
    """A pytester run's HOME is a folder of its own; vLLM's cache (its model classes'
    inspection) stays the user's, as between a user's own runs: a new cache costs each
    pytester run's first engine a subprocess that imports vLLM again (seen: 39 s against
    22 s for `sdbench collect`)."""
    home = Path(os.environ["HOME"])
    assert home == pytester.path   # pytester's own HOME, as its runs see it
    seen = pytester.run(sys.executable, "-c", "import vllm.envs as e; print(e.VLLM_CACHE_ROOT)")
    assert seen.ret == 0, seen.errlines[-5:]
    root = Path(seen.outlines[-1])
    assert home not in (root, *root.parents), f"vLLM's cache {root} lies in {home}"
