"""The consumer's system description in the export: `aisimulate predict` reads
systems/<name>.yaml (the device's hardware: memory, bandwidth, interconnect) from every
folder of the predict config's systems_paths, beside the table under systems/data/. The
YAML is the consumer's, shipped in its package (aisimulate_core/systems/); it is copied in
when that package can be found from this Python, found without importing it (its wheel
brings a top-level package `collector` that stays out of this project's environment), and
otherwise the export says in one line what to add."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import shutil
from pathlib import Path

from .vocabulary import CONSUMER

SYSTEM_PACKAGE = "aisimulate_core"   # the consumer's package that holds systems/<name>.yaml


def packaged_systems() -> Path | None:
    """The consumer's systems/ folder in its installed package, or None where the package
    cannot be found from this Python."""
    try:
        spec = importlib.util.find_spec(SYSTEM_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        if (Path(location) / "systems").is_dir():
            return Path(location) / "systems"
    return None


def _consumer_version() -> str | None:
    try:
        return importlib.metadata.version(CONSUMER)
    except importlib.metadata.PackageNotFoundError:
        return None


def bring_system(systems: Path, system: str, final: Path) -> tuple[dict, str | None]:
    """Copy the consumer's systems/<system>.yaml into ``systems`` (the staging folder's, to be
    renamed to ``final``/systems). Returns the manifest's record of it and, when it could
    not be brought, the one line that says what to add before `aisimulate predict`."""
    name = f"{system}.yaml"
    record: dict = {"path": f"systems/{name}", "source": None, "sha256": None}
    packaged = packaged_systems()
    if packaged is None:
        return record, (f"systems/{name} is not in the export: the consumer's package "
                        f"({SYSTEM_PACKAGE}) is not importable here; before `aisimulate "
                        f"predict -c predict.json`, copy {SYSTEM_PACKAGE}/systems/{name} from "
                        f"the consumer's environment to {final / 'systems'}/ (or export "
                        "from that environment, which brings it in)")
    source = packaged / name
    if not source.is_file():
        known = sorted(p.stem for p in packaged.glob("*.yaml"))
        return record, (f"systems/{name} is not in the export: the consumer's package "
                        f"({packaged}) has no {name} (its systems: {', '.join(known)}); "
                        f"`aisimulate predict` needs one for --system {system}")
    shutil.copyfile(source, systems / name)
    version = _consumer_version()
    record.update(source=f"{CONSUMER} {version or '(version unknown)'}: "
                         f"{SYSTEM_PACKAGE}/systems/{name}",
                  sha256=hashlib.sha256(source.read_bytes()).hexdigest())
    return record, None
