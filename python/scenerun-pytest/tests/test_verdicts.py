"""Verdicts compared per (selection, node): an upstream job of several pytest commands
against one scenerun report whose nodes name their selection."""

import json

from scenerun_pytest import verdicts


def test_a_node_in_two_selections_is_compared_in_each(tmp_path):
    lines = [
        {"nodeid": "t.py::a", "verdict": "passed", "pid": 1, "selection": "main"},
        {"nodeid": "t.py::a", "verdict": "failed", "pid": 2, "selection": "smoke"},
    ]
    up = tmp_path / "up.jsonl"
    up.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = {
        "nodes": [
            {"nodeid": "t.py::a", "pytest": "passed", "selection": "main"},
            {"nodeid": "t.py::a", "pytest": "passed", "selection": "smoke"},
        ]
    }
    diff = verdicts.compare(verdicts.read(str(up)), verdicts.node_verdicts_of_report(report))
    assert diff == ["[smoke] t.py::a: pytest failed, scenerun passed"]


def test_lines_without_a_selection_compare_by_node_as_before(tmp_path):
    up = tmp_path / "up.jsonl"
    up.write_text(json.dumps({"nodeid": "t.py::a", "verdict": "skipped", "pid": 1}) + "\n")
    report = {"nodes": [{"nodeid": "t.py::a", "pytest": "skipped"}]}
    assert verdicts.compare(verdicts.read(str(up)), verdicts.node_verdicts_of_report(report)) == []
