"""``python -m scenerun_pytest collect [PYTEST ARGS...]``: pytest's collection only (no
fixture, golden or device work), with every argument it does not own passed to pytest,
so the suite's own selection applies (``--platform``, ``-m``, ``--manual``, a conftest's
options); then one scene per (scene class, case) the suite would run, as JSON on stdout
for scenerun's ``scenes_from:``."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import re
import shlex
import sys

import pytest

from . import protocol
from .plugin import CASE_OPTION


class CollectError(Exception):
    pass


class _Items:
    """Computes the scenes inside the collecting session, where the suite's hooks live."""

    def __init__(self, opts):
        self.opts = opts
        self.scenes = None
        self.error = None

    def pytest_collection_finish(self, session):
        # After every deselection (-m, -k, the suite's own modifyitems).
        try:
            self.opts.cases_attr = protocol.names(session.config).cases
            rows = rows_of(list(session.items), session.config)
            self.scenes = scenes_of(rows, self.opts, session.config.hook)
        except CollectError as e:
            self.error = e


def collect_scenes(opts):
    grab = _Items(opts)
    args = ["--collect-only", "-qq", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    # pytest's own report goes to stderr: stdout carries the scenes only.
    with contextlib.redirect_stdout(sys.stderr):
        code = int(pytest.main([*args, *opts.pytest_args], plugins=[grab]))
    if grab.error:
        raise grab.error
    tolerated = (0, 5) + ((1,) if "--continue-on-collection-errors" in opts.pytest_args else ())
    if code not in tolerated or grab.scenes is None:
        raise CollectError(f"pytest collection failed (exit {code}); see its report above")
    return grab.scenes


def _safe(name: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"
    if name in (".", ".."):
        name = "_" + name
    if len(name) > 128:
        digest = hashlib.blake2b(name.encode(), digest_size=4).hexdigest()
        name = name[: 128 - 9] + "-" + digest
    return name


def _rel(path: str) -> str:
    return os.path.relpath(os.path.normpath(path), os.getcwd()).replace(os.sep, "/")


def _words(*parts: str) -> str:
    """A shell command for a scenerun template: literal braces doubled."""
    return " ".join(parts).replace("{", "{{").replace("}", "}}")


def lane_name(base: str, devices: int, overrides) -> str:
    if devices in overrides:
        return overrides[devices]
    return base if devices == 1 else f"{base}_x{devices}"


_BUILTIN_MARKS = {"parametrize", "usefixtures", "filterwarnings", "skip", "skipif", "xfail"}


class _Row:
    """One (scene class, case) the suite would run."""

    def __init__(self, item, cls, case, path, node, per_case, index):
        self.item, self.cls, self.case, self.path, self.node = item, cls, case, path, node
        self.index = index  # the case's position in CASES
        self.per_case = per_case  # a SceneTest test_scene[case] node
        self.overrides = {}


def rows_of(items, config):
    names = protocol.names(config)
    platform, manual_mode = protocol.session_filters(config)
    rows = []
    classes = {}  # class -> its own test nodes, for classes without per-case nodes
    for item in items:
        cls = getattr(item, "cls", None)
        if not protocol.is_scene_class(cls, names):
            continue
        path = _rel(str(item.path))
        test_id = path + "::" + item.nodeid.split("::", 1)[1]
        spec = getattr(item, "callspec", None)
        if spec is not None and isinstance(spec.params.get("scene_case"), dict):
            case = spec.params["scene_case"]
            if protocol.selected(case, platform, manual_mode):
                index = next(
                    (i for i, c in enumerate(protocol.cases_of(cls, names)) if c.get("name") == case.get("name")), 0
                )
                rows.append(_Row(item, cls, case, path, test_id, True, index))
            continue
        classes.setdefault(cls, []).append((item, path, test_id))
    for cls, tests in classes.items():
        item, path, test_id = tests[0]
        # One node runs the class's cases; several test functions: the class owns them.
        node = test_id if len(tests) == 1 else f"{path}::{test_id.split('::')[1]}"
        for i, case in enumerate(protocol.cases_of(cls, names)):
            try:
                protocol.case_name(case, cls, i)
            except ValueError as e:
                raise CollectError(f"{path}: {e}") from None
            if protocol.selected(case, platform, manual_mode):
                rows.append(_Row(item, cls, case, path, node, False, i))
    return rows


def _names(rows):
    """``Class.case``, unless two scenes would share it: then as many trailing parts of
    the module path as tell them apart (``a2a3.test_x.Class.case``)."""
    def parts(r):
        p = r.path[:-3] if r.path.endswith(".py") else r.path
        return [x for x in p.split("/") if x]

    names = [f"{r.cls.__name__}.{r.case['name']}" for r in rows]
    depth = [0] * len(rows)
    for _ in range(64):
        seen = {}
        for i, n in enumerate(names):
            seen.setdefault(_safe(n), []).append(i)
        clash = [ix for ix in seen.values() if len(ix) > 1]
        if not clash:
            break
        for ix in clash:
            for i in ix:
                p = parts(rows[i])
                depth[i] = min(depth[i] + 1, len(p))
                names[i] = ".".join(p[len(p) - depth[i] :] + [rows[i].cls.__name__, rows[i].case["name"]])
    return [_safe(n) for n in names]


class _Sources:
    """What of a test file a case's fixture and golden depend on: the file's text with
    the ``CASES`` list of every scene class in it reduced to that one case, so editing
    one case (or adding one) changes no other case's key, while editing anything else in
    the file (a method, a module constant) changes them all. A ``CASES`` that is not a
    literal list counts whole."""

    def __init__(self, cases_attr):
        self.attr = cases_attr
        self.files = {}

    def _parse(self, path):
        if path not in self.files:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            lines = text.splitlines(keepends=True)
            starts = [0]
            for line in lines:
                starts.append(starts[-1] + len(line.encode("utf-8")))
            data = text.encode("utf-8")
            spans = {}  # class name -> (list start, list end, [element (start, end)])
            try:
                tree = ast.parse(text)
            except SyntaxError:
                tree = None
            for node in ast.walk(tree) if tree else ():
                if not isinstance(node, ast.ClassDef):
                    continue
                for stmt in node.body:
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
                    value = getattr(stmt, "value", None)
                    if not any(isinstance(t, ast.Name) and t.id == self.attr for t in targets):
                        continue
                    if isinstance(value, (ast.List, ast.Tuple)) and value.elts and not any(
                        isinstance(e, ast.Starred) for e in value.elts
                    ):

                        def off(line, col):
                            return starts[line - 1] + col

                        elts = [(off(e.lineno, e.col_offset), off(e.end_lineno, e.end_col_offset)) for e in value.elts]
                        spans[node.name] = (elts[0][0], elts[-1][1], elts)
            self.files[path] = (data, spans)
        return self.files[path]

    def digest(self, path, cls_name, index):
        data, spans = self._parse(path)
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


def scenes_of(rows, opts, hook):
    py = opts.python
    q = shlex.quote
    phase = [py, "-m", "scenerun_pytest"]
    scenes = []
    kept = []
    sources = _Sources(opts.cases_attr)
    for r in rows:
        over = hook.pytest_scenerun_scene(item=r.item, case=r.case) or {}
        if not isinstance(over, dict):
            raise CollectError(f"pytest_scenerun_scene returned a {type(over).__name__}, not a dict or None")
        if over.get("skip"):
            continue
        r.overrides = over
        kept.append(r)
    for r, name in zip(kept, _names(kept)):
        cls, case, over = r.cls, r.case, r.overrides
        class_id = f"{r.path}::{cls.__name__}"
        which = [q(class_id), "--case", q(case["name"]), "--source-digest", sources.digest(r.path, cls.__name__, r.index)]
        fixture = {"run": _words(*phase, "fixture", *which) + " --out {out} --depfile {depfile}"}
        if over.get("persist", case.get("scenerun_persist", True)) is False:
            fixture["persist"] = False
        golden = None
        if not protocol.skips_golden(cls, case):
            golden = {"run": _words(*phase, "golden", *which) + " --fixture {fixture} --out {out} --depfile {depfile}"}
        if opts.identity:
            fixture["identity"] = opts.identity
            if golden:
                golden["identity"] = opts.identity
        if getattr(opts, "worker", None):
            fixture["worker"] = opts.worker
            if golden:
                golden["worker"] = opts.worker
        devices = int(over.get("devices", protocol.devices_of(case)))
        args = [r.node] if r.per_case else [r.node, f"{CASE_OPTION}={case['name']}"]
        if opts.device_mode == "lane":
            lane = over.get("lane") or lane_name(opts.lane, devices, opts.lanes)
            device = {"lane": lane, "args": args, "devices": devices}
        else:
            device = {
                "run": _words(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *map(q, args)),
                "devices": devices,
            }
        if over.get("order"):
            device["order"] = over["order"]
        marks = [m.name for m in r.item.iter_markers() if m.name not in _BUILTIN_MARKS]
        tags = ["pytest", *getattr(cls, "TAGS", ()), *case.get("tags", ()), *marks, *over.get("tags", ())]
        scene = {"name": name, "tags": list(dict.fromkeys(tags))}
        kernels = _kernels(r)
        if kernels:
            scene["kernels"] = kernels
        scene["fixture"] = fixture
        if golden:
            scene["golden"] = golden
        scene["device"] = device
        scenes.append(scene)
    return scenes


def _kernels(r):
    """SceneTest's ``KERNELS`` (``Kernel`` objects), paths relative to the test file."""
    cls_dir = os.path.dirname(str(r.item.path))
    out = []
    for k in getattr(r.cls, "KERNELS", ()) or ():
        if not all(hasattr(k, a) for a in ("name", "source")):
            continue
        out.append(
            {
                "name": k.name,
                "toolchain": getattr(k, "toolchain", None) or getattr(r.cls, "TOOLCHAIN", "cc"),
                "source": _rel(os.path.join(cls_dir, k.source)),
                "include_dirs": [_rel(os.path.join(cls_dir, d)) for d in getattr(k, "include_dirs", ())],
                "flags": list(getattr(k, "flags", ())),
            }
        )
    return out


def main(opts) -> int:
    try:
        scenes = collect_scenes(opts)
    except CollectError as e:
        print(f"scenerun_pytest collect: {e}", file=sys.stderr)
        return 1
    json.dump({"scenes": scenes}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0
