"""The pytest side of scene tests (registered through the ``pytest11`` entry point).

Scene classes are the ones :mod:`scenerun_pytest.protocol` recognizes. Two shapes:

* A :class:`SceneTest` subclass gets one ``test_scene[<case>]`` per case: one test node
  per scene.
* Any other scene class keeps its own test nodes (upstream's ``test_run``, which runs
  the class's matching cases in one call). Each case is a scene of its own; the scenes of
  a class share the node, and name their case with a ``--scenerun-case=NAME`` word.

Inside a scenerun lane (``SCENERUN_SCENES`` names the batch, ``SCENERUN_RESULTS`` the
results file) or a plain device step (``SCENERUN_SCENE`` with ``SCENERUN_FIXTURE`` ...),
the plugin runs only the batch's cases and serves ``generate_args`` and
``compute_golden`` from what ``scenerun warm`` stored: neither user function runs. A
class's node is called once per case, with the class restricted to that case, so each
case gets its own result (``start``/``end`` lines), and a failing case does not keep
the cases after it from running. The lane process exits 0 when every scene got its
result (a failed case is a result, not a crash).

Outside scenerun, scene classes of the second shape run as they always did; SceneTest
cases are skipped (their kernels come from ``scenerun warm``).
"""

from __future__ import annotations

import json
import os
import time

import pytest

from . import SceneTest, codec, hookspecs, install, prestart, protocol, restart

_STATE = "_scenerun_state"
CASE_OPTION = "--scenerun-case"


def pytest_addhooks(pluginmanager):
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser):
    group = parser.getgroup("scenerun")
    group.addoption(
        "--scene-devices",
        default=None,
        help="device ids outside scenerun (default: $SCENERUN_DEVICES, else 0)",
    )
    group.addoption(
        CASE_OPTION,
        action="append",
        default=[],
        metavar="NAME",
        help="the case of a scene class a scenerun scene runs (written by `collect`)",
    )
    for key, default in protocol.DEFAULTS.items():
        parser.addini(f"scenerun_{key}", f"attribute name of a scene class's {default}", default="")
    restart.addini(parser)


@pytest.hookimpl(hookwrapper=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """After the suite's own conftests: give it ``--platform`` unless it has one (scenerun's
    manifests pass ``--platform {platform}`` to `collect` either way)."""
    yield
    try:
        parser.addoption("--platform", dest="platform", default=None, help="keep the cases of this platform")
    except ValueError:
        pass  # the suite defines it


def pytest_generate_tests(metafunc):
    cls = metafunc.cls
    if cls is None or not issubclass(cls, SceneTest) or "scene_case" not in metafunc.fixturenames:
        return
    cases = [dict(c) for c in cls.CASES]
    for i, c in enumerate(cases):
        if not isinstance(c.get("name"), str) or not c["name"]:
            raise pytest.UsageError(f"{cls.__name__}.CASES[{i}] needs a `name`")
    metafunc.parametrize("scene_case", cases, ids=[c["name"] for c in cases])


def case_of_args(args) -> str | None:
    for a in args or ():
        if a.startswith(CASE_OPTION + "="):
            return a[len(CASE_OPTION) + 1 :]
    return None


class _State:
    """The batch this process runs and what has been reported for it."""

    def __init__(self, entries, results, mode):
        self.entries = entries  # scene entries, batch order
        self.results = results  # path or None
        self.mode = mode  # "lane" | "process"
        self.scene_of = {}  # SceneTest nodeid -> entry
        self.cases_of = {}  # nodeid of a class's own test -> [entry, ...], batch order
        self.left = {}  # scene -> items not finished yet
        self.outcome = {}  # scene -> (outcome, message)
        self.started = {}  # scene -> time
        self.ended = set()
        self.current = None  # the entry whose case runs now
        self.restart = None  # why the runtime is poisoned: the lane restarts after this scene
        self.restart_said = False

    def write(self, record):
        if not self.results:
            return
        line = (json.dumps(record) + "\n").encode()
        fd = os.open(self.results, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one write per line: a crash never leaves half a record
        finally:
            os.close(fd)

    def start(self, entry):
        name = entry["scene"]
        if name not in self.started:
            self.started[name] = time.monotonic()
            self.write({"scene": name, "event": "start"})

    def note(self, entry, outcome, message):
        name = entry["scene"]
        old = self.outcome.get(name, ("passed", ""))
        if _RANK[outcome] > _RANK[old[0]]:
            self.outcome[name] = (outcome, message)

    def finish(self, entry):
        """One more item of the scene is done; the last one ends the scene."""
        name = entry["scene"]
        self.left[name] -= 1
        # A poisoned runtime ends the scene now: its other items will not run here.
        if (self.left[name] > 0 and not self.restart) or name in self.ended:
            return
        outcome, message = self.outcome.get(name, ("passed", ""))
        self.ended.add(name)
        self.write(
            {
                "scene": name,
                "event": "end",
                "outcome": outcome,
                "duration_secs": round(time.monotonic() - self.started.get(name, time.monotonic()), 6),
                "message": message,
            }
        )
        if self.restart and not self.restart_said:
            self.restart_said = True
            self.write({"event": "restart", "reason": self.restart})

    def poisoned(self, item, excinfo):
        """Whether this failure poisoned the runtime (inside a lane): if so, the session
        stops after the current item and the lane restarts after its scene ends."""
        if self.mode != "lane" or self.restart:
            return bool(self.restart)
        why = restart.reason(item, excinfo)
        if why:
            self.restart = why
            item.session.shouldstop = f"scenerun: the device runtime is poisoned ({why})"
        return bool(why)


_RANK = {"passed": 0, "skipped": 1, "failed": 2}


def _load_state(config):
    scenes = os.environ.get("SCENERUN_SCENES")
    if scenes:
        entries = []
        with open(scenes) as f:
            for line in f:
                if line.strip():
                    entry = json.loads(line)
                    entry["case"] = case_of_args(entry.get("args"))
                    entries.append(entry)
        return _State(entries, os.environ.get("SCENERUN_RESULTS"), "lane")
    if os.environ.get("SCENERUN_SCENE") and os.environ.get("SCENERUN_FIXTURE"):
        cases = config.getoption("scenerun_case") or []
        entry = {
            "scene": os.environ["SCENERUN_SCENE"],
            "args": None,  # every collected test belongs to it
            "case": cases[0] if cases else None,
            "kernels": os.environ.get("SCENERUN_KERNELS") or None,
            "fixture": os.environ.get("SCENERUN_FIXTURE") or None,
            "golden": os.environ.get("SCENERUN_GOLDEN") or None,
        }
        return _State([entry], None, "process")
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    clash = install.conflict()
    if clash:
        raise pytest.UsageError(clash)
    state = _load_state(config)
    setattr(config, _STATE, state)
    if state is not None and state.mode == "lane":
        _own_the_results(config, state.results)


def _own_the_results(config, results):
    """Inside a lane the plugin writes the results file itself, one whole line per write.
    A lane command that also asks pytest-reportlog to write there (``--report-log
    {results}``, the recipe for suites without this plugin) would make two writers on one
    file, reportlog's from its own offset over the plugin's lines: its report log is
    turned off for that file (before reportlog's own ``pytest_configure`` opens it)."""
    report_log = getattr(config.option, "report_log", None)
    if not report_log or not results:
        return
    try:
        same = os.path.samefile(report_log, results) if os.path.exists(report_log) else (
            os.path.abspath(report_log) == os.path.abspath(results)
        )
    except OSError:
        same = False
    if same:
        config.option.report_log = None


def _cwd_id(item) -> str:
    rel = os.path.relpath(str(item.path), os.getcwd()).replace(os.sep, "/")
    return rel + "::" + item.nodeid.split("::", 1)[1] if "::" in item.nodeid else rel


def _owns(arg: str, test_id: str) -> bool:
    return test_id == arg or test_id.startswith(arg + "::") or test_id.startswith(arg + "[")


def _entry_owns(entry, test_id) -> bool:
    args = entry.get("args")
    if args is None:
        return True
    return any(_owns(a, test_id) for a in args if not a.startswith("-"))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Keep the batch's tests (after the suite's own selection), and put each scene class
    of the batch under the plugin's serving."""
    state = getattr(config, _STATE, None)
    if state is None:
        return
    names = protocol.names(config)
    keep, drop = [], []
    served = {}  # class -> its batch entries
    for item in items:
        test_id = _cwd_id(item)
        owners = [e for e in state.entries if _entry_owns(e, test_id)]
        cls = getattr(item, "cls", None)
        per_case = getattr(item, "callspec", None) is not None and "scene_case" in item.callspec.params
        if owners and not per_case and protocol.is_scene_class(cls, names):
            cased = [e for e in owners if e.get("case") is not None]
            if cased:
                state.cases_of[item.nodeid] = cased
                for e in cased:
                    state.left[e["scene"]] = state.left.get(e["scene"], 0) + 1
                    served.setdefault(cls, []).append(e)
                keep.append(item)
                continue
        if not owners:
            drop.append(item)
            continue
        entry = owners[0]
        state.scene_of[item.nodeid] = entry
        state.left[entry["scene"]] = state.left.get(entry["scene"], 0) + 1
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    for cls, entries in served.items():
        _serve(cls, entries, names, state, config)


def _serve(cls, entries, names, state, config):
    """Replace the class's generate/golden functions with loads of the stored artifacts,
    and its cases with the batch's (the suite's own fixtures, e.g. a Worker sized by the
    cases, then see only what runs here)."""
    all_cases = {c.get("name"): c for c in protocol.cases_of(cls, names) if isinstance(c, dict)}
    batch, seen = [], set()
    for e in entries:
        case = all_cases.get(e["case"])
        if case is not None and e["case"] not in seen:
            batch.append(case)
            seen.add(e["case"])
    setattr(cls, names.cases, batch)
    hook = config.hook

    def current(what):
        entry = state.current
        if entry is None:
            raise RuntimeError(f"{what} called outside a scenerun case: under scenerun it is served from the warm cache")
        return entry

    def generate(self, params):
        entry = current(names.generate)
        if not entry.get("fixture"):
            raise AssertionError(f"scene {entry['scene']}: no fixture artifact")
        return codec.load(entry["fixture"], hook=hook)

    def golden(self, args, params):
        entry = current(names.golden)
        if not entry.get("golden"):
            raise AssertionError(f"scene {entry['scene']}: no golden artifact")
        stored = codec.load(entry["golden"], hook=hook, base=entry.get("fixture"))
        if codec.mode(entry["golden"]) == "returned":
            return stored
        codec.assign(args, stored)
        return None

    setattr(cls, names.generate, generate)
    setattr(cls, names.golden, golden)


def _message(when, excinfo) -> str:
    text = excinfo.exconly().strip().splitlines()
    return f"{when}: " + (text[0] if text else excinfo.typename)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A scene class's own test, called once per batch case with the class restricted to
    that case; each case's outcome is its scene's."""
    state = getattr(pyfuncitem.config, _STATE, None)
    entries = state and state.cases_of.get(pyfuncitem.nodeid)
    if not entries:
        return None
    from _pytest.python import pytest_pyfunc_call as call_test

    __tracebackhide__ = True
    names = protocol.names(pyfuncitem.config)
    cls = pyfuncitem.cls
    batch = getattr(cls, names.cases)
    failures, skips, errors = [], [], []
    for entry in entries:
        state.start(entry)
        case = next((c for c in batch if c.get("name") == entry["case"]), None)
        try:
            if case is None:
                raise AssertionError(f"{cls.__name__} has no case {entry['case']!r} (or the suite deselected it)")
            setattr(cls, names.cases, [case])
            state.current = entry
            call_test(pyfuncitem)
        except pytest.skip.Exception as e:
            state.note(entry, "skipped", str(e) or "skipped")
            skips.append(entry["case"])
        except (Exception, pytest.fail.Exception) as e:  # noqa: BLE001 -- the case's result
            excinfo = pytest.ExceptionInfo.from_exception(e)
            message = _message("call", excinfo)
            state.note(entry, "failed", message)
            failures.append(f"case {entry['case']}: {message}")
            errors.append(e)
            state.poisoned(pyfuncitem, excinfo)
        finally:
            state.current = None
            setattr(cls, names.cases, batch)
        state.finish(entry)
        if state.restart:
            break  # the cases after it run in the fresh process
    if len(errors) == 1:
        raise errors[0]  # the suite's own traceback
    if failures:
        raise AssertionError("; ".join(failures))
    if skips and len(skips) == len(entries):
        pytest.skip(f"every case skipped: {', '.join(skips)}")
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failure that poisoned the device runtime (the suite's exception types, or its
    ``pytest_scenerun_restart`` hook) restarts the lane after this scene."""
    yield
    state = getattr(item.config, _STATE, None)
    if state is not None and call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
        if item.nodeid in state.scene_of:
            state.poisoned(item, call.excinfo)


def pytest_runtest_logstart(nodeid, location):
    state = _state_of_session()
    entry = state and state.scene_of.get(nodeid)
    # The process's first test builds the session's fixtures in its setup (a device
    # runtime's init, seconds): that is the lane's start-up, not the scene's time, so
    # the first scene starts once its setup is done (pytest_runtest_logreport).
    if entry and state.started:
        state.start(entry)


def pytest_runtest_logreport(report):
    state = _state_of_session()
    if not state:
        return
    cased = state.cases_of.get(report.nodeid)
    if cased:
        # The cases ran (and were reported) in the call; a setup that failed or skipped
        # never reached it, and is every case's result.
        if report.when == "setup" and not report.passed:
            outcome, message = _outcome(report)
            for entry in cased:
                state.start(entry)
                state.note(entry, outcome, message)
                state.finish(entry)
        return
    entry = state.scene_of.get(report.nodeid)
    if entry:
        if report.when == "setup":
            state.start(entry)
        state.note(entry, *_outcome(report))


def _outcome(report):
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        text = crash.message if crash else (str(report.longrepr).strip().splitlines() or [""])[-1]
        return "failed", f"{report.when}: {text}"
    if report.skipped:
        return "skipped", str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else "skipped"
    return "passed", ""


def pytest_runtest_logfinish(nodeid, location):
    state = _state_of_session()
    entry = state and state.scene_of.get(nodeid)
    if entry:
        state.finish(entry)


def pytest_sessionfinish(session, exitstatus):
    state = getattr(session.config, _STATE, None)
    if state is None or state.mode != "lane":
        return
    # Failed cases are results, not a crash: the lane process ends 0 when it reported
    # every scene it collected.
    collected = {e["scene"] for e in state.scene_of.values()}
    collected.update(e["scene"] for es in state.cases_of.values() for e in es)
    if int(exitstatus) == 1 and collected and collected <= state.ended:
        session.exitstatus = 0


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """A lane process started before the lock waits here for its device ids: after
    collection, before any test or session fixture runs (:mod:`scenerun_pytest.prestart`)."""
    if not session.config.option.collectonly:
        prestart.wait_for_ids(session.config)


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
    """Run one SceneTest case's device side with the artifacts scenerun built. Under
    scenerun the device (``scene_device``: a runtime that takes seconds to start) is set
    up here, in the test's setup, so a process's first scene starts after it: its
    start-up is the lane's, not the scene's time."""
    state = getattr(request.config, _STATE, None)
    entry = state and state.scene_of.get(request.node.nodeid)
    device = request.getfixturevalue("scene_device") if entry else None

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
        hook = request.config.hook
        args = codec.load(entry["fixture"], hook=hook)
        golden = codec.load(entry["golden"], hook=hook, base=entry["fixture"]) if entry.get("golden") else None
        outputs = test.run_device(device, kernels, args, params)
        if golden is not None:
            test.compare_outputs(outputs, golden, params)

    return run
