"""``--sdbench-compare BASELINE`` and ``--sdbench-compare-fail``: the `sdbench compare` gate
(readers.compare) inside pytest, as pytest-benchmark's ``--benchmark-compare`` and
``--benchmark-compare-fail``, a plugin object of its own.

Its options are read once, into the run's Inputs (run.inputs.CompareChoice), as
pytest-benchmark builds its regression checks at configure time. At configure (the
controller's, before any engine starts) the baseline is read and validated: a missing,
unreadable or invalid file is one usage error naming the option. At session finish (the
controller's, after every xdist worker handed its runs over) each artifact the run's
sdbench_collect wrote is compared with the baseline, with the rules of `sdbench compare`
(--sdbench-compare-fail-above is its --fail-above; no --noise-floor: too few rounds fail the
gate as noise it cannot judge); the comparison goes to the sdbench section of the terminal
summary. With --sdbench-compare-fail a failed gate, or a run that wrote no artifact to judge,
fails the session (exit 1) when it would otherwise pass.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ..run.inputs import CompareChoice
from ..run.options import spelled
from ..wire.model import Artifact


def read_baseline(choice: CompareChoice, invocation_dir: Path) -> tuple[Path, Artifact]:
    """The baseline, read and validated (UsageError: one line naming the option)."""
    from ..artifact import validate_path
    from ..artifact.store import UnusableArtifact
    path = (invocation_dir / choice.baseline).resolve()
    option = spelled("compare", False)
    try:
        report = validate_path(path)
    except UnusableArtifact as exc:
        raise pytest.UsageError(f"{option}: {exc}") from None
    if not report.ok or report.artifact is None:
        raise pytest.UsageError(f"{option}: {path} is not a valid artifact; run `sdbench "
                                f"validate {path}`")
    return path, report.artifact


class CompareGate:
    """Registered as a plugin by the process that judges (the controller; an xdist worker
    only collects), where --sdbench-compare is given."""

    name = "sdbench_compare_gate"

    def __init__(self, choice: CompareChoice, invocation_dir: Path,
                 written: Callable[[], list[str]], summary: list[str]):
        self.choice = choice
        self.baseline = read_baseline(choice, invocation_dir)   # before any engine starts
        self.written = written     # the artifacts the run wrote, once every worker is in
        self.summary = summary     # the sdbench summary's compare lines

    @pytest.hookimpl(trylast=True)   # after the run's session gathered its workers' runs
    def pytest_sessionfinish(self, session):
        """Each artifact written in the run against the baseline; with
        --sdbench-compare-fail, a failed gate fails the session."""
        from ..artifact import validate_path
        from ..readers.compare import compare
        from ..readers.compare_render import render
        from ..run.recollect import collect_command
        base_path, base = self.baseline
        written, summary = self.written(), self.summary
        failed = not written
        if not written:
            summary.append(f"no artifact was written in this run: nothing to judge against "
                           f"{base_path}")
        for path in dict.fromkeys(written):
            cand = validate_path(path).artifact   # written validated by sdbench_collect
            if cand is None:
                summary.append(f"{path}: not a valid artifact; not compared")
                failed = True
                continue
            result = compare(base, cand, fail_above_pct=self.choice.fail_above_pct,
                             base_name=str(base_path), cand_name=str(path),
                             recollect=collect_command)
            summary.extend(render(result).splitlines())
            failed = failed or result.failed
        if not self.choice.fail:
            return
        if failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        verdict = "the gate failed: the session fails" if failed else "the gate passed"
        summary.append(f"{spelled('compare-fail', False)}: {verdict}")
