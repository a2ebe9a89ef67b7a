"""The VRAM marker's sampler on a fake NVML: it samples the devices torch (and so the
engine) numbers, which are not NVML's physical indices when CUDA_VISIBLE_DEVICES reorders
or hides devices (as pytest-xdist workers do). No GPU needed."""

import sys
import types

import pytest

from pytest_sdbench.engine.host import CUDA_VISIBLE_ENV
from pytest_sdbench.engine.vram import GIB, PeakSampler


class FakeNVML(types.ModuleType):
    """pynvml with two physical devices (0 and 1) of different use, and one by UUID."""

    def __init__(self):
        super().__init__("pynvml")
        self.used = {("index", 0): 1 * GIB, ("index", 1): 5 * GIB, ("uuid", "GPU-b"): 5 * GIB}
        self.total = 80 * GIB

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("index", index)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return ("uuid", uuid)

    def nvmlDeviceGetMemoryInfo(self, handle):
        used = self.used[handle]
        return types.SimpleNamespace(used=used, free=self.total - used)


@pytest.fixture
def nvml(monkeypatch):
    fake = FakeNVML()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


@pytest.mark.parametrize("visible, want", [
    ("1,0", {0: ("index", 1), 1: ("index", 0)}),
    ("1", {0: ("index", 1)}),
    ("GPU-b,0", {0: ("uuid", "GPU-b"), 1: ("index", 0)}),
    (None, {0: ("index", 0), 1: ("index", 1)}),
])
def test_the_sampler_maps_torch_indices_to_nvml_devices(nvml, monkeypatch, visible, want):
    if visible is None:
        monkeypatch.delenv(CUDA_VISIBLE_ENV, raising=False)
    else:
        monkeypatch.setenv(CUDA_VISIBLE_ENV, visible)
    sampler = PeakSampler(tuple(want))
    assert sampler._handles == want


def test_torch_device_0_is_physical_1_when_listed_first(nvml, monkeypatch):
    """Memory, free memory and the peak of torch's device 0 are physical device 1's."""
    monkeypatch.setenv(CUDA_VISIBLE_ENV, "1,0")
    sampler = PeakSampler((0,), interval=60.0)
    assert sampler.baseline_bytes == {0: 5 * GIB}
    assert sampler.free_gib() == 75.0
    with sampler:
        nvml.used[("index", 1)] = 9 * GIB   # the engine's device fills
        nvml.used[("index", 0)] = 70 * GIB  # another device: none of this test's business
    assert sampler.peaks_gib == {0: 9.0}
