"""The published JSON Schema of the current artifact, generated from wire.model.

    python -m pytest_sdbench.artifact.schema          # rewrite schema.json beside this file
"""

from __future__ import annotations

import json
from pathlib import Path

from ..wire import typed
from ..wire.contract import ARTIFACT_KIND, SCHEMA_VERSION
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


if __name__ == "__main__":
    SCHEMA_PATH.write_text(render())
    print(f"wrote {SCHEMA_PATH}")
