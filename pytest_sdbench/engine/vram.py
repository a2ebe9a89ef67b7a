"""Device memory for the VRAM marker: free memory before a test, NVML peak while it runs.
NVML's used memory is sampled on a thread, since NVML keeps no per-process peak. A
tensor-parallel engine has one device per rank; each is sampled, and the mark applies to
each device."""

from __future__ import annotations

import threading

from .host import nvml_handle

GIB = 1 << 30


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


class PeakSampler:
    """Samples the devices' used memory every `interval` seconds; `peaks_gib` is each
    device's max (by torch index), `peak_gib` the largest of them."""

    def __init__(self, device_indices: tuple[int, ...] = (0,), interval: float = 0.005):
        import pynvml
        if not device_indices:
            raise ValueError("device_indices: sample at least one device, got none")
        pynvml.nvmlInit()
        self._nvml = pynvml
        # The indices are torch's (the engine's devices), not NVML's physical ones.
        self._handles = {i: nvml_handle(pynvml, i) for i in device_indices}
        self._interval = interval
        self._stop = threading.Event()
        self.baseline_bytes = self.used_bytes()
        self.peak_bytes = dict(self.baseline_bytes)
        self._thread = threading.Thread(target=self._run, daemon=True, name="sdbench-vram")

    def used_bytes(self) -> dict[int, int]:
        return {i: int(self._nvml.nvmlDeviceGetMemoryInfo(h).used)
                for i, h in self._handles.items()}

    def free_gib(self) -> float:
        """The least free memory of the devices."""
        return min(self._nvml.nvmlDeviceGetMemoryInfo(h).free for h in self._handles.values()
                   ) / GIB

    def _sample(self) -> None:
        for i, used in self.used_bytes().items():
            self.peak_bytes[i] = max(self.peak_bytes[i], used)

    def _run(self):
        while not self._stop.wait(self._interval):
            self._sample()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def peaks_gib(self) -> dict[int, float]:
        return {i: b / GIB for i, b in self.peak_bytes.items()}

    @property
    def peak_gib(self) -> float:
        return max(self.peaks_gib.values())
