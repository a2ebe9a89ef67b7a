"""Exports of artifacts into what a consumer reads; AISimulate first (`sdbench export`)."""

from .aisimulate import (
           Exported,
           ExportOptions,
           KnownConfig,
           Refused,
           UnusableInput,
           export_artifact,
)

__all__ = ["ExportOptions", "Exported", "KnownConfig", "Refused", "UnusableInput",
           "export_artifact"]
