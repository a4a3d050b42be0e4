"""The pytest side of scene tests (registered through the ``pytest11`` entry point).

* Every ``SceneTest`` subclass gets one ``test_scene[<case>]`` per entry of ``CASES``.
* Inside a scenerun lane (``SCENERUN_SCENES`` names the batch, ``SCENERUN_RESULTS`` the
  results file), each case runs its device side with the kernels, fixture and golden
  that ``scenerun warm`` built -- never recomputing them -- and reports one ``start`` and
  one ``end`` line per scene. The process then exits 0 when every scene got its result
  (a failed case is a result, not a crash of the lane).
* As a plain device step (``SCENERUN_SCENE`` with ``SCENERUN_FIXTURE``/``_GOLDEN``/
  ``_KERNELS``), the one scene's cases run the same way; the exit status is the result.
* Outside scenerun the cases are skipped: their kernels are built by ``scenerun warm``.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from . import SceneTest, tensors

_STATE = "_scenerun_state"


def pytest_addoption(parser):
    group = parser.getgroup("scenerun")
    group.addoption(
        "--scene-devices",
        default=None,
        help="device ids outside scenerun (default: $SCENERUN_DEVICES, else 0)",
    )


def pytest_generate_tests(metafunc):
    cls = metafunc.cls
    if cls is None or not issubclass(cls, SceneTest) or "scene_case" not in metafunc.fixturenames:
        return
    cases = [dict(c) for c in cls.CASES]
    for i, c in enumerate(cases):
        if not isinstance(c.get("name"), str) or not c["name"]:
            raise pytest.UsageError(f"{cls.__name__}.CASES[{i}] needs a `name`")
    metafunc.parametrize("scene_case", cases, ids=[c["name"] for c in cases])


class _State:
    """The batch this process runs and what has been reported for it."""

    def __init__(self, entries, results, mode):
        self.entries = entries  # scene entries, batch order
        self.results = results  # path or None
        self.mode = mode  # "lane" | "process"
        self.scene_of = {}  # nodeid -> entry
        self.left = {}  # scene -> items not finished yet
        self.outcome = {}  # scene -> (outcome, message)
        self.started = {}  # scene -> time
        self.ended = set()

    def write(self, record):
        if not self.results:
            return
        line = (json.dumps(record) + "\n").encode()
        fd = os.open(self.results, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one write per line: a crash never leaves half a record
        finally:
            os.close(fd)


def _load_state():
    scenes = os.environ.get("SCENERUN_SCENES")
    if scenes:
        entries = []
        with open(scenes) as f:
            for line in f:
                if line.strip():
                    entries.append(json.loads(line))
        return _State(entries, os.environ.get("SCENERUN_RESULTS"), "lane")
    if os.environ.get("SCENERUN_SCENE") and os.environ.get("SCENERUN_FIXTURE"):
        entry = {
            "scene": os.environ["SCENERUN_SCENE"],
            "args": None,  # every collected case belongs to it
            "kernels": os.environ.get("SCENERUN_KERNELS") or None,
            "fixture": os.environ.get("SCENERUN_FIXTURE") or None,
            "golden": os.environ.get("SCENERUN_GOLDEN") or None,
        }
        return _State([entry], None, "process")
    return None


def pytest_configure(config):
    setattr(config, _STATE, _load_state())


def _cwd_id(item) -> str:
    rel = os.path.relpath(str(item.path), os.getcwd()).replace(os.sep, "/")
    return rel + "::" + item.nodeid.split("::", 1)[1] if "::" in item.nodeid else rel


def _owns(arg: str, test_id: str) -> bool:
    return test_id == arg or test_id.startswith(arg + "::") or test_id.startswith(arg + "[")


def pytest_collection_modifyitems(config, items):
    state = getattr(config, _STATE, None)
    if state is None:
        return
    keep, drop = [], []
    for item in items:
        test_id = _cwd_id(item)
        entry = next(
            (
                e
                for e in state.entries
                if e.get("args") is None or any(_owns(a, test_id) for a in e.get("args") or ())
            ),
            None,
        )
        if entry is None:
            drop.append(item)
            continue
        state.scene_of[item.nodeid] = entry
        state.left[entry["scene"]] = state.left.get(entry["scene"], 0) + 1
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_runtest_logstart(nodeid, location):
    state = _state_of_session()
    entry = state and state.scene_of.get(nodeid)
    if entry and entry["scene"] not in state.started:
        state.started[entry["scene"]] = time.monotonic()
        state.write({"scene": entry["scene"], "event": "start"})


_RANK = {"passed": 0, "skipped": 1, "failed": 2}


def pytest_runtest_logreport(report):
    state = _state_of_session()
    entry = state and state.scene_of.get(report.nodeid)
    if not entry:
        return
    if report.failed:
        outcome = "failed"
        crash = getattr(report.longrepr, "reprcrash", None)
        message = f"{report.when}: " + (crash.message if crash else str(report.longrepr).strip().splitlines()[-1])
    elif report.skipped:
        outcome = "skipped"
        message = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else "skipped"
    else:
        outcome, message = "passed", ""
    name = entry["scene"]
    old = state.outcome.get(name, ("passed", ""))
    if _RANK[outcome] > _RANK[old[0]]:
        state.outcome[name] = (outcome, message)


def pytest_runtest_logfinish(nodeid, location):
    state = _state_of_session()
    entry = state and state.scene_of.get(nodeid)
    if not entry:
        return
    name = entry["scene"]
    state.left[name] -= 1
    if state.left[name] == 0:
        outcome, message = state.outcome.get(name, ("passed", ""))
        state.ended.add(name)
        state.write(
            {
                "scene": name,
                "event": "end",
                "outcome": outcome,
                "duration_secs": round(time.monotonic() - state.started.get(name, time.monotonic()), 6),
                "message": message,
            }
        )


def pytest_sessionfinish(session, exitstatus):
    state = getattr(session.config, _STATE, None)
    if state is None or state.mode != "lane":
        return
    # Failed cases are results, not a crash: the lane process ends 0 when it reported
    # every scene it collected.
    if int(exitstatus) == 1 and state.scene_of and all(
        e["scene"] in state.ended for e in state.scene_of.values()
    ):
        session.exitstatus = 0


_CONFIG = []


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _CONFIG[:] = [session.config]


def _state_of_session():
    return getattr(_CONFIG[0], _STATE, None) if _CONFIG else None


def _parse_ids(text: str):
    ids = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-", 1)
            ids.extend(range(int(a), int(b) + 1))
        elif part:
            ids.append(int(part))
    return ids


@pytest.fixture(scope="session")
def scenerun_devices(pytestconfig):
    """The device ids this process was granted (``SCENERUN_DEVICES``)."""
    text = os.environ.get("SCENERUN_DEVICES") or pytestconfig.getoption("scene_devices") or "0"
    return _parse_ids(text)


@pytest.fixture(scope="session")
def scene_device(scenerun_devices):
    """What ``run_device`` receives as ``device``; a conftest overrides it to start the
    device runtime once per process (shared by every class and case of the batch)."""
    return scenerun_devices


@pytest.fixture
def scene_run(request):
    """Run one case's device side with the artifacts scenerun built."""
    state = getattr(request.config, _STATE, None)
    entry = state and state.scene_of.get(request.node.nodeid)

    def run(test: SceneTest, case):
        if not entry:
            pytest.skip("not run by scenerun: kernels, fixture and golden come from `scenerun warm`")
        params = dict(case.get("params", {}))
        kdir = entry.get("kernels")
        kernels = {k.name: os.path.join(kdir, k.name) for k in test.KERNELS} if kdir else {}
        missing = [p for p in kernels.values() if not os.path.exists(p)]
        if missing:
            raise AssertionError(f"kernel artifacts missing: {missing}")
        if not entry.get("fixture"):
            raise AssertionError("the scene has no fixture artifact")
        args = tensors.load(entry["fixture"])
        golden = tensors.load(entry["golden"]) if entry.get("golden") else None
        device = request.getfixturevalue("scene_device")
        outputs = test.run_device(device, kernels, args, params)
        if golden is not None:
            test.compare_outputs(outputs, golden, params)

    return run
