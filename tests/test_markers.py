"""The sdbench_engine marker comes from fixtures (pytest_collection_modifyitems), and
--sdbench-skip / --sdbench-only select by it, as pytest-benchmark's --benchmark-skip /
--benchmark-only. No engine starts: the engine tests are only collected, or skipped."""

import pytest

TESTS = """
import pytest

@pytest.fixture
def downstream(sdbench_collect):     # a downstream fixture over the plugin's
    return sdbench_collect

def test_engine(sdbench_engine): pass
def test_collection(sdbench_collection): pass
def test_downstream(downstream): pass
def test_grid(sdbench_grid): pass
def test_fidelity(sdbench_fidelity): pass

@pytest.mark.sdbench_engine         # an engine in a process of its own: marked by hand
def test_subprocess(): pass

def test_note(sdbench_note): pass
def test_plain(): pass
"""
ENGINE_TESTS = ["test_engine", "test_collection", "test_downstream", "test_grid",
                "test_fidelity", "test_subprocess"]
PLAIN_TESTS = ["test_note", "test_plain"]


def _names(result) -> list[str]:
    return [line.split("::")[-1].split()[0] for line in result.stdout.lines
            if "::" in line and not line.startswith(("SKIPPED", "PASSED"))]


def test_every_test_whose_fixtures_start_an_engine_is_marked(pytester):
    pytester.makepyfile(TESTS)
    marked = pytester.runpytest("--collect-only", "-q", "-m", "sdbench_engine")
    assert _names(marked) == ENGINE_TESTS
    unmarked = pytester.runpytest("--collect-only", "-q", "-m", "not sdbench_engine")
    assert _names(unmarked) == PLAIN_TESTS


def test_skip_skips_the_engine_tests_and_says_why(pytester):
    pytester.makepyfile(TESTS)
    result = pytester.runpytest("--sdbench-skip", "-rs")
    result.assert_outcomes(passed=len(PLAIN_TESTS), skipped=len(ENGINE_TESTS))
    assert len(_skips(result, "starts an engine (--sdbench-skip)")) == len(ENGINE_TESTS)


@pytest.mark.parametrize("args", [["--sdbench-only"], ["--sdbench-skip", "--sdbench-only"]])
def test_only_skips_the_other_tests_and_wins_over_skip(pytester, args):
    pytester.makepyfile(TESTS)
    # the engine tests would start one: only the others run here
    result = pytester.runpytest(*args, "-rs", "-k", " or ".join(PLAIN_TESTS))
    result.assert_outcomes(skipped=len(PLAIN_TESTS))
    assert len(_skips(result, "starts no engine (--sdbench-only")) == len(PLAIN_TESTS)


def _skips(result, why: str) -> list[str]:
    """The skipped tests of -rs's summary (lines "SKIPPED [N] file: why") that say why."""
    lines = [line for line in result.stdout.lines if line.startswith("SKIPPED [")]
    return [why for line in lines if why in line
            for _ in range(int(line.split("[")[1].split("]")[0]))]
