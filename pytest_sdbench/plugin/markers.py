"""The sdbench_engine marker, applied from fixtures (as pytest-benchmark marks the tests that
use its fixture), and the selection by it: --sdbench-skip / --sdbench-only, as
pytest-benchmark's --benchmark-skip / --benchmark-only."""

from __future__ import annotations

import pytest

ENGINE_MARKER = "sdbench_engine"
# The plugin's fixtures that start an engine. Every fixture that needs the engine
# (sdbench_grid, sdbench_collect, sdbench_collection, sdbench_fidelity, a downstream one)
# requests sdbench_engine, so it is in the fixture closure of every test that starts one;
# sdbench_emulated_server starts vLLM's server and engine core (with no model).
ENGINE_FIXTURE = "sdbench_engine"
ENGINE_FIXTURES = (ENGINE_FIXTURE, "sdbench_emulated_server")


def starts_engine(item: pytest.Item) -> bool:
    """Whether the test's fixture closure starts the session's engine or an emulated one."""
    names = getattr(item, "fixturenames", ())
    return any(name in names for name in ENGINE_FIXTURES)


def mark_and_select(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that starts an engine (a test that starts one in a process of its own
    carries the mark itself); then skip by --sdbench-skip / --sdbench-only, each skip
    naming the option."""
    only, skip = config.getoption("sdbench_only"), config.getoption("sdbench_skip")
    for item in items:
        if starts_engine(item) and item.get_closest_marker(ENGINE_MARKER) is None:
            item.add_marker(ENGINE_MARKER)
        engine = item.get_closest_marker(ENGINE_MARKER) is not None
        if only and not engine:
            item.add_marker(pytest.mark.skip(
                reason="starts no engine (--sdbench-only runs only sdbench_engine tests)"))
        elif skip and not only and engine:
            item.add_marker(pytest.mark.skip(reason="starts an engine (--sdbench-skip)"))
