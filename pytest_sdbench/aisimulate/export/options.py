"""What `sdbench export` asks of an export (ExportOptions) and what it gives back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

# --- Options and results --------------------------------------------------------------------

@dataclass(frozen=True)
class KnownConfig:
    """A config.json text the exporter may ship for a model, found by its sha256."""
    text: str
    source: str


@dataclass(frozen=True)
class ExportOptions:
    system: str | None = None
    user_facts: Mapping[str, object] = field(default_factory=dict)
    target_config: Path | None = None      # a config.json, or a directory holding one
    draft_config: Path | None = None
    envelope_only: bool = False
    acceptance_length: float | None = None  # export only the decode points requested at it
    nextn_accepted: float | None = None     # the user's, checked against the rows' AL
    repeats_from: tuple[Path, ...] = ()     # other engine starts: repeatability samples
    graph_modes: Mapping[str, str] = field(default_factory=dict)   # phase -> the mode it keeps
    known_configs: Mapping[str, KnownConfig] = field(default_factory=dict)   # sha256 -> text


@dataclass(frozen=True)
class Exported:
    root: Path
    manifest: dict

