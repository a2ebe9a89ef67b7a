"""The GPU's clock beside each work item, read from NVML (as nvbench records every sample's
measured clock): the SM clock and the clock event reasons right before a measured run and
right after it. Never inside a step and never a synchronisation: NVML is read on the host
between steps. On CPU there is no clock to read (None).
"""

from __future__ import annotations

from ..wire.contract import CLOCK_REASONS, DEVICE_CUDA
from ..wire.records import GpuClock
from .host import nvml_handle

# NVML's clock event reason bits (nvml.h, nvmlClocksEventReason*), in CLOCK_REASONS' order.
_REASON_BITS = dict(zip(CLOCK_REASONS, (0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100),
                        strict=True))


class ClockUnavailable(RuntimeError):
    """A CUDA engine whose GPU clock NVML cannot read (no nvidia-ml-py, no driver)."""


class ClockReader:
    """Reads one device's SM clock (MHz) and active clock event reasons."""

    def __init__(self, torch_index: int):
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = nvml_handle(pynvml, torch_index)
            self.max_sm_mhz = int(pynvml.nvmlDeviceGetMaxClockInfo(self._handle,
                                                                   pynvml.NVML_CLOCK_SM))
        except Exception as exc:  # noqa: BLE001 (any NVML failure: the clock is unreadable)
            raise ClockUnavailable(f"NVML cannot read the GPU clock of device {torch_index} "
                                   f"({type(exc).__name__}: {exc}); install nvidia-ml-py") from None

    def read(self) -> tuple[int, tuple[str, ...]]:
        nvml, handle = self._nvml, self._handle
        mhz = int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        get = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        bits = int(get(handle))
        return mhz, tuple(name for name, bit in _REASON_BITS.items() if bits & bit)

    def since(self, before: tuple[int, tuple[str, ...]] | None) -> GpuClock | None:
        """The clock over a run: `before` (read() right before it) and a reading now."""
        if before is None:
            return None
        after = self.read()
        reasons = tuple(sorted(set(before[1]) | set(after[1]), key=CLOCK_REASONS.index))
        return GpuClock(sm_mhz_before=before[0], sm_mhz_after=after[0],
                        max_sm_mhz=self.max_sm_mhz, reasons=reasons,  # type: ignore[arg-type]
                        capped=GpuClock.capped_by(reasons))


class NoClock:
    """A CPU engine's: no GPU clock to read."""

    def read(self) -> None:
        return None

    def since(self, before: tuple[int, tuple[str, ...]] | None) -> None:
        return None


def open_clock(device: str) -> ClockReader | NoClock:
    """The reader of the engine's current CUDA device; NoClock on CPU."""
    if device != DEVICE_CUDA:
        return NoClock()
    import torch
    return ClockReader(torch.cuda.current_device())
