"""Strict conversion between frozen dataclasses and JSON, and JSON Schema generated from the
same type hints, so a field's name and type have one home: its dataclass.

Decoding never coerces: a bool is not an int, a float is not an int (1.0 included), unknown
and missing keys are errors. Every error carries the path of the value, e.g.
``decode[3].batch_size``, and decoding reports all errors, not only the first.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin


class DecodeError(ValueError):
    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("; ".join(errors))


@functools.cache   # a dataclass's hints never change; resolving them dominated decoding
def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_union(tp) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _type_name(tp) -> str:
    if tp is type(None):
        return "null"
    if _is_union(tp):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    origin = get_origin(tp)
    if origin in (list, tuple):
        return "list"
    if origin is dict:
        return "object"
    if dataclasses.is_dataclass(tp):
        return "object"
    return {int: "integer", float: "number", str: "string", bool: "boolean"}.get(tp, str(tp))


def _path(base: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


def decode(tp, value: Any, path: str = "") -> Any:
    """Decode ``value`` as ``tp``; raise DecodeError listing every problem with its path."""
    errors: list[str] = []
    result = _decode(tp, value, path or "<root>", errors)
    if errors:
        raise DecodeError(errors)
    return result


def _fail(errors: list[str], path: str, tp, value) -> None:
    errors.append(f"{path}: expected {_type_name(tp)}, got {type(value).__name__} {value!r:.60}")


def _decode(tp, value, path, errors):
    if tp is Any:
        return value
    if tp is type(None):
        if value is not None:
            _fail(errors, path, tp, value)
        return None
    if _is_union(tp):
        for arg in get_args(tp):
            trial: list[str] = []
            out = _decode(arg, value, path, trial)
            if not trial:
                return out
        _fail(errors, path, tp, value)
        return None
    if get_origin(tp) is Literal:
        if value not in get_args(tp) or (type(value) is bool and True not in get_args(tp)):
            errors.append(f"{path}: expected {_type_name(tp)}, got {value!r:.60}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            _fail(errors, path, tp, value)
        return value
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            _fail(errors, path, tp, value)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            _fail(errors, path, tp, value)
            return value
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            _fail(errors, path, tp, value)
        return value
    origin = get_origin(tp)
    if origin in (list, tuple):
        if not isinstance(value, list):
            _fail(errors, path, tp, value)
            return ()
        (item,) = get_args(tp)[:1]
        return tuple(_decode(item, v, _path(path, i), errors) for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            _fail(errors, path, tp, value)
            return {}
        _, item = get_args(tp)
        return {k: _decode(item, v, _path(path, k), errors) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return _decode_dataclass(tp, value, path, errors)
    raise TypeError(f"unsupported type {tp!r} at {path}")


def _decode_dataclass(cls, value, path, errors):
    if not isinstance(value, dict):
        _fail(errors, path, cls, value)
        return None
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        sub = _path("" if path == "<root>" else path, f.name)
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                errors.append(f"{sub}: missing")
            continue
        kwargs[f.name] = _decode(hints[f.name], value[f.name], sub, errors)
    for key in value:
        if key not in hints:
            errors.append(f"{_path('' if path == '<root>' else path, key)}: unknown field")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError):
        return None


def encode(value: Any) -> Any:
    """A dataclass tree as plain JSON types (tuples become lists)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return value  # kept as is; the validator rejects it
    return value


def json_schema(tp, defs: dict[str, dict] | None = None) -> dict:
    """JSON Schema (draft 2020-12) of ``tp``; dataclasses go to ``$defs``."""
    top = defs is None
    defs = {} if defs is None else defs
    schema = _schema(tp, defs)
    if top:
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema,
                  "$defs": dict(sorted(defs.items()))}
    return schema


def _schema(tp, defs):
    if tp is Any:
        return {}
    if tp is type(None):
        return {"type": "null"}
    if _is_union(tp):
        return {"anyOf": [_schema(a, defs) for a in get_args(tp)]}
    if get_origin(tp) is Literal:
        return {"enum": list(get_args(tp))}
    if tp in (bool, int, float, str):
        return {"type": {bool: "boolean", int: "integer", float: "number", str: "string"}[tp]}
    origin = get_origin(tp)
    if origin in (list, tuple):
        return {"type": "array", "items": _schema(get_args(tp)[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema(get_args(tp)[1], defs)}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placeholder against recursion
            hints = _hints(tp)
            fields = dataclasses.fields(tp)
            defs[name] = {
                "type": "object",
                "description": (tp.__doc__ or "").strip().splitlines()[0] if tp.__doc__ else "",
                "properties": {f.name: _schema(hints[f.name], defs) for f in fields},
                "required": [f.name for f in fields if f.default is dataclasses.MISSING
                             and f.default_factory is dataclasses.MISSING],
                "additionalProperties": False,
            }
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"unsupported type {tp!r}")


def digest(value) -> str:
    """sha256 of the canonical JSON (sorted keys, compact) of a dataclass tree or JSON data."""
    text = json.dumps(encode(value), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
