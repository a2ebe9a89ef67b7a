"""Stamps native iteration IDs, freezes snapshots, receives timing samples, joins them."""

from ..wire.records import (
           ObserverCost,
           Provenance,
           QueueSnapshot,
           RejectionCorrection,
           RequestSnapshot,
           Snapshot,
           TimingSample,
)
from .observer import STAMP_ATTR, IterationRecord, NativeObserver, TimingMissing, Window
from .timing import CudaEventTimer, HostTimer, timer_for

__all__ = ["STAMP_ATTR", "CudaEventTimer", "HostTimer", "IterationRecord", "NativeObserver",
           "ObserverCost", "Provenance", "QueueSnapshot", "RejectionCorrection",
           "RequestSnapshot", "Snapshot", "TimingMissing", "TimingSample", "Window",
           "timer_for"]
