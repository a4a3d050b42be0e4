"""The lane results protocol, described once (scenerun_pytest/lane_results.schema.json):
every record the plugin writes validates against it, and the shared sample lines are
accepted, tolerated or refused by it as scenerun's own parser takes them (the Rust side
checks the same file against its parser). Run by tests/pytest_suite.rs with the
virtualenv's pytest and jsonschema."""

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from scenerun_pytest import lane, prestart
from scenerun_pytest.outcome import Outcome, Verdict

SAMPLES = json.loads((Path(__file__).parent / "lane_results_samples.json").read_text())


# The file in this checkout, the one scenerun's own tests read too.
SCHEMA_FILE = Path(__file__).parent.parent / "src" / "scenerun_pytest" / "lane_results.schema.json"


def schema():
    return json.loads(SCHEMA_FILE.read_text())


def validator():
    s = schema()
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


def line_of(sample):
    """A sample as a line of the file: a string is the line's raw text."""
    return sample if isinstance(sample, str) else json.dumps(sample)


def _not_json(constant):
    raise ValueError(f"{constant} is not JSON")


def _finite(text):
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is beyond a double")
    return number


def strict_json(text):
    """JSON as RFC 8259 and scenerun's parser take it: no NaN or Infinity, no number
    beyond a double (1e400), which Python's json module would read as inf."""
    return json.loads(text, parse_constant=_not_json, parse_float=_finite)


def accepted(v, text):
    try:
        record = strict_json(text)
    except ValueError:
        return False
    return v.is_valid(record)


def written(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_schema_ships_with_the_plugin_and_is_a_valid_schema():
    shipped = resources.files("scenerun_pytest").joinpath("lane_results.schema.json")
    assert json.loads(shipped.read_text()) == schema()
    v = validator()
    # The plugin's verdict words are the protocol's outcome words, one for one.
    assert set(v.schema["$defs"]["outcome"]["enum"]) == {o.value for o in Outcome}


@pytest.mark.parametrize("kind", ["valid", "tolerated", "refused"])
def test_the_shared_samples_are_taken_as_the_schema_says(kind):
    v = validator()
    for sample in SAMPLES[kind]:
        assert accepted(v, line_of(sample)) == (kind == "valid"), sample


def test_every_record_the_lane_writes_validates(tmp_path):
    v = validator()
    results = tmp_path / "results.jsonl"
    entries = [lane.Entry(scene=f"s{i}", args=None, case=None) for i in range(len(Outcome))]
    batch = lane.Batch(entries, lane.ResultsFile(str(results)), in_lane=True)
    for entry, outcome in zip(entries, Outcome):
        batch.start(entry)
        message = "" if outcome is Outcome.PASSED else f"{outcome.value}: why"
        batch.end(entry, Verdict(outcome, message))
    poisoned = lane.Entry(scene="poisoned", args=None, case=None)
    batch.start(poisoned)
    batch.poison("stream poisoned")
    batch.end(poisoned, Verdict(Outcome.FAILED, "runtime poisoned"))
    records = written(results)
    events = [r["event"] for r in records]
    assert events.count("end") == len(Outcome) + 1 and events[-1] == "restart", events
    assert {r["outcome"] for r in records if r["event"] == "end"} == {o.value for o in Outcome}
    for r in records:
        v.validate(r)


def test_the_ready_line_validates(tmp_path):
    v = validator()
    results = tmp_path / "results.jsonl"
    prestart.ready(str(results))
    (record,) = written(results)
    assert record["event"] == "ready"
    v.validate(record)


def test_a_scenes_line_with_its_outputs_dir_is_read_and_set_only_while_its_scene_runs(monkeypatch, tmp_path):
    line = {
        "scene": "main/TestX.a",
        "args": ["t.py::TestX::test_run", "--scenerun-case=a"],
        "kernels": None,
        "fixture": None,
        "golden": None,
        "timeout_secs": None,
        "outputs": str(tmp_path / "outputs" / "main" / "TestX.a"),
    }
    s = schema()
    jsonschema.Draft202012Validator(s["$defs"]["scenes_line"]).validate(line)
    entry = lane.Entry.from_line(line)
    assert entry.outputs == line["outputs"]
    monkeypatch.setenv(lane.OUTPUTS_ENV, "before")
    with lane.scene_outputs(entry):
        assert lane.os.environ[lane.OUTPUTS_ENV] == line["outputs"]
    assert lane.os.environ[lane.OUTPUTS_ENV] == "before"
    monkeypatch.delenv(lane.OUTPUTS_ENV)
    with lane.scene_outputs(entry):
        pass
    assert lane.OUTPUTS_ENV not in lane.os.environ
    # A line without it (an older scenerun, a hand-written batch) changes nothing.
    old = lane.Entry.from_line({k: v for k, v in line.items() if k != "outputs"})
    with lane.scene_outputs(old):
        assert lane.OUTPUTS_ENV not in lane.os.environ
