"""A test's verdict, as pytest itself words it: one place that turns pytest's reports
into ``passed``, ``failed``, ``skipped``, ``xfailed``, ``xpassed`` or ``error``, so a
scene's verdict and pytest's own summary can be compared node for node.

pytest's rules, kept here: a failure in setup or teardown is an ``error``; a skip in any
phase is ``skipped``; a call of a test marked ``xfail`` that fails is ``xfailed`` and one
that passes is ``xpassed`` (a strict xfail that passes is reported failed by pytest
itself).

Two combining rules, written the same way (same order) in scenerun's ``verdict.rs``:

1. :meth:`Outcome.of_phases`, one node's phases (setup, call, teardown) -> the node's
   verdict: the worst phase (``error`` over ``failed`` over ``not_reached``, ``skipped``,
   ``xfailed``, ``xpassed``; a passed phase says nothing).
2. :meth:`Outcome.of_tests`, the tests of one scene -> the scene's verdict: ``error``,
   else ``failed``, else the test that ran the furthest (``passed`` over ``xpassed``,
   ``xfailed``, ``skipped``, ``not_reached``): one passed test and one skipped make a passed
   scene, as a CI group passes when one of its tests ran and the others skipped.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

import pytest


class Outcome(str, enum.Enum):
    """A scene's (or a pytest node's) verdict; the values are the results protocol's words."""

    PASSED = "passed"
    XPASSED = "xpassed"
    SKIPPED = "skipped"
    XFAILED = "xfailed"
    FAILED = "failed"
    ERROR = "error"
    #: Upstream's own test would have stopped before it (an earlier case failed).
    NOT_REACHED = "not_reached"

    def of_phases(self, other: "Outcome") -> "Outcome":
        """Rule 1: this phase's verdict, then ``other``'s -> the node's."""
        return other if _PHASE_RANK[other] > _PHASE_RANK[self] else self

    def of_tests(self, other: "Outcome") -> "Outcome":
        """Rule 2: this test's verdict, then ``other``'s -> the scene's."""
        return other if _SCENE_RANK[other] > _SCENE_RANK[self] else self

    @property
    def stops_a_node(self) -> bool:
        """A case ending like this ends its node's run there (the test raised)."""
        return self in (Outcome.FAILED, Outcome.ERROR, Outcome.SKIPPED, Outcome.XFAILED)


#: Rule 1's order, weakest first (pytest's own node verdict).
_PHASE_RANK: Mapping[Outcome, int] = MappingProxyType(
    {
        Outcome.PASSED: 0,
        Outcome.XPASSED: 1,
        Outcome.XFAILED: 2,
        Outcome.SKIPPED: 3,
        Outcome.NOT_REACHED: 4,
        Outcome.FAILED: 5,
        Outcome.ERROR: 6,
    }
)

#: Rule 2's order, weakest first: a failure over anything, then what ran over what did not.
_SCENE_RANK: Mapping[Outcome, int] = MappingProxyType(
    {
        Outcome.NOT_REACHED: 0,
        Outcome.SKIPPED: 1,
        Outcome.XFAILED: 2,
        Outcome.XPASSED: 3,
        Outcome.PASSED: 4,
        Outcome.FAILED: 5,
        Outcome.ERROR: 6,
    }
)


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    message: str = ""

    def of_phases(self, other: "Verdict") -> "Verdict":
        """Rule 1 on verdicts: the one that decides keeps its message."""
        return other if self.outcome.of_phases(other.outcome) is not self.outcome else self

    def of_tests(self, other: "Verdict") -> "Verdict":
        """Rule 2 on verdicts: the one that decides keeps its message."""
        return other if self.outcome.of_tests(other.outcome) is not self.outcome else self


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return "skipped"


def _crash_line(report: pytest.TestReport) -> str:
    """A failed phase's one-line reason (its verdict's message)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    lines = str(report.longrepr).strip().splitlines()
    return lines[-1] if lines else ""


def failure_text(report: pytest.TestReport) -> str:
    """A failed phase whole, as pytest's summary prints it: its traceback, then the
    output it captured (an end record's ``failure_text``)."""
    parts = [report.longreprtext]
    for title, content in report.sections:
        if content.strip():
            parts.append(f"{f' {title} ':-^80}\n{content.rstrip()}")
    return "\n".join(parts)


def of_report(report: pytest.TestReport) -> Verdict:
    """The verdict one phase report (setup, call or teardown) gives its node."""
    xfail = getattr(report, "wasxfail", None)
    if report.when == "call" and xfail is not None:
        if report.skipped:
            return Verdict(Outcome.XFAILED, f"xfail: {xfail}" if xfail else "xfail")
        if report.passed:
            return Verdict(Outcome.XPASSED, "xpassed")
    if report.failed:
        outcome = Outcome.FAILED if report.when == "call" else Outcome.ERROR
        return Verdict(outcome, f"{report.when}: {_crash_line(report)}")
    if report.skipped:
        if xfail is not None:
            return Verdict(Outcome.XFAILED, f"xfail: {xfail}" if xfail else "xfail")
        return Verdict(Outcome.SKIPPED, _skip_reason(report))
    return Verdict(Outcome.PASSED)


def of_exception(exc: BaseException, when: str = "call") -> Verdict:
    """The verdict of a test body that raised ``exc`` (the plugin calls a class's own test
    once per case, and sees its exceptions before pytest does)."""
    if isinstance(exc, pytest.skip.Exception):
        return Verdict(Outcome.SKIPPED, str(exc) or "skipped")
    if isinstance(exc, pytest.xfail.Exception):
        return Verdict(Outcome.XFAILED, f"xfail: {exc}" if str(exc) else "xfail")
    text = pytest.ExceptionInfo.from_exception(exc).exconly().strip().splitlines()
    return Verdict(Outcome.FAILED, f"{when}: " + (text[0] if text else type(exc).__name__))
