"""Record every test node's verdict of a plain pytest run, to compare it with scenerun's
report node for node: ``-p scenerun_pytest.verdicts`` with ``SCENERUN_VERDICTS=FILE``.

Each process appends one JSON line per node (``{"nodeid", "verdict", "pid"}``) as the
node finishes, in pytest's own words (:mod:`scenerun_pytest.outcome`). A job of several
pytest commands (a main run and smoke runs) names each command's selection with
``SCENERUN_VERDICTS_SELECTION=NAME``: its lines then carry ``"selection"``, and nodes are
compared per (selection, node) with a report whose scenes name their selection. Suites that run
their tests in child pytest processes (simpler's dispatcher) pass the option on through
``PYTEST_ADDOPTS``; under pytest-xdist only the controller records (it sees every
worker's reports), so a node is written once per run of it. When a node runs twice (a
suite's own retry in a fresh process), :func:`read` keeps the last.

Invariant: a line is one ``write`` of a whole record, so processes appending at once
never interleave inside a line.
"""

from __future__ import annotations

import json
import os
from typing import Any, TypedDict

import pytest

from .outcome import Verdict, of_report

ENV = "SCENERUN_VERDICTS"
SELECTION_ENV = "SCENERUN_VERDICTS_SELECTION"


class _VerdictLineBase(TypedDict):
    nodeid: str
    verdict: str  # an Outcome's value
    pid: int


class VerdictLine(_VerdictLineBase, total=False):
    """One line of ``SCENERUN_VERDICTS``: a node's verdict in one process."""

    selection: str  # the job's command it ran in, when SCENERUN_VERDICTS_SELECTION named one


# (selection or None, nodeid): a node's place in a job of several pytest commands.
NodeKey = tuple[str | None, str]


class _Recorder:
    def __init__(self, path: str, selection: str | None):
        self.path = path
        self.selection = selection
        self.verdicts: dict[str, Verdict] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        verdict = of_report(report)
        old = self.verdicts.get(report.nodeid)
        self.verdicts[report.nodeid] = verdict if old is None else old.of_phases(verdict)

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        verdict = self.verdicts.pop(nodeid, None)
        if verdict is None:
            return
        record: VerdictLine = {"nodeid": nodeid, "verdict": verdict.outcome.value, "pid": os.getpid()}
        if self.selection:
            record["selection"] = self.selection
        line = json.dumps(record) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get(ENV)
    if not path or hasattr(config, "workerinput"):
        return  # not asked, or an xdist worker (its controller records)
    selection = os.environ.get(SELECTION_ENV) or None
    config.pluginmanager.register(_Recorder(path, selection), "scenerun-verdicts")


def read(path: str) -> dict[NodeKey, str]:
    """(selection, nodeid) -> verdict, the last run of each node winning."""
    out: dict[NodeKey, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                out[(record.get("selection"), record["nodeid"])] = str(record["verdict"])
    return out


def node_verdicts_of_report(report: dict[str, Any]) -> dict[NodeKey, str]:
    """(selection, nodeid) -> pytest's word, from a scenerun report.json's ``nodes``."""
    return {(n.get("selection"), n["nodeid"]): n["pytest"] for n in report.get("nodes", [])}


def _name(key: NodeKey) -> str:
    selection, nodeid = key
    return nodeid if selection is None else f"[{selection}] {nodeid}"


def compare(upstream: dict[NodeKey, str], scenerun: dict[NodeKey, str]) -> list[str]:
    """One line per (selection, node) whose verdicts differ (missing on one side included)."""
    lines: list[str] = []
    for key in sorted(set(upstream) | set(scenerun), key=lambda k: (k[0] or "", k[1])):
        a, b = upstream.get(key, "(not run)"), scenerun.get(key, "(not run)")
        if a != b:
            lines.append(f"{_name(key)}: pytest {a}, scenerun {b}")
    return lines


def main(argv: list[str]) -> int:
    """``python -m scenerun_pytest.verdicts PYTEST_VERDICTS.jsonl REPORT.json``: the
    differences, one a line; exit 1 when there is any."""
    if len(argv) != 2:
        print("usage: python -m scenerun_pytest.verdicts VERDICTS.jsonl report.json")
        return 4
    with open(argv[1], encoding="utf-8") as f:
        report = json.load(f)
    upstream, ours = read(argv[0]), node_verdicts_of_report(report)
    diff = compare(upstream, ours)
    for line in diff:
        print(line)
    counts: dict[str, int] = {}
    for v in upstream.values():
        counts[v] = counts.get(v, 0) + 1
    summary = ", ".join(f"{n} {w}" for w, n in sorted(counts.items()))
    print(f"{len(upstream)} pytest nodes ({summary}); {len(ours)} scenerun nodes; {len(diff)} differences")
    return 1 if diff else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
