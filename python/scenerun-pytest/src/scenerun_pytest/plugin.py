"""The pytest side of scene tests (registered through the ``pytest11`` entry point).

Scene classes are the ones :mod:`scenerun_pytest.protocol` recognizes. Two shapes:

* A :class:`SceneTest` subclass gets one ``test_scene[<case>]`` per case: one test node
  per scene.
* Any other scene class keeps its own test nodes. Its runner (``test_run``) runs the
  class's matching cases in one call; each case is a scene of its own, the scenes share
  the node and name their case with a ``--scenerun-case=NAME`` word. Its other test
  methods, and every plain test function, are node scenes: they run as they are.

Inside a scenerun lane (``SCENERUN_SCENES`` names the batch, ``SCENERUN_RESULTS`` the
results file) or a plain device step (``SCENERUN_SCENE`` with ``SCENERUN_FIXTURE`` ...),
the plugin runs only the batch's nodes (:class:`LanePlugin`) and serves the case's
``generate_args`` and ``compute_golden`` from what ``scenerun warm`` stored. A runner
node is called once per case, with the class restricted to that case, so each case gets
its own verdict; as the suite's own runner stops at its first failing case, the cases
after it are reported ``not_run``. The lane process exits 0 when every scene got its
result (a failed case is a result, not a crash).

Outside scenerun nothing changes: scene classes of the second shape run as they always
did; SceneTest cases are skipped (their kernels come from ``scenerun warm``).
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Generator, Mapping

import pytest

from . import SceneTest, codec, dumps, hookspecs, install, output, prestart, protocol, restart
from .lane import CASE_OPTION, Batch, Entry, scene_outputs
from .lane import load as load_batch
from .outcome import Outcome, Verdict, failure_text, of_exception, of_report
from .poison import Sinks, sink_names

_BATCH = pytest.StashKey["Batch | None"]()
LANE_PLUGIN = "scenerun-lane"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
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


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Generator[None, object, None]:
    """Before capture starts, keep the real stderr (stop-signal dumps go there) and the
    output log (where a scene's share of it ends, :mod:`.output`); after the
    suite's own conftests, give it ``--platform`` unless it has one (scenerun's manifests
    pass ``--platform {platform}`` to `collect` either way)."""
    dumps.keep_original_stderr(early_config)
    output.keep(early_config)
    yield
    try:
        parser.addoption("--platform", dest="platform", default=None, help="keep the cases of this platform")
    except ValueError:
        pass  # the suite defines it


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    cls = metafunc.cls
    if cls is None or not issubclass(cls, SceneTest) or "scene_case" not in metafunc.fixturenames:
        return
    cases = [dict(c) for c in cls.CASES]
    for i, c in enumerate(cases):
        if not isinstance(c.get("name"), str) or not c["name"]:
            raise pytest.UsageError(f"{cls.__name__}.CASES[{i}] needs a `name`")
    metafunc.parametrize("scene_case", cases, ids=[c["name"] for c in cases])


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    clash = install.conflict()
    if clash:
        raise pytest.UsageError(clash)
    batch = load_batch(os.environ, config.getoption("scenerun_case") or [])
    config.stash[_BATCH] = batch
    if batch is None:
        return
    if batch.in_lane:
        _own_the_results(config, batch.results.path)
        batch.output_mark = output.mark(config)
    directory = os.path.dirname(batch.results.path or "") or os.getcwd()
    sinks = Sinks.install(sink_names(protocol.pyproject_table(config)), directory, os.environ)
    config.pluginmanager.register(LanePlugin(config, batch, sinks), LANE_PLUGIN)


def _own_the_results(config: pytest.Config, results: str | None) -> None:
    """Inside a lane the plugin writes the results file itself, one whole line per write.
    A lane command that also asks pytest-reportlog to write there (``--report-log
    {results}``, the recipe for suites without this plugin) would make two writers on one
    file, reportlog's from its own offset over the plugin's lines: its report log is
    turned off for that file (before reportlog's own ``pytest_configure`` opens it)."""
    report_log = getattr(config.option, "report_log", None)
    if not report_log or not results:
        return
    try:
        same = (
            os.path.samefile(report_log, results)
            if os.path.exists(report_log)
            else os.path.abspath(report_log) == os.path.abspath(results)
        )
    except OSError:
        same = False
    if same:
        config.option.report_log = None


def _cwd_id(item: pytest.Item) -> str:
    rel = os.path.relpath(str(item.path), os.getcwd()).replace(os.sep, "/")
    return rel + "::" + item.nodeid.split("::", 1)[1] if "::" in item.nodeid else rel


def _is_per_case(item: pytest.Item) -> bool:
    spec = getattr(item, "callspec", None)
    return spec is not None and "scene_case" in spec.params


def _expected_xfail(item: pytest.Item) -> bool:
    try:
        from _pytest.skipping import xfailed_key
    except ImportError:  # pragma: no cover - a pytest without it
        return item.get_closest_marker("xfail") is not None
    xfailed = item.stash.get(xfailed_key, None)
    return bool(xfailed) and not getattr(xfailed, "strict", False)


class LanePlugin:
    """The hooks of a process scenerun started for a batch; its state is the batch's."""

    def __init__(self, config: pytest.Config, batch: Batch, sinks: Sinks) -> None:
        self.config = config
        self.batch = batch
        self.sinks = sinks
        self.names = protocol.names(config)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # After every pytest_configure, so after the suite's own registration (simpler:
        # SIGUSR1 -> faulthandler onto the stderr pytest captures).
        dumps.route_stop_signal(session.config, os.environ.get("SCENERUN_STOP_SIGNAL"))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Keep the batch's tests (after the suite's own selection), and put each scene
        class whose cases the batch runs under the plugin's serving."""
        keep: list[pytest.Item] = []
        drop: list[pytest.Item] = []
        served: dict[type, list[Entry]] = {}
        for item in items:
            owners = [e for e in self.batch.entries if e.owns(_cwd_id(item))]
            cls = getattr(item, "cls", None)
            cased = [e for e in owners if e.case is not None]
            if cased and cls is not None and not _is_per_case(item) and protocol.is_scene_class(cls, self.names):
                self.batch.cases_of[item.nodeid] = cased
                for e in cased:
                    self.batch.expect(e)
                served.setdefault(cls, []).extend(cased)
                keep.append(item)
            elif owners:
                entry = next((e for e in owners if e.case is None), owners[0])
                self.batch.scene_of[item.nodeid] = entry
                self.batch.expect(entry)
                keep.append(item)
            else:
                drop.append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
        for cls, entries in served.items():
            self._serve(cls, entries)

    def _serve(self, cls: type, entries: list[Entry]) -> None:
        """Restrict the class's cases to the batch's (the suite's own fixtures, e.g. a
        Worker sized by the cases, then see only what runs here), and answer its
        generate/golden calls for the running case from the stored artifacts. Any other
        call (another test of the class, other arguments) runs the suite's own function."""
        names = self.names
        all_cases = {c.get("name"): c for c in protocol.cases_of(cls, names) if isinstance(c, dict)}
        batch: list[protocol.Case] = []
        seen: set[str | None] = set()
        for e in entries:
            case = all_cases.get(e.case)
            if case is not None and e.case not in seen:
                batch.append(case)
                seen.add(e.case)
        setattr(cls, names.cases, batch)
        setattr(cls, names.generate, self._served_generate(getattr(cls, names.generate), all_cases))
        setattr(cls, names.golden, self._served_golden(getattr(cls, names.golden), all_cases))

    def _running_case(self, all_cases: Mapping[Any, protocol.Case], params: Any) -> Entry | None:
        entry = self.batch.current
        if entry is None or entry.case not in all_cases:
            return None
        return entry if params == protocol.params_of(all_cases[entry.case]) else None

    def _served_generate(
        self, original: Callable[..., Any], all_cases: Mapping[Any, protocol.Case]
    ) -> Callable[..., Any]:
        hook = self.config.hook

        def generate(inst: object, *args: Any, **kwargs: Any) -> Any:
            entry = self._running_case(all_cases, args[0]) if len(args) == 1 and not kwargs else None
            if entry is None:
                return original(inst, *args, **kwargs)
            if not entry.fixture:
                raise AssertionError(f"scene {entry.scene}: no fixture artifact")
            return codec.load(entry.fixture, hook=hook)

        return generate

    def _served_golden(
        self, original: Callable[..., Any], all_cases: Mapping[Any, protocol.Case]
    ) -> Callable[..., Any]:
        hook = self.config.hook

        def golden(inst: object, *args: Any, **kwargs: Any) -> Any:
            entry = self._running_case(all_cases, args[1]) if len(args) == 2 and not kwargs else None
            if entry is None:
                return original(inst, *args, **kwargs)
            if not entry.golden:
                raise AssertionError(f"scene {entry.scene}: no golden artifact")
            stored = codec.load(entry.golden, hook=hook, base=entry.fixture)
            if codec.mode(entry.golden) is codec.GoldenMode.RETURNED:
                return stored
            codec.assign(args[0], stored)
            return None

        return golden

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        """A runner node, called once per batch case with the class restricted to that
        case; each case's verdict is its scene's. The cases after the first that raised
        are not run, as the suite's own runner would not reach them."""
        entries = self.batch.cases_of.get(pyfuncitem.nodeid)
        if not entries:
            return None
        from _pytest.python import pytest_pyfunc_call as call_test

        __tracebackhide__ = True
        cls = pyfuncitem.cls
        assert cls is not None, "a runner node is a scene class's test"
        cases = getattr(cls, self.names.cases)
        first: tuple[Entry, BaseException] | None = None
        for entry in entries:
            if first is not None:
                self._not_reached(entry, first[0])
                continue
            self.batch.start(entry)
            raised = self._call_case(call_test, pyfuncitem, cls, cases, entry)
            if self.batch.restart:
                return True  # the lane restarts: the rest run in a fresh process
            if raised is not None:
                first = (entry, raised)
        if first is not None:
            raise first[1]  # the suite's own traceback, for pytest's report of the node
        return True

    def _call_case(
        self,
        call_test: Callable[[pytest.Function], object],
        item: pytest.Function,
        cls: type,
        cases: list[protocol.Case],
        entry: Entry,
    ) -> BaseException | None:
        case = next((c for c in cases if c.get("name") == entry.case), None)
        raised: BaseException | None = None
        try:
            if case is None:
                raise AssertionError(f"{cls.__name__} has no case {entry.case!r} (or the suite deselected it)")
            setattr(cls, self.names.cases, [case])
            self.batch.current = entry
            with scene_outputs(entry):
                call_test(item)
        except (Exception, pytest.skip.Exception, pytest.fail.Exception, pytest.xfail.Exception) as e:  # noqa: BLE001
            raised = e
        finally:
            self.batch.current = None
            setattr(cls, self.names.cases, cases)
        verdict = self._case_verdict(item, raised)
        if raised is not None and verdict.outcome is Outcome.FAILED:
            excinfo = pytest.ExceptionInfo.from_exception(raised)
            self.batch.keep_failure(entry, str(item.repr_failure(excinfo)))
            self._check_restart(item, excinfo)
        self.batch.note(entry, verdict)
        self.batch.finish(entry)  # its end, then the restart line if it poisoned the runtime
        return raised

    @staticmethod
    def _case_verdict(item: pytest.Item, raised: BaseException | None) -> Verdict:
        expected_fail = _expected_xfail(item)
        if raised is None:
            return Verdict(Outcome.XPASSED, "xpassed") if expected_fail else Verdict(Outcome.PASSED)
        verdict = of_exception(raised)
        if expected_fail and verdict.outcome is Outcome.FAILED:
            return Verdict(Outcome.XFAILED, verdict.message)
        return verdict

    def _not_reached(self, entry: Entry, stopper: Entry) -> None:
        runner = self.names.runner
        self.batch.note(
            entry,
            Verdict(Outcome.NOT_REACHED, f"not run: case {stopper.case} ended {runner} before it ({runner} stops there)"),
        )
        self.batch.finish(entry)

    def _check_restart(self, item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """A failure that poisoned the runtime (the suite's exception types or its
        ``pytest_scenerun_restart`` hook) restarts the lane after this scene."""
        if not self.batch.in_lane or self.batch.restart:
            return
        why = restart.reason(item, excinfo)
        if why:
            self.batch.poison(why)
            item.session.shouldstop = f"scenerun: the device runtime is poisoned ({why})"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, None]:
        """A node scene's test (setup, call, teardown) sees its own outputs directory in
        ``$SCENERUN_SCENE_OUTPUTS``; a runner node's cases see theirs per case."""
        with scene_outputs(self.batch.scene_of.get(item.nodeid)):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, object, None]:
        yield
        if call.excinfo is None or item.nodeid not in self.batch.scene_of:
            return
        if not call.excinfo.errisinstance(pytest.skip.Exception):
            self._check_restart(item, call.excinfo)

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        entry = self.batch.scene_of.get(nodeid)
        # The process's first test builds the session's fixtures in its setup (a device
        # runtime's init, seconds): that is the lane's start-up, not the scene's time, so
        # the first scene starts once its setup is done (pytest_runtest_logreport).
        if entry and self.batch.started:
            self.batch.start(entry)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self._poisoned_skip(report):
            return
        cased = self.batch.cases_of.get(report.nodeid)
        if cased:
            # The cases ran (and were reported) in the call; a setup that failed or skipped
            # never reached it, and is every case's verdict.
            if report.when == "setup" and not report.passed:
                verdict = of_report(report)
                for entry in cased:
                    self.batch.start(entry)
                    self.batch.note(entry, verdict)
                    self.batch.finish(entry)
            return
        node_entry = self.batch.scene_of.get(report.nodeid)
        if node_entry:
            if report.when == "setup":
                self.batch.start(node_entry)
            self.batch.note_phase(report.nodeid, node_entry, of_report(report))
            if report.failed:
                self.batch.keep_failure(node_entry, failure_text(report))

    def _poisoned_skip(self, report: pytest.TestReport) -> bool:
        """A skip the suite made because its runtime is poisoned (its sink names the
        node): the node's scenes get no verdict here; the lane restarts."""
        if not report.skipped or not self.batch.in_lane:
            return False
        item_cls = report.nodeid.split("::")[1] if report.nodeid.count("::") >= 2 else None
        if not self.sinks.poisoned(report.nodeid, item_cls):
            return False
        for entry in self.batch.cases_of.get(report.nodeid, []) + [
            e for n, e in self.batch.scene_of.items() if n == report.nodeid
        ]:
            self.batch.ended.add(entry.scene)  # no end record: scenerun reruns it
        self.batch.poison(f"the suite skipped {report.nodeid}: its device runtime is poisoned")
        self.batch.say_restart()
        session = self.config.pluginmanager.get_plugin("session")
        if session is not None:
            session.shouldstop = "scenerun: the device runtime is poisoned"
        return True

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        entry = self.batch.scene_of.get(nodeid)
        if entry and entry.scene not in self.batch.ended:
            self.batch.finish(entry)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int | pytest.ExitCode) -> None:
        if not self.batch.in_lane:
            return
        # Failed cases are results, not a crash: the lane process ends 0 when it reported
        # every scene it collected.
        collected = self.batch.scenes()
        if int(exitstatus) == 1 and collected and collected <= self.batch.ended:
            session.exitstatus = 0


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """A lane process started before the lock waits here for its device ids: after
    collection, before any test or session fixture runs (:mod:`scenerun_pytest.prestart`)."""
    if not session.config.option.collectonly:
        prestart.wait_for_ids(session.config)


def granted_ids(text: str, source: str) -> list[int]:
    """The ids as scenerun writes them (``SCENERUN_DEVICES``: the grant it parsed, ranges
    resolved, as a comma list of distinct integers) or as ``--scene-devices`` takes them,
    in the same form. Nothing else is accepted: the grant is parsed once, by scenerun."""
    parts = text.split(",")
    if not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        raise pytest.UsageError(f"{source}={text!r}: expected device ids as a comma list, e.g. 0,1")
    ids = [int(p) for p in parts]
    if len(set(ids)) != len(ids):
        raise pytest.UsageError(f"{source}={text!r}: an id is listed twice")
    return ids


@pytest.fixture(scope="session")
def scenerun_devices(pytestconfig: pytest.Config) -> list[int]:
    """The device ids this process was granted (``SCENERUN_DEVICES``)."""
    if os.environ.get("SCENERUN_DEVICES"):
        return granted_ids(os.environ["SCENERUN_DEVICES"], "SCENERUN_DEVICES")
    return granted_ids(pytestconfig.getoption("scene_devices") or "0", "--scene-devices")


@pytest.fixture(scope="session")
def scene_device(scenerun_devices: list[int]) -> Any:
    """What ``run_device`` receives as ``device``; a conftest overrides it to start the
    device runtime once per process (shared by every class and case of the batch)."""
    return scenerun_devices


@pytest.fixture
def scene_run(request: pytest.FixtureRequest) -> Callable[[SceneTest, protocol.Case], None]:
    """Run one SceneTest case's device side with the artifacts scenerun built. Under
    scenerun the device (``scene_device``: a runtime that takes seconds to start) is set
    up here, in the test's setup, so a process's first scene starts after it: its
    start-up is the lane's, not the scene's time."""
    batch = request.config.stash.get(_BATCH, None)
    entry = batch.scene_of.get(request.node.nodeid) if batch else None
    device = request.getfixturevalue("scene_device") if entry else None

    def run(test: SceneTest, case: protocol.Case) -> None:
        if not entry:
            pytest.skip("not run by scenerun: kernels, fixture and golden come from `scenerun warm`")
        params = dict(case.get("params", {}))
        kernels = {k.name: os.path.join(entry.kernels, k.name) for k in test.KERNELS} if entry.kernels else {}
        missing = [p for p in kernels.values() if not os.path.exists(p)]
        if missing:
            raise AssertionError(f"kernel artifacts missing: {missing}")
        if not entry.fixture:
            raise AssertionError("the scene has no fixture artifact")
        hook = request.config.hook
        args = codec.load(entry.fixture, hook=hook)
        golden = codec.load(entry.golden, hook=hook, base=entry.fixture) if entry.golden else None
        outputs = test.run_device(device, kernels, args, params)
        if golden is not None:
            test.compare_outputs(outputs, golden, params)

    return run
