"""The warm phases of one case, run by ``python -m scenerun_pytest fixture|golden``.

The class is found the way the suite's own run finds it: pytest collects the one node
(``PATH::Class``) with the suite's ini, conftests, import mode and ``sys.path``; the
phase then runs inside that session, so a conftest's ``pytest_scenerun_save`` /
``pytest_scenerun_load`` hooks apply. No test runs. Afterwards the project's Python
files the process imported go into ``--depfile``.

* fixture: ``generate_args(params)``, saved by :mod:`scenerun_pytest.codec`.
* golden: the stored fixture is loaded (``generate_args`` is never called again: an
  unseeded fixture would not match), cloned (``clone()`` when the object has one, else a
  deep copy), and ``compute_golden(clone, params)`` runs. What it returns is the golden;
  when it returns None the clone, changed in place, is. It is saved against the fixture
  (unchanged inputs are references, not copies). With ``SCENERUN_THREADS`` set and torch
  imported, torch's intra-op threads are capped to it meanwhile.
"""

from __future__ import annotations

import contextlib
import copy
import os
import site
import sys
import traceback

import pytest

from . import codec, protocol


class UsageError(Exception):
    """Bad command line or a node id that names no scene class: exit 4."""


def split_nodeid(nodeid: str):
    """``tests/test_x.py::TestX`` (or a test id under it) -> (path, class name)."""
    path, sep, rest = nodeid.partition("::")
    if not sep or not rest:
        raise UsageError(f"node id {nodeid!r} must be PATH::Class")
    return path, rest.split("::")[0].split("[")[0]


class _Phase:
    """A pytest plugin that runs the phase once the node is collected."""

    def __init__(self, phase, cls_name, case, out, fixture):
        self.phase, self.cls_name, self.case, self.out, self.fixture = phase, cls_name, case, out, fixture
        self.items = []
        self.error = None  # (exit code, text)
        self.done = False

    def pytest_itemcollected(self, item):
        # Before the suite's own deselection (a phase needs no --platform).
        cls = getattr(item, "cls", None)
        if cls is not None and cls.__name__ == self.cls_name:
            self.items.append(item)

    def pytest_collection_finish(self, session):
        if not self.items:
            self.error = (4, f"no class {self.cls_name} was collected from that path")
            return
        try:
            run(self.phase, self.items[0], self.case, self.out, self.fixture)
            self.done = True
        except UsageError as e:
            self.error = (4, str(e))
        except Exception:  # noqa: BLE001 -- the user's code failed: show where
            self.error = (1, traceback.format_exc())


def find_case(cls, names, name: str):
    for case in protocol.cases_of(cls, names):
        if isinstance(case, dict) and case.get("name") == name:
            return case
    known = ", ".join(str(c.get("name")) for c in protocol.cases_of(cls, names) if isinstance(c, dict)) or "none"
    raise UsageError(f"{cls.__name__} has no case {name!r} (cases: {known})")


@contextlib.contextmanager
def _thread_cap():
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


def _clone(args):
    clone = getattr(args, "clone", None)
    return clone() if callable(clone) else copy.deepcopy(args)


def run(phase: str, item, case_name: str, out: str, fixture) -> None:
    config = item.config
    names = protocol.names(config)
    cls = item.cls
    if not protocol.is_scene_class(cls, names):
        raise UsageError(f"{cls.__name__} is not a scene class (needs {names.cases}, {names.generate}, {names.golden})")
    case = find_case(cls, names, case_name)
    params = protocol.params_of(case)
    inst = cls()
    hook = config.hook
    if phase == "fixture":
        codec.save(getattr(inst, names.generate)(params), out, hook=hook)
        return
    if not fixture:
        raise UsageError("golden needs --fixture DIR")
    args = _clone(codec.load(fixture, hook=hook))
    with _thread_cap():
        returned = getattr(inst, names.golden)(args, params)
    if returned is None:
        codec.save(args, out, hook=hook, base=fixture, mode="in_place")
    else:
        codec.save(returned, out, hook=hook, base=fixture, mode="returned")


def _outside_dirs():
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # some virtualenv builds lack it
        pass
    dirs.add(site.getusersitepackages())
    return [os.path.realpath(d) for d in dirs if d]


def project_files(root: str):
    """Source files of the modules imported so far that live in the project (under
    ``root``, outside the interpreter's prefix and site-packages), relative to root."""
    root = os.path.realpath(root)
    outside = _outside_dirs()
    found = set()
    for module in list(sys.modules.values()):
        f = getattr(module, "__file__", None)
        if not f:
            continue
        f = os.path.realpath(f)
        if not f.startswith(root + os.sep) or not os.path.isfile(f):
            continue
        if any(f == d or f.startswith(d + os.sep) for d in outside):
            continue
        found.add(os.path.relpath(f, root))
    return sorted(found)


def write_depfile(path: str, root: str, covered=()) -> None:
    """The project files imported, but those ``covered`` (the test module itself: its
    part in the key is the ``--source-digest`` that collect wrote)."""
    covered = {os.path.realpath(c) for c in covered}
    files = [p for p in project_files(root) if os.path.realpath(os.path.join(root, p)) not in covered]
    with open(path, "w") as f:
        for p in files:
            f.write(p + "\n")


def run_phase(phase: str, nodeid: str, case: str, out: str, depfile, fixture, digest=None) -> int:
    path, cls_name = split_nodeid(nodeid)
    if not os.path.isfile(path):
        raise UsageError(f"no such test file: {path}")
    if not os.path.isdir(out):
        raise UsageError(f"--out {out} is not a directory")
    plugin = _Phase(phase, cls_name, case, os.path.abspath(out), fixture and os.path.abspath(fixture))
    args = ["--collect-only", "-qq", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    # pytest's report goes to stderr: a phase's stdout is the step's log either way.
    with contextlib.redirect_stdout(sys.stderr):
        code = pytest.main([*args, f"{path}::{cls_name}"], plugins=[plugin])
    if plugin.error:
        status, text = plugin.error
        if status == 4:
            raise UsageError(text)
        print(text, file=sys.stderr, end="")
        return status
    if not plugin.done:
        print(f"pytest could not collect {path}::{cls_name} (exit {int(code)}); see its report above", file=sys.stderr)
        return 4 if int(code) in (4, 5) else 1
    if depfile:
        write_depfile(depfile, os.getcwd(), [path] if digest else [])
    return 0
