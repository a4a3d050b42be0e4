"""The plugin keeps no module-global mutable state: a module's top level binds constants
only (strings, numbers, tuples, frozensets, read-only mappings, classes, functions), and
no function rebinds a module global. Session state lives on objects the session owns
(``config.stash``, the plugins it registers)."""

import ast
import pathlib

import pytest

import scenerun_pytest

PACKAGE = pathlib.Path(scenerun_pytest.__file__).parent
MODULES = sorted(PACKAGE.glob("*.py"))
MUTABLE = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
MUTABLE_CALLS = {"dict", "list", "set", "bytearray", "defaultdict", "OrderedDict", "Counter", "deque"}


def _mutable(value: ast.expr) -> bool:
    if isinstance(value, MUTABLE):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name in MUTABLE_CALLS
    return False


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_a_module_binds_constants_only(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        else:
            continue
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if names != ["__all__"] and _mutable(value):
            bad.append(f"{path.name}:{stmt.lineno}: {', '.join(names)}")
    bad += [f"{path.name}:{n.lineno}: global {', '.join(n.names)}" for n in ast.walk(tree) if isinstance(n, ast.Global)]
    assert not bad, "module-global mutable state:\n" + "\n".join(bad)


def test_every_module_is_checked():
    assert len(MODULES) >= 15
