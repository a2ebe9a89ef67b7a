"""The published JSON Schema of the current artifact, generated from wire.model.

    python -m pytest_sdbench.artifact.schema          # rewrite schema.json beside this file
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema

from ..wire import typed
from ..wire.contract import ARTIFACT_KIND, PHASES, SCHEMA_VERSION
from ..wire.model import Artifact

SCHEMA_PATH = Path(__file__).with_name("schema.json")


def generate() -> dict:
    schema = typed.json_schema(Artifact)
    root = schema["$defs"]["Artifact"]
    root["properties"]["schema_version"] = {"const": SCHEMA_VERSION}
    root["properties"]["kind"] = {"const": ARTIFACT_KIND}
    return {"$schema": schema["$schema"],
            "$id": f"https://pytest-sdbench/schema/artifact-v{SCHEMA_VERSION}.json",
            "title": f"pytest-sdbench artifact, schema_version {SCHEMA_VERSION}",
            "$ref": "#/$defs/Artifact", "$defs": schema["$defs"]}


def render() -> str:
    return json.dumps(generate(), indent=1, sort_keys=False) + "\n"


def load() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


# The observation lists of a long artifact are checked in worker processes, in slices: the
# published schema over the planning profile's 8,625 observations takes 20-28 s in one
# process (scripts/checkpoint-cost.py), most of what the end of a collection adds.
ROWS = PHASES   # the artifact's observation lists, one a phase
ROWS_PER_WORKER = 1000         # fewer observations a worker than this: not worth a process
MAX_WORKERS = 8
_WORKER = "pytest_sdbench.artifact.schema_rows"   # python -m: one slice, from stdin


def violations(data: dict, workers: int | None = None) -> list[str]:
    """Every way `data` breaks the published schema, each as 'path: message' (the path
    dotted, e.g. decode.3.snapshot.requests.0.kv_tokens; <root> for the whole). A long
    artifact's observations are checked in `workers` processes (default: one per
    ROWS_PER_WORKER observations, at most MAX_WORKERS and the CPUs): fresh interpreters
    that are handed their slice as JSON (neither forked from a caller that may hold an
    engine, nor importing its main module as multiprocessing's spawn does); the rest here."""
    rows = [data.get(name) for name in ROWS]
    count = sum(len(r) for r in rows if isinstance(r, list))
    if workers is None:
        workers = min(MAX_WORKERS, os.cpu_count() or 1, count // ROWS_PER_WORKER)
    if workers < 2 or not count or not all(isinstance(r, list) for r in rows):
        return messages(validator(None).iter_errors(data))
    size = -(-count // workers)
    slices = [(name, start) for name in ROWS for start in range(0, len(data[name]), size)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with tempfile.TemporaryFile() as errors:   # the workers' stderr (a traceback, if any)
        procs = [subprocess.Popen([sys.executable, "-m", _WORKER, name, str(start)], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors)
                 for name, start in slices]
        for proc, (name, start) in zip(procs, slices, strict=True):
            with proc.stdin:   # type: ignore[union-attr]
                proc.stdin.write(  # type: ignore[union-attr]
                    json.dumps(data[name][start:start + size]).encode())
        found = messages(validator(None).iter_errors({key: [] if key in ROWS else value
                                                      for key, value in data.items()}))
        for proc, (name, start) in zip(procs, slices, strict=True):
            with proc.stdout:   # type: ignore[union-attr]
                out = proc.stdout.read()   # type: ignore[union-attr]
            if proc.wait():
                errors.seek(0)
                raise RuntimeError(f"the JSON Schema check of {name}[{start}:] failed (exit "
                                   f"{proc.returncode}): "
                                   f"{errors.read().decode(errors='replace')[-800:]}")
            found += json.loads(out)
    return found


@functools.cache
def validator(rows: str | None) -> jsonschema.Draft202012Validator:
    """The published schema's validator: of the artifact (None), or of one observation of
    the list `rows` (its items' schema beside the schema's $defs)."""
    published = load()
    if rows is None:
        return jsonschema.Draft202012Validator(published)
    items = published["$defs"]["Artifact"]["properties"][rows]["items"]
    return jsonschema.Draft202012Validator({**items, "$defs": published["$defs"]})


def messages(errors, prefix: tuple = ()) -> list[str]:
    return [f"{'.'.join(map(str, (*prefix, *e.absolute_path))) or '<root>'}: {e.message}"
            for e in errors]


if __name__ == "__main__":
    SCHEMA_PATH.write_text(render())
    print(f"wrote {SCHEMA_PATH}")
