"""``--sdbench-compare BASELINE`` and ``--sdbench-compare-fail``: the `sdbench compare` gate
(compare.py) inside pytest, as pytest-benchmark's ``--benchmark-compare`` and
``--benchmark-compare-fail``.

At configure (the controller's, before any engine starts) the baseline is read and
validated: a missing, unreadable or invalid file is one usage error naming the option. At
session finish (the controller's, after every xdist worker handed its runs over) each
artifact the run's sdbench_collect wrote is compared with the baseline, with the rules of
`sdbench compare` (--sdbench-compare-fail-above is its --fail-above; no --noise-floor: too
few rounds fail the gate as noise it cannot judge); the comparison goes to the sdbench
section of the terminal summary. With --sdbench-compare-fail a failed gate, or a run that
wrote no artifact to judge, fails the session (exit 1) when it would otherwise pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..run.options import spelled
from ..wire.model import Artifact


def check_baseline(config, judges: bool) -> tuple[Path, Artifact] | None:
    """The baseline, read and validated once, before any engine starts (UsageError: one
    line naming the option), by the process that `judges` (the controller; an xdist worker
    only collects)."""
    chosen = config.getoption("sdbench_compare")
    if chosen is None:
        given = {"compare-fail": config.getoption("sdbench_compare_fail"),
                 "compare-fail-above": config.getoption("sdbench_compare_fail_above") is not None}
        for name, used in given.items():
            if used:
                raise pytest.UsageError(f"{spelled(name, False)}: takes "
                                        f"{spelled('compare', False)} BASELINE (the artifact "
                                        "to judge the run against)")
        return None
    if not judges:
        return None
    from ..artifact import validate_path
    from ..artifact.store import UnusableArtifact
    path = (Path(config.invocation_params.dir) / chosen).resolve()
    option = spelled("compare", False)
    try:
        report = validate_path(path)
    except UnusableArtifact as exc:
        raise pytest.UsageError(f"{option}: {exc}") from None
    if not report.ok or report.artifact is None:
        raise pytest.UsageError(f"{option}: {path} is not a valid artifact; run `sdbench "
                                f"validate {path}`")
    return path, report.artifact


def judge(session, baseline: tuple[Path, Artifact] | None, written: list[str],
          summary: list[str]) -> None:
    """Each artifact written in the run against the baseline: the comparison's lines into
    `summary`; with --sdbench-compare-fail, a failed gate fails the session."""
    config = session.config
    if baseline is None:
        return
    from ..artifact import validate_path
    from ..readers.compare import compare
    from ..readers.compare_render import render
    from ..run.recollect import collect_command
    base_path, base = baseline
    fail_above = config.getoption("sdbench_compare_fail_above") or 0.0
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
        result = compare(base, cand, fail_above_pct=fail_above, base_name=str(base_path),
                         cand_name=str(path), recollect=collect_command)
        summary.extend(render(result).splitlines())
        failed = failed or result.failed
    if not config.getoption("sdbench_compare_fail"):
        return
    if failed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    verdict = "the gate failed: the session fails" if failed else "the gate passed"
    summary.append(f"{spelled('compare-fail', False)}: {verdict}")
