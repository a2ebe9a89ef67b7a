"""The validator's entry: validate_data decodes (upgrading a legacy artifact first), runs
every rule section in turn and returns the Report."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...wire import typed
from ...wire.contract import K_WINDOW, LEGACY_SCHEMA_VERSIONS, SCHEMA_VERSION
from ...wire.model import Artifact
from ..check_rounds import check_rounds, check_samples
from .environment import check_environment
from .grid import check_grid
from .header import check_header, check_policy
from .identity import check_identity, check_speculative
from .kv import check_kv
from .observations import check_observations
from .summaries import check_coverage, check_observer_cost, check_summaries, check_times

# A consumer's draft-depth import window; K outside it is flagged, never dropped.
DEFAULT_K_WINDOW = K_WINDOW


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    legacy: str | None = None
    artifact: Artifact | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


def validate_data(data: dict, k_window: tuple[int, int] = DEFAULT_K_WINDOW) -> Report:
    """Every violation in ``data``; an empty ``errors`` means the artifact can be trusted."""
    from ..legacy import LegacyError, upgrade  # legacy formats are read by upgrading them
    report = Report()
    version = data.get("schema_version") if isinstance(data, dict) else None
    if type(version) is not int:   # a boolean is an int to Python; `true` is no version
        report.errors.append(f"schema_version: expected an integer 1..{SCHEMA_VERSION}, got "
                             f"{type(version).__name__} {version!r}")
        return report
    if version > SCHEMA_VERSION:
        report.errors.append(f"schema_version: {version} is newer than this reader "
                             f"(reads 1..{SCHEMA_VERSION}); upgrade pytest-sdbench")
        return report
    if version in LEGACY_SCHEMA_VERSIONS:
        try:
            data, report.legacy = upgrade(data)
        except LegacyError as exc:
            report.errors.extend(exc.errors)
            return report
        except ValueError as exc:
            report.errors.append(str(exc))
            return report
        except (TypeError, AttributeError, KeyError) as exc:
            report.errors.append(f"schema_version {version}: malformed legacy artifact "
                                 f"({type(exc).__name__}: {exc})")
            return report
    elif version != SCHEMA_VERSION:
        report.errors.append(f"schema_version: expected an integer 1..{SCHEMA_VERSION}, "
                             f"got {version!r}")
        return report
    try:
        artifact = typed.decode(Artifact, data)
    except typed.DecodeError as exc:
        report.errors.extend(exc.errors)
        return report
    report.artifact = artifact
    _check(artifact, report)
    _flag_k_window(artifact, k_window, report)
    return report


def _check(a: Artifact, report: Report) -> None:
    err, legacy = report.errors.append, report.legacy
    check_header(a, err, legacy)
    check_policy(a, err, legacy)
    check_speculative(a, err, legacy)
    check_identity(a, err, legacy)
    check_kv(a, err, legacy)
    check_grid(a, err, legacy)
    check_environment(a, err, report.flags, legacy)
    check_observations(a, err, legacy)
    check_samples(a, err)
    check_rounds(a, err, legacy)
    check_summaries(a, err)
    check_times(a, err, legacy)
    check_observer_cost(a, err, report.flags)
    check_coverage(a, err)


def _flag_k_window(a: Artifact, k_window, report: Report) -> None:
    low, high = k_window
    k = a.speculative.draft_depth
    if a.decode and not low <= k <= high:
        report.flags.append(f"speculative.draft_depth: K={k} lies outside the import window "
                            f"K={low}-{high}; its {len(a.decode)} decode observations are kept, "
                            "flagged, not dropped")

