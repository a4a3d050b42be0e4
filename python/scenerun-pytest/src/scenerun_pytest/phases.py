"""The warm phases of one case, run by ``python -m scenerun_pytest fixture|golden``:
import the test class the way pytest would, compute, write the tensors into ``--out``
and the project's Python files the phase imported into ``--depfile``."""

from __future__ import annotations

import importlib
import os
import site
import sys

from . import tensors


class UsageError(Exception):
    """Bad command line or a node id that names no scene test: exit 4."""


def split_nodeid(nodeid: str):
    """``tests/test_x.py::TestX`` (or a test id under it) -> (path, class name)."""
    path, sep, rest = nodeid.partition("::")
    if not sep or not rest:
        raise UsageError(f"node id {nodeid!r} must be PATH::Class")
    return path, rest.split("::")[0]


def import_class(nodeid: str):
    """Import the module as pytest's default ("prepend") import mode does: the first
    directory upwards without ``__init__.py`` goes first on ``sys.path``, the module is
    imported under its dotted name from there."""
    path, cls_name = split_nodeid(nodeid)
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise UsageError(f"no such test file: {path}")
    base = os.path.dirname(path)
    parts = [os.path.splitext(os.path.basename(path))[0]]
    while os.path.isfile(os.path.join(base, "__init__.py")):
        parts.insert(0, os.path.basename(base))
        base = os.path.dirname(base)
    if base not in sys.path:
        sys.path.insert(0, base)
    module = importlib.import_module(".".join(parts))
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise UsageError(f"{path} has no class {cls_name}")
    return cls


def find_case(cls, name: str):
    for case in cls.CASES:
        if case.get("name") == name:
            return case
    names = ", ".join(str(c.get("name")) for c in cls.CASES) or "none"
    raise UsageError(f"{cls.__name__} has no case {name!r} (cases: {names})")


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


def write_depfile(path: str, root: str) -> None:
    files = project_files(root)
    with open(path, "w") as f:
        for p in files:
            f.write(p + "\n")


def run_phase(phase: str, nodeid: str, case: str, out: str, depfile, fixture) -> None:
    cls = import_class(nodeid)
    params = dict(find_case(cls, case).get("params", {}))
    if not os.path.isdir(out):
        raise UsageError(f"--out {out} is not a directory")
    inst = cls()
    if phase == "fixture":
        tensors.save(out, inst.generate_args(params))
    else:
        if not fixture:
            raise UsageError("golden needs --fixture DIR")
        tensors.save(out, inst.compute_golden(tensors.load(fixture), params))
    if depfile:
        write_depfile(depfile, os.getcwd())
