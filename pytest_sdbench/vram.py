"""Device memory for the VRAM marker: free memory before a test, NVML peak while it runs.
NVML's used memory is sampled on a thread, since NVML keeps no per-process peak."""

from __future__ import annotations

import threading

GIB = 1 << 30


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


class PeakSampler:
    """Samples the device's used memory every `interval` seconds; `peak_gib` is the max."""

    def __init__(self, device_index: int = 0, interval: float = 0.005):
        import pynvml
        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        self._interval = interval
        self._stop = threading.Event()
        self.baseline_bytes = self.used_bytes()
        self.peak_bytes = self.baseline_bytes
        self._thread = threading.Thread(target=self._run, daemon=True, name="sdbench-vram")

    def used_bytes(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def free_gib(self) -> float:
        return self._nvml.nvmlDeviceGetMemoryInfo(self._handle).free / GIB

    def _run(self):
        while not self._stop.wait(self._interval):
            self.peak_bytes = max(self.peak_bytes, self.used_bytes())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak_bytes = max(self.peak_bytes, self.used_bytes())

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / GIB
