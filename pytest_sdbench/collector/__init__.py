"""Warm-up, measurement policy, phases and restoration around the observer."""

from ..wire.model import DecodeObservation, PrefillObservation, SkippedPoint
from ..wire.shape import decode_mismatch, prefill_mismatch
from .collect import CollectionResult, Collector, PointFailed, check_grid_fits, sampling_params

__all__ = ["CollectionResult", "Collector", "DecodeObservation", "PointFailed",
           "PrefillObservation", "SkippedPoint", "check_grid_fits", "decode_mismatch",
           "prefill_mismatch", "sampling_params"]
