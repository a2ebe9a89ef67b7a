"""Prints, for every registered forgery class of tests/test_forgeries.py, the message the
validator gives on each base it applies to (one draw each, seeded): the list the validator
issue asks the closing note for. Run from the checkout: python scripts/forgery-messages.py"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import find, settings
from hypothesis import strategies as st

from pytest_sdbench.artifact.validate.report import validate_data
from tests import forge
from tests.test_forgeries import FORGERIES


def draw(strategy: st.SearchStrategy):
    """A draw for the forgeries' make(data, draw): the strategy's simplest example."""
    return find(strategy, lambda _: True, settings=settings(database=None, max_examples=1))


def main() -> None:
    for f in FORGERIES:
        for base in forge.BASES:
            d = forge.load(base)
            if not f.applies(d):
                continue
            f.make(d, draw)
            errors = validate_data(d).errors
            first = errors[0] if errors else "ACCEPTED"
            print(f"{f.cls:16} {f.name:40} {base:22} {first[:220]}")
            break   # one base a forgery: the first that it applies to


if __name__ == "__main__":
    main()
