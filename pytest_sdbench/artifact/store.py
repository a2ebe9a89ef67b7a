"""Writing and reading artifact files. Writes are atomic (files.atomic_write_text): a
reader never sees half an artifact. Reads refuse hostile JSON before parsing it: a file
over MAX_ARTIFACT_BYTES (checked before it is read, and again after a gzipped file is
inflated), nesting deeper than MAX_JSON_DEPTH (scanned before json.loads, which would
recurse), and duplicate keys (which value would count?); each is an UnusableArtifact with one
line that says why. A gzipped or xz-compressed artifact (how large evidence is committed:
xz where it travels lighter) reads as its JSON, known by its first bytes, not its name."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import lzma
import re
import zlib
from array import array
from itertools import accumulate
from pathlib import Path

from ..wire import typed
from ..wire.contract import MAX_ARTIFACT_BYTES, MAX_JSON_DEPTH, PHASES
from ..wire.files import atomic_write_text


class UnusableArtifact(ValueError):
    """The input is not an artifact at all: missing file, not JSON, not an object, or
    hostile (too large, too deep, duplicate keys)."""


_ROWS = PHASES   # the artifact's observation lists: a line an observation
_STAND_IN = "\x00rows:"         # a list's place while the rest is encoded


class ArtifactText:
    """One collection's artifact as JSON text, made again and again (its checkpoints, then
    the artifact): each observation is encoded once, the first time, as one line; the rest
    (identity, grid, summaries, rounds) every time. The text: the rest indented one space a
    level, each prefill and decode observation on a line of its own. (Encoding every sample
    at every checkpoint cost the H200's plan-grade profile 34 s of its 604.)"""

    def __init__(self) -> None:
        self._lines: dict[int, tuple[object, str]] = {}   # id -> (observation, its line)

    def _line(self, observation) -> str:
        kept = self._lines.get(id(observation))
        if kept is None or kept[0] is not observation:
            kept = observation, json.dumps(typed.encode(observation), separators=(",", ":"))
            self._lines[id(observation)] = kept
        return kept[1]

    def text(self, artifact) -> str:
        if not dataclasses.is_dataclass(artifact):   # plain JSON (tests, legacy tools)
            return json.dumps(typed.encode(artifact), indent=1) + "\n"
        names = [f.name for f in dataclasses.fields(artifact)]
        rest = {name: _STAND_IN + name if name in _ROWS
                else typed.encode(getattr(artifact, name)) for name in names}
        text = json.dumps(rest, indent=1)
        for name in (n for n in names if n in _ROWS):
            rows = getattr(artifact, name)
            stand_in = json.dumps(_STAND_IN + name)
            if text.count(stand_in) != 1:
                raise ValueError(f"the artifact's text holds {stand_in} "
                                 f"{text.count(stand_in)} times, not once")
            text = text.replace(stand_in, "[\n" + ",\n".join(map(self._line, rows)) + "\n ]"
                                if rows else "[]", 1)
        return text + "\n"

    def write(self, artifact, path: str | Path) -> Path:
        return atomic_write_text(path, self.text(artifact))


def write_artifact(artifact, path: str | Path, text: ArtifactText | None = None) -> Path:
    """Write atomically; `text`: the collection's ArtifactText (its lines are reused)."""
    return (text or ArtifactText()).write(artifact, path)


# A JSON string (escapes included); brackets as steps of depth (+1 open, -1 close), every
# other byte deleted.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[{]}")


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in ``text``, counted without parsing (so a
    hostile depth cannot exhaust the parser's recursion); brackets in strings do not count."""
    raw = _STRING.sub(b"", text.encode("utf-8", "surrogatepass"))
    steps = array("b", raw.translate(_STEPS, _NOT_BRACKET))
    return max(accumulate(steps), default=0)


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return data


def parse_json(text: str, name: str = "<input>") -> dict:
    """The artifact object in ``text``; UnusableArtifact (one line) if it is none."""
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise UnusableArtifact(f"{name}: JSON nested {depth} levels deep, over the cap of "
                               f"{MAX_JSON_DEPTH} (MAX_JSON_DEPTH); refused unparsed")
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise UnusableArtifact(f"{name}: duplicate key {exc.args[0]!r} in one JSON object; "
                               "refused (which of its values would count?)") from None
    except json.JSONDecodeError as exc:
        raise UnusableArtifact(f"{name}: not JSON ({exc})") from None
    except (ValueError, RecursionError) as exc:   # e.g. an integer of too many digits
        raise UnusableArtifact(f"{name}: not usable JSON ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not isinstance(data, dict):
        raise UnusableArtifact(f"{name}: a JSON {type(data).__name__}, not an artifact object")
    return data


_GZIP_MAGIC = b"\x1f\x8b"
_XZ_MAGIC = b"\xfd7zXZ\x00"


def _inflate(raw: bytes, path: Path) -> bytes:
    """The JSON inside a gzipped or xz file, inflated no further than the cap: a small file
    that would inflate past it is refused, not expanded."""
    kind = "gzip" if raw.startswith(_GZIP_MAGIC) else "xz"
    try:
        if kind == "gzip":
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as handle:
                inflated = handle.read(MAX_ARTIFACT_BYTES + 1)
        else:
            xz = lzma.LZMADecompressor()
            inflated = xz.decompress(raw, max_length=MAX_ARTIFACT_BYTES + 1)
            if not xz.eof and len(inflated) <= MAX_ARTIFACT_BYTES:
                raise EOFError("the stream ends early")
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise UnusableArtifact(f"{path}: {kind} data that cannot be read ({exc})") from None
    if len(inflated) > MAX_ARTIFACT_BYTES:
        raise UnusableArtifact(f"{path}: inflates past the cap of {MAX_ARTIFACT_BYTES} bytes "
                               "(MAX_ARTIFACT_BYTES); refused")
    return inflated


def read_json(path: str | Path) -> dict:
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_ARTIFACT_BYTES:
            raise UnusableArtifact(f"{path}: {size} bytes, over the cap of {MAX_ARTIFACT_BYTES} "
                                   "bytes (MAX_ARTIFACT_BYTES); refused unread")
        with path.open("rb") as handle:
            raw = handle.read(MAX_ARTIFACT_BYTES + 1)   # the file may grow after stat()
    except FileNotFoundError:
        raise UnusableArtifact(f"{path}: no such file") from None
    except (IsADirectoryError, PermissionError, OSError) as exc:
        raise UnusableArtifact(f"{path}: cannot be read ({exc})") from None
    if len(raw) > MAX_ARTIFACT_BYTES:
        raise UnusableArtifact(f"{path}: over the cap of {MAX_ARTIFACT_BYTES} bytes "
                               "(MAX_ARTIFACT_BYTES); refused")
    if raw.startswith((_GZIP_MAGIC, _XZ_MAGIC)):
        raw = _inflate(raw, path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnusableArtifact(f"{path}: not UTF-8 text ({exc})") from None
    return parse_json(text, str(path))
