"""The benchmark's goals, each written once as data, and the table its measurements fill.

A row may carry checks (a goal and the measured value in the goal's unit); the verdict is
"met" only when every check holds and the measurement itself was valid. ``--gate`` turns
a missed goal into a non-zero exit."""

from __future__ import annotations

import operator
import sys
from dataclasses import dataclass, field
from typing import Literal

from pytest_sdbench.wire.contract import CONSUMER_MAX_CV, CONSUMER_MAX_DISAGREEMENT

Comparison = Literal[">=", "<=", "=="]
_COMPARE = {">=": operator.ge, "<=": operator.le, "==": operator.eq}

EXIT_OK, EXIT_MISSED, EXIT_ERROR = 0, 1, 2


@dataclass(frozen=True)
class Goal:
    name: str
    unit: str                  # the unit of the measured value the goal is judged on
    target: float
    comparison: Comparison
    why: str = ""

    def met(self, value: float) -> bool:
        return _COMPARE[self.comparison](value, self.target)

    def __str__(self) -> str:
        unit = "" if self.unit in ("", "ratio") else (self.unit if self.unit == "%" else
                                                      f" {self.unit}")
        return f"{self.comparison} {self.target:g}{unit}"


THROUGHPUT = Goal("decode throughput, observer attached / detached", "%", 99.5, ">=")
HOST_TIME = Goal("observer host time a step, direct probe", "us", 30.0, "<=",
                 "the H200 graph step is about 3 ms: 30 us is 1% of it")
SYNCS = Goal("host-device syncs the observer adds a step", "syncs/step", 0.0, "==")
FIDELITY = Goal("median |native / trace interval - 1| over points", "%", 2.0, "<=")
AGREEMENT = Goal("median |median1 / median2 - 1| over points, two collections", "%", 2.0, "<=")
IMPORTABLE = Goal(f"points the consumer imports (CV <= {100 * CONSUMER_MAX_CV:g}% in both "
                  f"collections, agreement <= {100 * CONSUMER_MAX_DISAGREEMENT:g}%)", "%",
                  100.0, ">=")
COLLECTION_WALL = Goal("collection wall time, default grid", "s", 180.0, "<=")
DUTY_CYCLE = Goal("collection duty cycle (every timed step / wall)", "ratio", 0.5, ">=")

GOALS: tuple[Goal, ...] = (THROUGHPUT, HOST_TIME, SYNCS, FIDELITY, AGREEMENT, IMPORTABLE,
                           COLLECTION_WALL, DUTY_CYCLE)


@dataclass(frozen=True)
class Row:
    measure: str
    figure: str
    checks: tuple[tuple[Goal, float], ...] = ()
    valid: bool = True          # False: the measurement could not be trusted (missed)
    error: bool = False         # the measurement raised

    @property
    def goal(self) -> str:
        return ", ".join(str(goal) for goal, _ in self.checks)

    @property
    def verdict(self) -> str:
        if self.error:
            return "ERROR"
        if not self.checks:
            return ""
        return "met" if self.met else "MISSED"

    @property
    def met(self) -> bool:
        return self.valid and not self.error and all(g.met(v) for g, v in self.checks)


@dataclass
class Table:
    rows: list[Row] = field(default_factory=list)
    out: object = None          # a text stream; None: stdout

    def row(self, measure: str, figure: str, *checks: tuple[Goal, float],
            valid: bool = True) -> Row:
        row = Row(measure, figure, tuple(checks), valid)
        return self._add(row)

    def error(self, measure: str, exc: BaseException) -> Row:
        return self._add(Row(measure, f"ERROR {type(exc).__name__}: {exc}", error=True))

    def note(self, text: str) -> None:
        """A detail line under the rows (printed now, not in the table)."""
        print(f"    {text}", file=self.out or sys.stdout, flush=True)

    def _add(self, row: Row) -> Row:
        self.rows.append(row)
        goal = f"(goal {row.goal}) {row.verdict}" if row.checks else row.verdict
        print(f"  {row.measure}: {row.figure} {goal}".rstrip(), file=self.out or sys.stdout,
              flush=True)
        return row

    def render(self) -> str:
        if not self.rows:
            return "no measurement ran"
        width = max(len(r.measure) for r in self.rows)
        lines = [f"{'measure':<{width}} | figure | goal | verdict"]
        lines += [f"{r.measure:<{width}} | {r.figure} | {r.goal} | {r.verdict}"
                  for r in self.rows]
        return "\n".join(lines)

    def exit_code(self, gate: bool) -> int:
        """2 when a measurement raised; with the gate, 1 when a goal was missed."""
        if any(r.error for r in self.rows):
            return EXIT_ERROR
        if gate and any(r.checks and not r.met for r in self.rows):
            return EXIT_MISSED
        return EXIT_OK

    def missed(self) -> list[Row]:
        return [r for r in self.rows if r.checks and not r.met]
