"""A poisoned device runtime restarts the lane (docs/lanes.md, docs/pytest.md).

When a test leaves the device runtime unusable for the tests after it, the lane process
should end and a fresh one on the same card run the rest. The suite says when that is,
in either of two ways:

* it names exception types in ``[tool.scenerun] restart_on`` (pyproject.toml, a list)
  or the ini ``scenerun_restart_on`` (one per line): an exception of such a type (or a
  subclass), by its qualified name (``mypkg.errors.RuntimePoisoned``) or its bare class
  name (``RuntimePoisoned``), poisons the runtime;
* or its conftest implements ``pytest_scenerun_restart(item, excinfo)`` and returns a
  reason (a string, or True) for a failure that poisoned it.

The scene that failed keeps its failure; right after its ``end`` line the plugin writes
``{"event": "restart", "reason": ...}`` and stops the session, and scenerun starts a fresh
process for the scenes not run yet.
"""

from __future__ import annotations

import pytest

INI = "scenerun_restart_on"


def addini(parser: pytest.Parser) -> None:
    parser.addini(INI, "exception types whose raising poisons the device runtime (restart the lane)", type="linelist", default=[])


def _names(config: pytest.Config) -> set[str]:
    from . import protocol

    names = set(config.getini(INI) or [])
    listed = protocol._pyproject(config.rootpath).get("restart_on", [])
    if isinstance(listed, str):
        listed = [listed]
    names.update(n for n in listed if isinstance(n, str) and n)
    return names


def reason(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException] | None) -> str | None:
    """Why this failure of ``item`` poisoned the runtime, or None when it did not."""
    if excinfo is None:
        return None
    said = item.config.hook.pytest_scenerun_restart(item=item, excinfo=excinfo)
    if said:
        return excinfo.typename if said is True else str(said)
    names = _names(item.config)
    if not names:
        return None
    for cls in type(excinfo.value).__mro__:
        qualified = f"{cls.__module__}.{cls.__qualname__}"
        if qualified in names or cls.__qualname__ in names:
            text = str(excinfo.value).strip().splitlines()
            return f"{qualified}: {text[0]}" if text else qualified
    return None
