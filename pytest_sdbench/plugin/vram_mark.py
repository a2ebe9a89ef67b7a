"""The sdbench_vram and sdbench_cuda marks, a plugin object of their own (as pytest-xdist
registers its reporter apart from its session): a test marked sdbench_cuda or sdbench_vram
is skipped with the reason where no CUDA device is visible; sdbench_vram(gib) skips a test
when the device has less free memory, samples NVML's used memory on every device of the
engine (one per tensor-parallel rank) while the test runs, fails it when the peak exceeds
the mark, and says each peak in the sdbench summary."""

from __future__ import annotations

import pytest

from ..engine import vram

VRAM_SAMPLER = pytest.StashKey[vram.PeakSampler]()   # the running test's sampler


def vram_mark(mark) -> float:
    if len(mark.args) != 1 or isinstance(mark.args[0], bool) or \
            not isinstance(mark.args[0], (int, float)) or mark.args[0] <= 0:
        raise pytest.UsageError(f"sdbench_vram takes one positive number of GiB, got "
                                f"{mark.args!r}")
    return float(mark.args[0])


class VramMark:
    """Registered as a plugin at configure (plugin.pytest_configure)."""

    name = "sdbench_vram_mark"

    def __init__(self, devices: int, summary: list[str]):
        self.devices = devices     # the engine's devices: one per tensor-parallel rank
        self.summary = summary     # the sdbench summary's vram lines

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_setup(self, item):
        """Skip what cannot run here; start the sampler before fixtures are set up, so that
        an engine started for this test counts towards its peak."""
        if item.get_closest_marker("sdbench_cuda") or item.get_closest_marker("sdbench_vram"):
            if not vram.cuda_available():
                pytest.skip("needs a CUDA device; none is visible (CPU-only machine)")
        mark = item.get_closest_marker("sdbench_vram")
        if mark is not None:
            gib = vram_mark(mark)
            sampler = vram.PeakSampler(tuple(range(self.devices)))
            free = sampler.free_gib()
            if free < gib:
                pytest.skip(f"needs {gib} GiB of free CUDA memory; {free:.2f} GiB free")
            item.stash[VRAM_SAMPLER] = sampler.__enter__()
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        sampler = item.stash.get(VRAM_SAMPLER, None)
        if sampler is None:
            return (yield)
        try:
            result = yield
        finally:
            sampler.__exit__(None, None, None)
            del item.stash[VRAM_SAMPLER]
        gib = vram_mark(item.get_closest_marker("sdbench_vram"))
        for index, device_peak in sampler.peaks_gib.items():
            self.summary.append(
                f"{item.nodeid}: NVML peak {device_peak:.2f} GiB used on device {index} while "
                f"it ran (mark {gib} GiB; {sampler.baseline_bytes[index] / vram.GIB:.2f} GiB "
                "in use before)")
        item.user_properties.append(("sdbench_vram_peak_gib", round(sampler.peak_gib, 3)))
        over = {i: p for i, p in sampler.peaks_gib.items() if p > gib}
        if over:
            pytest.fail("peak device memory exceeds the sdbench_vram mark of "
                        f"{gib} GiB: " + ", ".join(f"device {i}: {p:.2f} GiB"
                                                   for i, p in over.items()))
        return result

    def pytest_runtest_teardown(self, item):
        sampler = item.stash.get(VRAM_SAMPLER, None)
        if sampler is not None:  # setup failed before the call: stop sampling
            sampler.__exit__(None, None, None)
            del item.stash[VRAM_SAMPLER]
