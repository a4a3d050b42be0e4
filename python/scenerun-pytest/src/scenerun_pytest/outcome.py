"""A test's verdict, as pytest itself words it: one place that turns pytest's reports
into ``passed``, ``failed``, ``skipped``, ``xfailed``, ``xpassed`` or ``error``, so a
scene's verdict and pytest's own summary can be compared node for node.

pytest's rules, kept here: a failure in setup or teardown is an ``error``; a skip in any
phase is ``skipped``; a call of a test marked ``xfail`` that fails is ``xfailed`` and one
that passes is ``xpassed`` (a strict xfail that passes is reported failed by pytest
itself). A node's verdict is the worst of its phases' (``error`` over ``failed`` over
the rest).
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

    @property
    def rank(self) -> int:
        return _RANK[self]

    def worse(self, other: "Outcome") -> "Outcome":
        return other if other.rank > self.rank else self

    @property
    def stops_a_node(self) -> bool:
        """A case ending like this ends its node's run there (the test raised)."""
        return self in (Outcome.FAILED, Outcome.ERROR, Outcome.SKIPPED, Outcome.XFAILED)


_RANK: Mapping[Outcome, int] = MappingProxyType(
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


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    message: str = ""


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return "skipped"


def _failure_text(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    lines = str(report.longrepr).strip().splitlines()
    return lines[-1] if lines else ""


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
        return Verdict(outcome, f"{report.when}: {_failure_text(report)}")
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
