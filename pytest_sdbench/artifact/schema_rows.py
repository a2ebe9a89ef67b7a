"""One slice of an artifact's observations checked against the published schema, in a
process of its own (schema.violations starts one per slice):

    python -m pytest_sdbench.artifact.schema_rows ROWS START < slice.json

ROWS: prefill or decode; START: the slice's first index in that list. Prints the slice's
violations as a JSON list of 'ROWS.INDEX.path: message'."""

from __future__ import annotations

import json
import sys

from .schema import messages, validator


def main(rows: str, start: int) -> None:
    check = validator(rows).iter_errors
    found = [message for i, observation in enumerate(json.load(sys.stdin.buffer))
             for message in messages(check(observation), (rows, start + i))]
    json.dump(found, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
