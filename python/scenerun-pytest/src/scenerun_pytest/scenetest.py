"""A CPU-only test run in warm: ``python -m scenerun_pytest test --out DIR [--depfile F]
-- NODE [PYTEST ARGS]``, the command of a scene's ``test:`` that ``collect`` writes for
a node whose hook says ``"phase": "warm"`` (docs/pytest.md).

pytest runs the one node in this process; its verdict, in pytest's own words
(:mod:`scenerun_pytest.outcome`), goes to ``DIR/verdict.json`` and what it read to the
depfile (the one computation of :func:`scenerun_pytest.phases.step_deps`).

Invariant: the step exits 0 once pytest ran the node, whatever the verdict (a failed
test is the scene's verdict, not a failed warm step); it exits non-zero, writing no
verdict, only when the node did not run (not collected, interrupted, a usage error).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import TypedDict

import pytest

from . import phases
from .outcome import Outcome, Verdict, of_report

#: The longest failure text kept in a verdict (the log has all of it).
MAX_MESSAGE = 4000


class _Outcome(TypedDict):
    outcome: str  # an Outcome's value


class VerdictFile(_Outcome, total=False):
    """``DIR/verdict.json``: the node's verdict; a message unless it passed."""

    message: str


class _Recorder:
    """Keeps the node's verdict of its reports (rule 1, :meth:`Outcome.of_phases`), and the
    collected item."""

    def __init__(self) -> None:
        self.verdict: Verdict | None = None
        self.item: pytest.Item | None = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:
            self.item = session.items[0]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        v = of_report(report)
        self.verdict = v if self.verdict is None else self.verdict.of_phases(v)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scenerun_pytest test", allow_abbrev=False)
    p.add_argument("--out", required=True, help="the step's {out} directory")
    p.add_argument("--depfile", default=None)
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- NODE [PYTEST ARGS]")
    return p


def main(argv: list[str]) -> int:
    opts = parser().parse_args(argv)
    args = list(opts.pytest_args)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("scenerun_pytest test: name the node after --", file=sys.stderr)
        return 4
    if not os.path.isdir(opts.out):
        print(f"scenerun_pytest test: --out {opts.out} is not a directory", file=sys.stderr)
        return 4
    imports = phases.ImportLog(os.getcwd())
    imports.install()
    touched: set[str] = set()
    imports.touched = touched
    rec = _Recorder()
    with contextlib.redirect_stdout(sys.stderr):
        code = int(pytest.main(["-p", "no:cacheprovider", *args], plugins=[rec]))
    imports.touched = None
    if rec.verdict is None or rec.item is None:
        print(f"scenerun_pytest test: pytest ran no test of {args[0]} (exit {code})", file=sys.stderr)
        return 4 if code in (4, 5) else (code or 1)
    if code not in (0, 1):
        print(f"scenerun_pytest test: pytest ended with exit {code}; no verdict is kept", file=sys.stderr)
        return code
    verdict: VerdictFile = {"outcome": rec.verdict.outcome.value}
    if rec.verdict.outcome is not Outcome.PASSED and rec.verdict.message:
        verdict["message"] = rec.verdict.message[-MAX_MESSAGE:]
    with open(os.path.join(opts.out, "verdict.json"), "w", encoding="utf-8") as f:
        json.dump(verdict, f)
        f.write("\n")
    if opts.depfile:
        phases.write_depfile(opts.depfile, phases.step_deps(rec.item, touched, imports))
    return 0
