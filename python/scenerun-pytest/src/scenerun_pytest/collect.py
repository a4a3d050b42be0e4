"""``python -m scenerun_pytest collect [PYTEST ARGS...]``: pytest's collection only (no
fixture, golden or device work), with every argument it does not own passed to pytest,
so the suite's own selection applies (``--platform``, ``-m``, ``--manual``, a conftest's
options); then the scenes that run **every node pytest would run**, as JSON on stdout
for scenerun's ``scenes_from:``.

Invariant: each collected node is covered by scenes, excluded by the project with a
reason, or named as uncovered (exit 4). Two kinds of scene cover a node:

* a **case scene** per (scene class, case) the suite would run, on the class's runner
  node (``test_run``; scenerun's ``SceneTest``: its per-case node), with a fixture and a
  golden step built in warm; the cases of one node stay together, in ``CASES`` order;
* a **node scene** for every other node (a plain test function, a class's other test
  methods, a class whose runner is its own or whose ``generate_args`` is the base
  class's stub): the node runs as it is, device work only.
"""

from __future__ import annotations

import ast
import contextlib
import enum
import hashlib
import inspect
import json
import math
import os
import re
import shlex
import sys
import textwrap
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence, TypedDict, cast

import pytest

from . import protocol
from .lane import CASE_OPTION

_BUILTIN_MARKS = frozenset({"parametrize", "usefixtures", "filterwarnings", "skip", "skipif", "xfail", "timeout"})


class DeviceMode(enum.Enum):
    """How a scene's device side runs: in a lane's processes, or one pytest per scene."""

    LANE = "lane"
    PROCESS = "process"


class Overrides(TypedDict, total=False):
    """What a suite's ``pytest_scenerun_scene`` hook may return (docs/pytest.md); a key
    set to None counts as absent. Checked by ``_check_overrides`` against ``_OVERRIDE_TYPES``."""

    lane: str | None
    devices: int | None
    tags: Sequence[str] | None
    order: str | None  # first, any or last
    persist: bool | None
    skip: bool | str | None
    timeout: float | None
    phase: str | None  # device or warm


# The scene collect emits (scenerun's manifest schema for a scene, docs/pytest.md); the
# key order of the JSON is the order the keys are set in.


class Kernel(TypedDict):
    name: str
    toolchain: str
    source: str
    include_dirs: list[str]
    flags: list[str]


class _StepRun(TypedDict):
    run: str


class Step(_StepRun, total=False):
    """A warm step: a case's fixture or golden, or a node's ``test``."""

    persist: bool
    timeout: str
    identity: str
    worker: str


class _DeviceIds(TypedDict):
    devices: int


class Device(_DeviceIds, total=False):
    """A scene's device side: a lane with the node's arguments, or a command."""

    lane: str
    args: list[str]
    run: str
    order: str
    timeout: str


class _SceneIds(TypedDict):
    name: str
    nodeid: str
    tags: list[str]


class Scene(_SceneIds, total=False):
    case: str
    kernels: list[Kernel]
    fixture: Step
    golden: Step
    test: Step
    device: Device


class CollectError(Exception):
    """The suite cannot be mapped: exit 4 with this message."""


@dataclass(frozen=True)
class Options:
    """What `collect` was asked for, besides the suite's own pytest arguments."""

    python: str = "python"
    lane: str = "pytest"
    lanes: Mapping[int, str] = field(default_factory=dict)
    device_mode: DeviceMode = DeviceMode.LANE
    identity: str | None = None
    worker: str | None = None
    excludes: Mapping[str, str] = field(default_factory=dict)
    pytest_args: Sequence[str] = ()


@dataclass
class Unit:
    """One scene to emit: a case of a scene class (``case`` set) or a whole node."""

    item: pytest.Item
    nodeid: str  # pytest's own id (rootdir-relative): what reports compare
    arg: str  # the same node as a path relative to the current directory: what lanes run
    path: str
    case: Mapping[str, Any] | None = None
    index: int = 0  # the case's position in CASES
    per_case_node: bool = False  # a SceneTest test_scene[case] node
    overrides: Overrides = field(default_factory=lambda: Overrides())

    @property
    def cls(self) -> type | None:
        return getattr(self.item, "cls", None)


@dataclass
class Coverage:
    total: int = 0
    covered: set[str] = field(default_factory=set)
    excluded: dict[str, str] = field(default_factory=dict)

    def uncovered(self, nodeids: Iterable[str]) -> list[str]:
        return [n for n in nodeids if n not in self.covered and n not in self.excluded]

    def line(self) -> str:
        text = f"{len(self.covered)} of {self.total} pytest nodes covered"
        if self.excluded:
            text += f" ({len(self.excluded)} excluded by the project)"
        return text


def _rel(path: str) -> str:
    return os.path.relpath(os.path.normpath(path), os.getcwd()).replace(os.sep, "/")


def _arg_of(item: pytest.Item) -> str:
    """The node as the current directory sees it (collect and lanes run in the manifest's
    directory; pytest's ids are relative to its rootdir)."""
    path = _rel(str(item.path))
    return path + "::" + item.nodeid.split("::", 1)[1] if "::" in item.nodeid else path


def _words(*parts: str) -> str:
    """A shell command for a scenerun template: literal braces doubled."""
    return " ".join(parts).replace("{", "{{").replace("}", "}}")


def lane_name(base: str, devices: int, overrides: Mapping[int, str]) -> str:
    if devices in overrides:
        return overrides[devices]
    return base if devices == 1 else f"{base}_x{devices}"


def _safe(name: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"
    if name in (".", ".."):
        name = "_" + name
    if len(name) > 128:
        digest = hashlib.blake2b(name.encode(), digest_size=4).hexdigest()
        name = name[: 128 - 9] + "-" + digest
    return name


def is_stub(function: Callable[..., Any] | None) -> bool:
    """A method whose body only raises NotImplementedError (a base class's placeholder)."""
    function = getattr(function, "__func__", function)
    if function is None:
        return False
    try:
        source = textwrap.dedent(inspect.getsource(function))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return False
    fn = tree.body[0] if tree.body else None
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc
    target = exc.func if isinstance(exc, ast.Call) else exc
    return isinstance(target, ast.Name) and target.id == "NotImplementedError"


def runner_is_own(cls: type, runner: str) -> bool:
    """The class defines the runner itself while a base class defines it too: its own
    test decides what runs, so its cases are not served one by one."""
    if runner not in vars(cls):
        return False
    return any(runner in vars(base) for base in cls.__mro__[1:])


def serves_cases(cls: type | None, names: protocol.Names) -> bool:
    """Whether the class's cases become case scenes (fixture and golden built in warm)."""
    if cls is None or not protocol.is_scene_class(cls, names):
        return False
    if is_stub(getattr(cls, names.generate, None)):
        return False
    return not runner_is_own(cls, names.runner)


def _test_name(item: pytest.Item) -> str:
    return str(getattr(getattr(item, "function", None), "__name__", item.name))


def units_of(items: Sequence[pytest.Item], config: pytest.Config) -> list[Unit]:
    """Every collected node, as case units (one per selected case) or one node unit."""
    names = protocol.names(config)
    platform, manual_mode = protocol.session_filters(config)
    units: list[Unit] = []
    for item in items:
        cls = getattr(item, "cls", None)
        path, arg = _rel(str(item.path)), _arg_of(item)
        spec = getattr(item, "callspec", None)
        if spec is not None and isinstance(spec.params.get("scene_case"), dict):
            case = spec.params["scene_case"]
            index = _index_of(cls, names, case)
            units.append(Unit(item, item.nodeid, arg, path, case, index, per_case_node=True))
            continue
        if cls is not None and _test_name(item) == names.runner and serves_cases(cls, names):
            cased: list[Unit] = []
            for i, case in enumerate(protocol.cases_of(cls, names)):
                try:
                    protocol.case_name(case, cls, i)
                except ValueError as e:
                    raise CollectError(f"{path}: {e}") from None
                if protocol.selected(case, platform, manual_mode):
                    cased.append(Unit(item, item.nodeid, arg, path, case, i))
            if cased:
                units.extend(cased)
                continue
        units.append(Unit(item, item.nodeid, arg, path))
    return units


def _index_of(cls: type | None, names: protocol.Names, case: protocol.Case) -> int:
    if cls is None:
        return 0
    for i, c in enumerate(protocol.cases_of(cls, names)):
        if isinstance(c, Mapping) and c.get("name") == case.get("name"):
            return i
    return 0


def _label(u: Unit) -> list[str]:
    """The scene's name, before clashes are resolved: ``Class.case``, ``Class.test_x`` or
    ``test_x[param]``."""
    if u.case is not None and u.cls is not None:
        return [u.cls.__name__, str(u.case["name"])]
    if u.cls is not None:
        return [u.cls.__name__, u.item.name]
    return [u.item.name]


def scene_names(units: Sequence[Unit]) -> list[str]:
    """Labels, unless two scenes would share one: then as many trailing parts of the
    module path as tell them apart (``a2a3.test_x.Class.case``)."""

    def parts(u: Unit) -> list[str]:
        p = u.path[:-3] if u.path.endswith(".py") else u.path
        return [x for x in p.split("/") if x]

    names = [".".join(_label(u)) for u in units]
    depth = [0] * len(units)
    for _ in range(64):
        seen: dict[str, list[int]] = {}
        for i, n in enumerate(names):
            seen.setdefault(_safe(n), []).append(i)
        clash = [ix for ix in seen.values() if len(ix) > 1]
        if not clash:
            break
        for ix in clash:
            for i in ix:
                p = parts(units[i])
                depth[i] = min(depth[i] + 1, len(p))
                names[i] = ".".join(p[len(p) - depth[i] :] + _label(units[i]))
    return [_safe(n) for n in names]


class _Sources:
    """What of a test file a case's fixture and golden depend on: the file's text with
    the ``CASES`` list of every scene class in it reduced to that one case, so editing
    one case (or adding one) changes no other case's key, while editing anything else in
    the file (a method, a module constant) changes them all. A ``CASES`` that is not a
    literal list counts whole."""

    def __init__(self, cases_attr: str) -> None:
        self.attr = cases_attr
        self.files: dict[str, tuple[bytes, dict[str, tuple[int, int, list[tuple[int, int]]]]]] = {}

    def _spans(self, text: str) -> dict[str, tuple[int, int, list[tuple[int, int]]]]:
        lines = text.splitlines(keepends=True)
        starts = [0]
        for line in lines:
            starts.append(starts[-1] + len(line.encode("utf-8")))
        spans: dict[str, tuple[int, int, list[tuple[int, int]]]] = {}
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return spans
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for stmt in node.body:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
                value = getattr(stmt, "value", None)
                if not any(isinstance(t, ast.Name) and t.id == self.attr for t in targets):
                    continue
                if not isinstance(value, (ast.List, ast.Tuple)) or not value.elts:
                    continue
                if any(isinstance(e, ast.Starred) for e in value.elts):
                    continue
                # end_lineno and end_col_offset are set by ast.parse (None only in
                # trees built by hand).
                elts = [
                    (
                        starts[e.lineno - 1] + e.col_offset,
                        starts[(e.end_lineno or e.lineno) - 1] + (e.end_col_offset or 0),
                    )
                    for e in value.elts
                ]
                spans[node.name] = (elts[0][0], elts[-1][1], elts)
        return spans

    def digest(self, path: str, cls_name: str, index: int) -> str:
        if path not in self.files:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            self.files[path] = (text.encode("utf-8"), self._spans(text))
        data, spans = self.files[path]
        cuts = []
        for name, (start, end, elts) in spans.items():
            keep = elts[index] if name == cls_name and index < len(elts) else None
            cuts.append((start, end, data[keep[0] : keep[1]] if keep else b""))
        out, pos = bytearray(), 0
        for start, end, repl in sorted(cuts):
            out += data[pos:start] + repl
            pos = end
        out += data[pos:]
        return hashlib.blake2b(bytes(out), digest_size=12).hexdigest()


def _timeout_secs(item: pytest.Item, overrides: Overrides) -> float | None:
    """The node's own limit: the hook's ``timeout``, else a ``timeout`` marker
    (pytest-timeout's ``@pytest.mark.timeout(90)``)."""
    timeout = overrides.get("timeout")
    if timeout is not None:
        return float(timeout)
    marker = item.get_closest_marker("timeout")
    if marker is None:
        return None
    value: Any = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    try:
        secs = float(value)
    except (TypeError, ValueError):
        return None
    return secs if secs > 0 and math.isfinite(secs) else None


def _devices(u: Unit) -> int:
    devices = u.overrides.get("devices")
    if devices is not None:
        return int(devices)
    if u.case is not None:
        return protocol.devices_of(u.case)
    marker = u.item.get_closest_marker("device_count")
    if marker is not None and marker.args:
        return int(marker.args[0])
    return 1


def _hook_overrides(hook: Any, u: Unit) -> Overrides:
    try:
        over = hook.pytest_scenerun_scene(item=u.item, case=u.case if u.case is not None else {})
    except Exception as e:  # noqa: BLE001 -- the suite's hook failed: say which node
        raise CollectError(f"pytest_scenerun_scene raised for {u.nodeid}: {type(e).__name__}: {e}") from None
    over = over or {}
    if not isinstance(over, Mapping):
        raise CollectError(
            f"pytest_scenerun_scene returned a {type(over).__name__} for {u.nodeid}, not a dict or None"
        )
    _check_overrides(over, u.nodeid)
    return cast(Overrides, over)


_OVERRIDE_TYPES: Mapping[str, tuple[type, ...]] = MappingProxyType(
    {
        "lane": (str,),
        "devices": (int,),
        "tags": (list, tuple),
        "order": (str,),
        "persist": (bool,),
        "skip": (bool, str),
        "timeout": (int, float),
        "phase": (str,),
    }
)


def _check_overrides(over: Mapping[str, Any], nodeid: str) -> None:
    for key, value in over.items():
        kinds = _OVERRIDE_TYPES.get(key)
        if kinds is None:
            known = ", ".join(sorted(_OVERRIDE_TYPES))
            raise CollectError(f"pytest_scenerun_scene for {nodeid}: unknown key {key!r} (known: {known})")
        if value is None:
            continue
        if not isinstance(value, kinds) or (
            key == "devices" and (isinstance(value, bool) or (isinstance(value, int) and value < 1))
        ):
            raise CollectError(f"pytest_scenerun_scene for {nodeid}: {key} = {value!r} is not valid")
    if over.get("phase") not in (None, "device", "warm"):
        raise CollectError(f"pytest_scenerun_scene for {nodeid}: phase must be 'device' or 'warm'")
    if over.get("order") not in (None, "first", "any", "last"):
        raise CollectError(f"pytest_scenerun_scene for {nodeid}: order must be first, any or last")


def _excluded_by(excludes: Mapping[str, str], nodeid: str) -> str | None:
    for prefix, reason in excludes.items():
        if nodeid == prefix or nodeid.startswith(prefix + "::") or nodeid.startswith(prefix + "["):
            return reason
    return None


def _add_warm_steps(scene: Scene, u: Unit, cls: type, case: protocol.Case, opts: Options, sources: _Sources) -> None:
    """The case's fixture and golden steps (a case unit's), into ``scene``."""
    q = shlex.quote
    phase = [opts.python, "-m", "scenerun_pytest"]
    class_id = f"{u.path}::{cls.__name__}"
    digest = sources.digest(u.path, cls.__name__, u.index)
    which = [q(class_id), "--case", q(str(case["name"])), "--source-digest", digest]
    fixture: Step = {"run": _words(*phase, "fixture", *which) + " --out {out} --depfile {depfile}"}
    if u.overrides.get("persist", case.get("scenerun_persist", True)) is False:
        fixture["persist"] = False
    scene["fixture"] = _in_warm(fixture, opts)
    if not protocol.skips_golden(cls, case):
        golden: Step = {
            "run": _words(*phase, "golden", *which) + " --fixture {fixture} --out {out} --depfile {depfile}"
        }
        scene["golden"] = _in_warm(golden, opts)


def _in_warm(step: Step, opts: Options) -> Step:
    """The step, with the identity command and the warm worker collect was given."""
    if opts.identity:
        step["identity"] = opts.identity
    if opts.worker:
        step["worker"] = opts.worker
    return step


def _device(u: Unit, opts: Options) -> Device:
    devices = _devices(u)
    args = [u.arg] if u.case is None or u.per_case_node else [u.arg, f"{CASE_OPTION}={u.case['name']}"]
    if opts.device_mode is DeviceMode.LANE:
        device: Device = {
            "lane": u.overrides.get("lane") or lane_name(opts.lane, devices, opts.lanes),
            "args": args,
            "devices": devices,
        }
    else:
        device = {
            "run": _words(opts.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *map(shlex.quote, args)),
            "devices": devices,
        }
    order = u.overrides.get("order")
    if order:
        device["order"] = order
    timeout = _timeout_secs(u.item, u.overrides)
    if timeout is not None:
        device["timeout"] = f"{int(math.ceil(timeout))}s"
    return device


def _kernels(u: Unit) -> list[Kernel]:
    """SceneTest's ``KERNELS`` (``Kernel`` objects), paths relative to the test file."""
    if u.case is None or u.cls is None:
        return []
    cls_dir = os.path.dirname(str(u.item.path))
    out: list[Kernel] = []
    for k in getattr(u.cls, "KERNELS", ()) or ():
        if not all(hasattr(k, a) for a in ("name", "source")):
            continue
        toolchain: str = getattr(k, "toolchain", "") or getattr(u.cls, "TOOLCHAIN", "cc")
        out.append(
            {
                "name": k.name,
                "toolchain": toolchain,
                "source": _rel(os.path.join(cls_dir, k.source)),
                "include_dirs": [_rel(os.path.join(cls_dir, d)) for d in getattr(k, "include_dirs", ())],
                "flags": list(getattr(k, "flags", ())),
            }
        )
    return out


def _scene(u: Unit, name: str, opts: Options, sources: _Sources) -> Scene:
    marks = [m.name for m in u.item.iter_markers() if m.name not in _BUILTIN_MARKS]
    case_tags = list(u.case.get("tags", ())) if u.case is not None else []
    tags = ["pytest", *getattr(u.cls, "TAGS", ()), *case_tags, *marks, *(u.overrides.get("tags") or ())]
    unique = list(dict.fromkeys(str(t) for t in tags))
    scene: Scene
    if u.case is not None:
        scene = {"name": name, "nodeid": u.nodeid, "case": str(u.case["name"]), "tags": unique}
    else:
        scene = {"name": name, "nodeid": u.nodeid, "tags": unique}
    kernels = _kernels(u)
    if kernels:
        scene["kernels"] = kernels
    if u.case is not None and u.cls is not None:
        _add_warm_steps(scene, u, u.cls, u.case, opts, sources)
    if u.overrides.get("phase") == "warm":
        scene["test"] = _test(u, opts)
    else:
        scene["device"] = _device(u, opts)
    return scene


def _test(u: Unit, opts: Options) -> Step:
    """A CPU-only node (the hook's ``"phase": "warm"``): run in warm, without the lock,
    by ``scenerun_pytest test``, with collect's own options but its paths."""
    args = [u.arg] if u.case is None or u.per_case_node else [u.arg, f"{CASE_OPTION}={u.case['name']}"]
    options = [a for a in opts.pytest_args if a.startswith("-") or not os.path.exists(a.split("::")[0])]
    run = _words(opts.python, "-m", "scenerun_pytest", "test")
    run += " --out {out} --depfile {depfile} -- " + _words(*map(shlex.quote, [*args, *options]))
    step: Step = {"run": run}
    timeout = _timeout_secs(u.item, u.overrides)
    if timeout is not None:
        step["timeout"] = f"{int(math.ceil(timeout))}s"
    if opts.identity:
        step["identity"] = opts.identity
    return step


def scenes_of(items: Sequence[pytest.Item], config: pytest.Config, opts: Options) -> tuple[list[Scene], Coverage]:
    """The scenes of the collected ``items`` (after the suite's own deselection), and
    which nodes they cover."""
    names = protocol.names(config)
    excludes = {**protocol.excludes(config), **opts.excludes}
    coverage = Coverage(total=len(items))
    kept: list[Unit] = []
    for u in units_of(items, config):
        reason = _excluded_by(excludes, u.nodeid)
        if reason is not None:
            coverage.excluded[u.nodeid] = reason
            continue
        u.overrides = _hook_overrides(config.hook, u)
        skip = u.overrides.get("skip")
        if skip:
            # Only a reason excludes a node; a bare `True` leaves it uncovered (exit 4).
            if isinstance(skip, str) and u.nodeid not in coverage.covered:
                coverage.excluded[u.nodeid] = skip
            continue
        coverage.excluded.pop(u.nodeid, None)
        coverage.covered.add(u.nodeid)
        kept.append(u)
    sources = _Sources(names.cases)
    scenes = [_scene(u, name, opts, sources) for u, name in zip(kept, scene_names(kept))]
    return scenes, coverage


class _Collector:
    """Computes the scenes inside the collecting session, where the suite's hooks live."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.scenes: list[Scene] | None = None
        self.coverage: Coverage | None = None
        self.nodeids: list[str] = []
        self.error: CollectError | None = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # After every deselection (-m, -k, the suite's own modifyitems).
        items = list(session.items)
        self.nodeids = [i.nodeid for i in items]
        try:
            self.scenes, self.coverage = scenes_of(items, session.config, self.opts)
        except CollectError as e:
            self.error = e


def collect_scenes(opts: Options) -> tuple[list[Scene], Coverage, list[str]]:
    grab = _Collector(opts)
    args = ["--collect-only", "-qq", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    # pytest's own report goes to stderr: stdout carries the scenes only.
    with contextlib.redirect_stdout(sys.stderr):
        code = int(pytest.main([*args, *opts.pytest_args], plugins=[grab]))
    if grab.error:
        raise grab.error
    tolerated = (0, 5) + ((1,) if "--continue-on-collection-errors" in opts.pytest_args else ())
    if code not in tolerated or grab.scenes is None or grab.coverage is None:
        raise CollectError(f"pytest collection failed (exit {code}); see its report above")
    return grab.scenes, grab.coverage, grab.nodeids


def main(opts: Options) -> int:
    try:
        scenes, coverage, nodeids = collect_scenes(opts)
    except CollectError as e:
        print(f"scenerun_pytest collect: {e}", file=sys.stderr)
        return 4
    print(f"scenerun_pytest collect: {coverage.line()}", file=sys.stderr)
    for nodeid, reason in sorted(coverage.excluded.items()):
        print(f"  excluded: {nodeid}: {reason}", file=sys.stderr)
    uncovered = coverage.uncovered(nodeids)
    if uncovered:
        print(
            f"scenerun_pytest collect: {len(uncovered)} pytest node(s) would not run under scenerun:",
            file=sys.stderr,
        )
        for nodeid in uncovered:
            print(f"  uncovered: {nodeid}", file=sys.stderr)
        print(
            "  exclude one with a reason ([tool.scenerun] exclude, or collect --exclude 'NODE=REASON')",
            file=sys.stderr,
        )
        return 4
    json.dump({"scenes": scenes}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0
