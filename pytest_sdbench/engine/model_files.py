"""What a checkpoint folder on disk says about itself, read without vLLM or torch: its
config.json, the weight files vLLM's default loader would pick for a load format, the
tensor names and shapes in its safetensors headers, and the commit of the Hugging Face cache
snapshot it lies in (`models--ORG--NAME/snapshots/<commit>/`)."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

from ..wire.contract import REVISION_PATTERN

# The hub's cache keeps each fetched revision as snapshots/<the commit it resolved to>/.
SNAPSHOTS = "snapshots"
_SNAPSHOT = re.compile(rf"/{SNAPSHOTS}/([0-9a-f]{{40}})(/|$)")

# vLLM's DefaultModelLoader._prepare_weights: the files each load format reads ('auto'
# and 'hf' fall back to *.pt). Formats not listed here (dummy, gguf, tensorizer, ...) are
# not checked: dummy reads no file, and the others have layouts of their own.
WEIGHT_PATTERNS: dict[str, tuple[str, ...]] = {
    "auto": ("*.safetensors", "*.bin", "*.pt"),
    "hf": ("*.safetensors", "*.bin", "*.pt"),
    "safetensors": ("*.safetensors",),
    "fastsafetensors": ("*.safetensors",),
    "instanttensor": ("*.safetensors",),
    "pt": ("*.pt",),
    "npcache": ("*.bin", "*.pt"),
}
DEFAULT_LOAD_FORMAT = "auto"
DUMMY_LOAD_FORMAT = "dummy"

# vLLM's llama_eagle3 loader: `d2t` holds, per draft token id d, the offset to its target
# id (target = d + d2t[d]); without it a smaller draft vocabulary maps d to d.
DRAFT_TO_TARGET = "d2t"
MAX_HEADER_BYTES = 100 << 20   # the safetensors format's own bound on its JSON header


def snapshot_commit(path: str | Path) -> str | None:
    """The commit of the Hugging Face cache snapshot the folder lies in (at any depth below
    snapshots/<commit>/), or None."""
    found = _SNAPSHOT.search(str(Path(path).resolve()))
    return found.group(1) if found else None


def misnamed_snapshot(path: str | Path) -> str | None:
    """The folder's name when it sits right under a snapshots/ folder of a cache
    repository (models--ORG--NAME) but is no 40-hex commit; else None."""
    folder = Path(path).resolve()
    parent = folder.parent
    if parent.name != SNAPSHOTS or not parent.parent.name.startswith("models--"):
        return None
    return None if re.fullmatch(REVISION_PATTERN, folder.name) else folder.name


def read_config(path: str | Path) -> dict:
    """config.json as a mapping. Raises OSError, UnicodeDecodeError, ValueError."""
    data = json.loads((Path(path) / "config.json").read_text())
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    return data


def weight_files(path: str | Path, load_format: str) -> list[Path] | None:
    """The files vLLM would load weights from (the first pattern that matches, as its
    loader does); None for a load format whose files are not known here."""
    patterns = WEIGHT_PATTERNS.get(load_format)
    if patterns is None:
        return None
    for pattern in patterns:
        found = sorted(p for p in Path(path).glob(pattern) if p.is_file())
        if found:
            return found
    return []


def safetensors_shapes(files: list[Path]) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from the headers of the *.safetensors among files (the header:
    an 8-byte little-endian length, then JSON); the tensors themselves are not read.
    Raises OSError or ValueError on a file that is not safetensors."""
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        if file.suffix != ".safetensors":
            continue
        with file.open("rb") as handle:
            head = handle.read(8)
            (length,) = struct.unpack("<Q", head) if len(head) == 8 else (-1,)
            if not 0 < length <= MAX_HEADER_BYTES:
                raise ValueError(f"{file}: not a safetensors file (header length {length})")
            header = json.loads(handle.read(length))
        try:
            shapes.update({name: tuple(int(n) for n in entry["shape"])
                           for name, entry in header.items() if name != "__metadata__"})
        except (AttributeError, KeyError, TypeError) as exc:
            raise ValueError(f"{file}: a safetensors header without tensor shapes "
                             f"({type(exc).__name__}: {exc})") from None
    return shapes
