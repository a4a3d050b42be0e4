"""The warm phases of one case, run by ``python -m scenerun_pytest fixture|golden``.

The class is found the way the suite's own run finds it: pytest collects the one node
(``PATH::Class``) with the suite's ini, conftests, import mode and ``sys.path``; the
phase then runs inside that session, so a conftest's ``pytest_scenerun_save`` /
``pytest_scenerun_load`` hooks apply. No test runs. A warm worker
(:mod:`scenerun_pytest.worker`) runs the same phase on the class it collected once.

Invariant: a step's ``--depfile`` is what *that step* read (``step_deps``, one function
for a process and a worker): the conftests pytest loaded for the node, the suite's ini,
the project modules the class's module imports and those the step imported while it
ran, never what else the process had imported.

* fixture: ``generate_args(params)``, saved by :mod:`scenerun_pytest.codec`.
* golden: the stored fixture is loaded (``generate_args`` is never called again: an
  unseeded fixture would not match), cloned (``clone()`` when the object has one, else a
  deep copy), and ``compute_golden(clone, params)`` runs. What it returns is the golden;
  when it returns None the clone, changed in place, is. It is saved against the fixture
  (unchanged inputs are references, not copies). With ``SCENERUN_THREADS`` set and torch
  imported, torch's intra-op threads are capped to it meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import enum
import os
import site
import sys
import traceback
from types import ModuleType
from typing import Any, Iterable, Iterator, Mapping, Sequence

import pytest

from . import codec, protocol


class UsageError(Exception):
    """Bad command line or a node id that names no scene class: exit 4."""


class Phase(enum.Enum):
    """A warm step of a case: its fixture, or its golden (the ``python -m scenerun_pytest``
    command of the same name)."""

    FIXTURE = "fixture"
    GOLDEN = "golden"


def split_nodeid(nodeid: str) -> tuple[str, str]:
    """``tests/test_x.py::TestX`` (or a test id under it) -> (path, class name)."""
    path, sep, rest = nodeid.partition("::")
    if not sep or not rest:
        raise UsageError(f"node id {nodeid!r} must be PATH::Class")
    return path, rest.split("::")[0].split("[")[0]


class _Phase:
    """A pytest plugin that runs the phase once the node is collected."""

    def __init__(
        self,
        phase: Phase,
        cls_name: str,
        case: str,
        out: str,
        fixture: str | None,
        imports: ImportLog,
        covered: Sequence[str],
    ):
        self.phase, self.cls_name, self.case, self.out, self.fixture = phase, cls_name, case, out, fixture
        self.imports, self.covered = imports, covered
        self.items: list[pytest.Function] = []
        self.error: tuple[int, str] | None = None  # (exit code, text)
        self.deps: list[str] | None = None  # the depfile's lines, once the phase ran

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        # Before the suite's own deselection (a phase needs no --platform).
        cls = getattr(item, "cls", None)
        if isinstance(item, pytest.Function) and cls is not None and cls.__name__ == self.cls_name:
            self.items.append(item)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not self.items:
            self.error = (4, f"no class {self.cls_name} was collected from that path")
            return
        try:
            self.deps = run_step(self.phase, self.items[0], self.case, self.out, self.fixture, self.imports, self.covered)
        except UsageError as e:
            self.error = (4, str(e))
        except Exception:  # noqa: BLE001 -- the user's code failed: show where
            self.error = (1, traceback.format_exc())


def find_case(cls: type, names: protocol.Names, name: str) -> protocol.Case:
    for case in protocol.cases_of(cls, names):
        if isinstance(case, dict) and case.get("name") == name:
            return case
    known = ", ".join(str(c.get("name")) for c in protocol.cases_of(cls, names) if isinstance(c, dict)) or "none"
    raise UsageError(f"{cls.__name__} has no case {name!r} (cases: {known})")


@contextlib.contextmanager
def _thread_cap() -> Iterator[None]:
    torch = sys.modules.get("torch")
    threads = os.environ.get("SCENERUN_THREADS")
    if torch is None or not threads or not threads.isdigit() or not hasattr(torch, "set_num_threads"):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(min(int(threads), before))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _clone(args: Any) -> Any:
    clone = getattr(args, "clone", None)
    return clone() if callable(clone) else copy.deepcopy(args)


def run(phase: Phase, item: pytest.Function, case_name: str, out: str, fixture: str | None) -> None:
    config = item.config
    names = protocol.names(config)
    cls = item.cls
    if cls is None or not protocol.is_scene_class(cls, names):
        raise UsageError(f"{cls.__name__} is not a scene class (needs {names.cases}, {names.generate}, {names.golden})")
    case = find_case(cls, names, case_name)
    params = protocol.params_of(case)
    inst = cls()
    hook = config.hook
    if phase is Phase.FIXTURE:
        codec.save(getattr(inst, names.generate)(params), out, hook=hook)
        return
    if not fixture:
        raise UsageError("golden needs --fixture DIR")
    args = _clone(codec.load(fixture, hook=hook))
    with _thread_cap():
        returned = getattr(inst, names.golden)(args, params)
    if returned is None:
        codec.save(args, out, hook=hook, base=fixture, mode=codec.GoldenMode.IN_PLACE)
    else:
        codec.save(returned, out, hook=hook, base=fixture, mode=codec.GoldenMode.RETURNED)


def _outside_dirs() -> list[str]:
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # some virtualenv builds lack it
        pass
    dirs.add(site.getusersitepackages())
    return [os.path.realpath(d) for d in dirs if d]


#: Where a worker leaves its import edges for the logs of its forks (``ImportLog``).
INHERITED = "_scenerun_import_edges"


class ImportLog:
    """Which project module imported which, and what a step imported while it ran.

    Installed before pytest starts (``install``), it wraps ``__import__`` and
    ``importlib.import_module``: every import statement a project module (a file under
    ``root``, outside the interpreter's prefix and site-packages) executes is an edge
    from it to the names imported, whether the module was loaded then or long before.
    While a step runs (``touched`` is a set), every import statement executed, by any
    module, adds its names there instead. So what a step depends on is computed from
    the node, not from what else the process happened to import: a worker that
    collected the whole suite and a process that collected one class give the same
    depfile.
    """

    def __init__(self, root: str):
        self.root = os.path.realpath(root)
        self.outside = _outside_dirs()
        self.edges: dict[str, set[str]] = {}  # importer module name -> names it imported
        self.touched: set[str] | None = None  # a set while a step runs
        self._project: dict[str, str | None] = {}  # module name -> its project file, or None
        # In a fork of the worker: the edges its log recorded while it preloaded project
        # modules (their import statements ran there, not here).
        inherited = getattr(sys, INHERITED, None)
        if isinstance(inherited, tuple) and inherited[0] == self.root:
            self.edges = {k: set(v) for k, v in inherited[1].items()}

    def hand_down(self) -> None:
        """Leave the edges recorded so far where a fork's own log finds them."""
        setattr(sys, INHERITED, (self.root, self.edges))

    def install(self) -> None:
        import builtins
        import importlib

        original, import_module = builtins.__import__, importlib.import_module

        def logged_import(
            name: str,
            globals: Mapping[str, object] | None = None,
            locals: Mapping[str, object] | None = None,
            fromlist: Sequence[str] | None = (),
            level: int = 0,
        ) -> ModuleType:
            module = original(name, globals, locals, fromlist, level)
            self._record(name, globals, fromlist, level)
            return module

        def logged_import_module(name: str, package: str | None = None) -> ModuleType:
            module = import_module(name, package)
            self._record(name, sys._getframe(1).f_globals, (), 0, package)
            return module

        builtins.__import__ = logged_import
        importlib.import_module = logged_import_module

    def _record(
        self,
        name: str,
        importer: Mapping[str, Any] | None,
        fromlist: Sequence[str] | None,
        level: int,
        package: str | None = None,
    ) -> None:
        try:
            if level or name.startswith("."):
                import importlib.util

                base = package or (importer or {}).get("__package__") or ""
                name = importlib.util.resolve_name("." * level + name, base)
            names = [name, *(f"{name}.{f}" for f in (fromlist or ()) if isinstance(f, str) and f != "*")]
            if self.touched is not None:
                self.touched.update(names)
                return
            who = (importer or {}).get("__name__")
            if who and self._file(who, (importer or {}).get("__file__")):
                self.edges.setdefault(who, set()).update(names)
        except Exception:  # noqa: BLE001 -- a record never breaks an import
            pass

    def _file(self, name: str, file: str | None = None) -> str | None:
        """The project file of module ``name`` (None: not a project module)."""
        if name in self._project:
            return self._project[name]
        if file is None:
            file = getattr(sys.modules.get(name), "__file__", None)
        found = None
        if file:
            f = os.path.realpath(file)
            inside = f.startswith(self.root + os.sep) and os.path.isfile(f)
            if inside and not any(f == d or f.startswith(d + os.sep) for d in self.outside):
                found = f
        if found or name in sys.modules:
            self._project[name] = found
        return found

    def files(self, roots: Iterable[str]) -> set[str]:
        """The project files of ``roots`` (module names) and of what they import, as far
        as project modules go (a package's ``__init__`` counts for its submodules)."""
        seen: set[str] = set()
        found: set[str] = set()
        todo = list(roots)
        while todo:
            parts = todo.pop().split(".")
            for i in range(1, len(parts) + 1):
                name = ".".join(parts[:i])
                if name in seen:
                    continue
                seen.add(name)
                f = self._file(name)
                if f:
                    found.add(f)
                    todo.extend(self.edges.get(name, ()))
        return found


def _conftests(item: pytest.Item) -> list[str]:
    """The conftest.py files pytest loaded for the node: those in its directory and the
    directories above it (the rootdir's included)."""
    here = os.path.realpath(str(item.path))
    found = []
    for plugin in item.config.pluginmanager.get_plugins():
        f = getattr(plugin, "__file__", None)
        if not f or os.path.basename(f) != "conftest.py":
            continue
        f = os.path.realpath(f)
        if here.startswith(os.path.dirname(f) + os.sep):
            found.append(f)
    return found


def _configs(config: pytest.Config) -> list[str]:
    """The suite's ini file, and its pyproject.toml when that has ``[tool.scenerun]``."""
    found = []
    if config.inipath and os.path.isfile(str(config.inipath)):
        found.append(os.path.realpath(str(config.inipath)))
    pyproject = os.path.join(str(config.rootpath), "pyproject.toml")
    if os.path.isfile(pyproject):
        with open(pyproject, encoding="utf-8", errors="replace") as f:
            if any(line.strip().startswith("[tool.scenerun") for line in f):
                found.append(os.path.realpath(pyproject))
    return found


def step_deps(item: pytest.Item, touched: Iterable[str], imports: ImportLog, covered: Iterable[str] = ()) -> list[str]:
    """What one step read, for its depfile (relative to the project root, sorted): the
    conftests pytest loaded for the node, the suite's ini (and pyproject.toml with
    ``[tool.scenerun]``), the project modules the class's module imports (transitively)
    and those the step imported while it ran, but ``covered`` (the test module itself:
    its part in the key is the ``--source-digest`` that collect wrote). The one
    computation, for a process and a worker alike."""
    module: ModuleType = getattr(item, "module")  # a Python test's (pytest.Function's) module
    roots = [module.__name__, *touched]
    files = imports.files(roots)
    own = imports._file(module.__name__, getattr(module, "__file__", None))
    if own:
        files.add(own)
    files.update(f for f in _conftests(item) + _configs(item.config) if f.startswith(imports.root + os.sep))
    skip = {os.path.realpath(c) for c in covered}
    return sorted(os.path.relpath(f, imports.root) for f in files if f not in skip)


def run_step(
    phase: Phase,
    item: pytest.Function,
    case: str,
    out: str,
    fixture: str | None,
    imports: ImportLog,
    covered: Sequence[str] = (),
) -> list[str]:
    """Run the phase on a collected item; the lines of its depfile."""
    touched: set[str] = set()
    imports.touched = touched
    try:
        run(phase, item, case, out, fixture)
    finally:
        imports.touched = None
    return step_deps(item, touched, imports, covered)


def write_depfile(path: str, lines: Iterable[str]) -> None:
    with open(path, "w") as f:
        for p in lines:
            f.write(p + "\n")


def check_paths(path: str, out: str) -> None:
    if not os.path.isfile(path):
        raise UsageError(f"no such test file: {path}")
    if not os.path.isdir(out):
        raise UsageError(f"--out {out} is not a directory")


def run_phase(
    phase: Phase, nodeid: str, case: str, out: str, depfile: str | None, fixture: str | None, digest: str | None = None
) -> int:
    path, cls_name = split_nodeid(nodeid)
    check_paths(path, out)
    imports = ImportLog(os.getcwd())
    imports.install()
    covered = [path] if digest else []
    plugin = _Phase(phase, cls_name, case, os.path.abspath(out), fixture and os.path.abspath(fixture), imports, covered)
    # pytest's report goes to stderr: a phase's stdout is the step's log either way.
    with contextlib.redirect_stdout(sys.stderr):
        code = int(pytest.main([*COLLECT_ARGS, f"{path}::{cls_name}"], plugins=[plugin]))
    if plugin.error:
        status, text = plugin.error
        if status == 4:
            raise UsageError(text)
        print(text, file=sys.stderr, end="")
        return status
    if plugin.deps is None:
        print(f"pytest could not collect {path}::{cls_name} (exit {int(code)}); see its report above", file=sys.stderr)
        return 4 if int(code) in (4, 5) else 1
    if depfile:
        write_depfile(depfile, plugin.deps)
    return 0


#: How a phase (and a worker) runs pytest: collection only, no cache, quiet.
COLLECT_ARGS = ("--collect-only", "-qq", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning")


def phase_parser(phase: str) -> argparse.ArgumentParser:
    """The command line of ``python -m scenerun_pytest fixture|golden`` (and of a worker's
    requests, which carry the same words)."""
    f = argparse.ArgumentParser(prog=f"python -m scenerun_pytest {phase}", allow_abbrev=False)
    f.add_argument("nodeid", help="PATH::Class")
    f.add_argument("--case", required=True)
    f.add_argument("--out", required=True)
    f.add_argument("--depfile", default=None)
    f.add_argument(
        "--source-digest",
        default=None,
        help="what of the test file the step depends on (written by collect; part of the key)",
    )
    if phase == "golden":
        f.add_argument("--fixture", required=True)
    return f
