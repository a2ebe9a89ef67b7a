"""What is written beside a profile by the commands that read it: its fidelity reports
(`sdbench fidelity`, in <stem>-fidelity[...]/fidelity.md), which `sdbench plot` links. One
home for the names, below both."""

from __future__ import annotations

from pathlib import Path

REPORT_MD, FOLDER_SUFFIX = "fidelity.md", "-fidelity"


def folder_beside(profile_path: Path) -> Path:
    """Where a profile's fidelity report goes by default: <stem>-fidelity beside it."""
    return profile_path.with_name(profile_path.name.removesuffix(".json") + FOLDER_SUFFIX)


def reports_beside(profile_path: str | Path) -> list[Path]:
    """The fidelity reports written beside a profile (<stem>-fidelity*/fidelity.md)."""
    path = Path(profile_path)
    stem = path.name.removesuffix(".json")
    return sorted(path.parent.glob(f"{stem}{FOLDER_SUFFIX}*/{REPORT_MD}"))
