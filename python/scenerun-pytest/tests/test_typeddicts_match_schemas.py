"""The plugin's TypedDicts of the formats it shares with scenerun match the JSON Schemas
those formats have: the generated ones in the checkout's ``schemas/`` (from scenerun's
Rust types: a test's verdict file, every message of the one server's protocol) and the
lane results schema the plugin ships. test_server.py validates real messages of the
server against the same files. A key scenerun reads is a key the plugin's type has; a key scenerun
requires is required in the plugin's type; a key the plugin writes beyond the schema is
listed here as one scenerun ignores (the schemas allow unknown keys)."""

import json
import typing
from pathlib import Path

import pytest

from scenerun_pytest import forks, lane, scenetest

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = Path(__file__).parent.parent / "src" / "scenerun_pytest" / "lane_results.schema.json"


def schema(name):
    return json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text())


def resolve(doc, node):
    ref = node.get("$ref")
    if ref:
        for part in ref.lstrip("#/").split("/"):
            doc = doc[part]
        return doc
    return node


def keys(td):
    return set(typing.get_type_hints(td)), set(td.__required_keys__)


def test_a_verdict_file_is_what_scenerun_reads():
    doc = schema("verdict")
    have, required = keys(scenetest.VerdictFile)
    assert have == set(doc["properties"])
    assert required == set(doc["required"])
    words = set(resolve(doc, doc["properties"]["outcome"])["enum"])
    assert words == {o.value for o in lane.Outcome}


LANE = [lane.StartRecord, lane.EndRecord, lane.RestartRecord, lane.ReadyRecord]


@pytest.mark.parametrize("td", LANE, ids=lambda td: td.__name__)
def test_a_lane_record_has_the_keys_of_its_event(td):
    doc = json.loads(SHIPPED.read_text())
    (event,) = typing.get_args(typing.get_type_hints(td)["event"])
    v = doc["$defs"][event]
    have, required = keys(td)
    assert have == set(v["properties"])
    assert set(v["required"]) <= required


SERVER = {
    "ready": forks.Ready,
    "request": forks.Request,
    "started": forks.Started,
    "refused": forks.Refused,
    "ended": forks.Ended,
}


@pytest.mark.parametrize("message", sorted(SERVER))
def test_a_server_message_has_the_keys_of_its_schema(message):
    doc = schema(f"server_{message}")
    have, required = keys(SERVER[message])
    assert have == set(doc["properties"])
    assert required == set(doc["required"])


@pytest.mark.parametrize("field, td", [("interpreter", forks.Interpreter), ("process", forks.ProcessState)])
def test_the_parts_of_a_request_have_the_keys_of_their_schemas(field, td):
    doc = schema("server_request")
    part = next(resolve(doc, o) for o in doc["properties"][field]["anyOf"] if "$ref" in o)
    have, required = keys(td)
    assert have == set(part["properties"])
    assert required == set(part["required"])


def test_the_variables_a_fork_cannot_take_are_the_request_schemas():
    listed = schema("server_request")["x-start-only-env"]
    assert forks.START_ONLY_NAMES == set(listed["names"])
    assert forks.START_ONLY_PREFIXES == tuple(listed["prefixes"])
