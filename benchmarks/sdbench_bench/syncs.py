"""Host-device synchronisations the observer adds a step, counted by torch's sync debug mode
over one decode run with the observer recording (a measured window open: every step frozen
and timed; the window's drain, at idle, is outside the counted run on purpose), against the
engine alone; a positive control (one .item()) shows the method sees a sync."""

from __future__ import annotations

import contextlib
import warnings

from pytest_sdbench.measure.runs import sampling_params

from .goals import SYNCS
from .probes import HostProfile, decode_prompts, observed


@contextlib.contextmanager
def _counted():
    """Warnings of torch's sync debug mode, collected while the block runs."""
    import torch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield caught
        finally:
            torch.cuda.set_sync_debug_mode("default")


def _syncs(caught) -> int:
    return sum("synchroniz" in str(w.message) for w in caught)


def run(bench) -> None:
    engine, sizes = bench.engine, bench.sizes
    if bench.cache.get("syncs"):   # counted already (overhead counts them on CUDA)
        return
    bench.cache["syncs"] = True
    if engine.device != "cuda":
        bench.table.row("host-device syncs added per step", "n/a: no device on CPU")
        return
    import torch

    def count(with_observer: bool) -> tuple[int, int, int]:
        """(syncs, steps, steps timed by the window) of one decode run."""
        prompts = decode_prompts(engine, sizes.batch, sizes.context)
        with HostProfile(engine).installed() as host, \
                (observed(engine) if with_observer else contextlib.nullcontext()) as window:
            with _counted() as caught:
                engine.generate(prompts, sampling_params(sizes.sync_tokens))
        timed = sum(r.timing is not None for r in window.records) if window else 0
        return _syncs(caught), host.steps, timed

    with _counted() as caught:  # the method must see a real sync
        torch.ones(1, device="cuda").item()
    control = _syncs(caught)
    count(False)
    base, base_steps, _ = count(False)
    obs, obs_steps, timed = count(True)
    per_step = obs / max(obs_steps, 1) - base / max(base_steps, 1)
    bench.table.row("host-device syncs added per step (torch sync debug mode)",
                    f"{per_step:+.3f} (engine alone {base} in {base_steps} steps; with the "
                    f"observer recording {obs} in {obs_steps} steps, {timed} of them timed; "
                    f"positive control: one .item() counted {control})",
                    (SYNCS, round(per_step, 9)), valid=control >= 1 and timed > 0)
